"""Options <-> command-line flags, both directions from the table: argparse flags, values from parsed args, and
the flags that reproduce a set of values (what ``mlite run`` records and the widgets print)."""

from __future__ import annotations

import dataclasses
import math
import shlex

from ..errors import MliteError
from .table import GPU_MEMORY_GIB


def _flag_rows(rows, skip_groups=()) -> dict[str, list]:
    """``flag -> [rows]`` in table order (rows sharing a flag are set together)."""
    out: dict[str, list] = {}
    for r in rows:
        if r.flag and r.group not in skip_groups:
            out.setdefault(r.flag, []).append(r)
    return out


def add_flags(parser, rows, *, skip_groups=("mesh",), groups: dict | None = None) -> dict:
    """Add the flags of ``rows`` to ``parser`` (argparse groups by the rows' ``group``, made unless ``groups`` holds
    one of that title; ``mesh`` rows are added by :func:`mlite.cli.mesh.add_mesh_flags`); returns the groups."""
    groups = dict(groups or {})
    for flag, same in _flag_rows(rows, skip_groups).items():
        r = same[0]
        if r.group is not None and r.group not in groups:
            groups[r.group] = parser.add_argument_group(r.group)
        target = parser if r.group is None else groups[r.group]
        kw: dict = {"help": r.help}
        if r.cli in ("switch", "negate"):
            kw["action"] = "store_true"
        else:
            kw["type"] = str if r.cli == "gpu" else {int: int, float: float}.get(r.type, str)
            kw["default"] = _text(r, r.default) if r.type is tuple or r.cli == "gpu" else r.default
            if r.choices:
                kw["choices"] = r.choices
            if r.metavar:
                kw["metavar"] = r.metavar
        if r.required:
            kw["required"] = True
            kw.pop("default", None)
        target.add_argument(flag, **kw)
    return groups


def gpu_gib(text: str, flag: str) -> float:
    """GiB of a ``--gpu-mem`` argument: a GPU name (:data:`GPU_MEMORY_GIB`) or a finite positive number."""
    name = str(text).upper()
    if name in GPU_MEMORY_GIB:
        return GPU_MEMORY_GIB[name]
    try:
        gib = float(text)
    except ValueError:
        gib = math.nan
    if not 0.0 < gib < math.inf:
        raise MliteError(f"{flag} {text!r}: give a positive number of GiB or one of {', '.join(GPU_MEMORY_GIB)}")
    return gib


def values_from_args(args, rows) -> dict:
    """``field -> value`` for every row with a flag, from argparse's namespace."""
    out = {}
    named = ""  # a --gpu-mem that names a GPU: the GPU model when --gpu is not given
    for r in rows:
        if not r.flag:
            continue
        v = getattr(args, r.dest)
        if r.cli == "switch":
            v = bool(v)
        elif r.cli == "negate":
            v = not v
        elif r.cli == "gpu":
            named = str(v).upper() if str(v).upper() in GPU_MEMORY_GIB else ""
            v = gpu_gib(v, r.flag)
        elif r.type is tuple:
            v = tuple(m for m in str(v or "").split(",") if m)
        out[r.field] = v
    if "gpu" in out and not out["gpu"] and named:
        out["gpu"] = named
    return out


def _text(r, v) -> str:
    """A value as the flag's argument."""
    if r.type is tuple:
        return ",".join(v)
    if r.cli == "gpu":
        names = [k for k, gib in GPU_MEMORY_GIB.items() if gib == float(v)]
        return names[0] if len(names) == 1 else format(float(v), "g")
    return str(v)


def command_args(values, rows, *, skip_groups=(), exclude=()) -> list[str]:
    """The flags that reproduce ``values`` (a dataclass or dict): required flags always, others when not at the
    table's default. Raises :class:`MliteError` when rows sharing one flag hold different values."""
    if dataclasses.is_dataclass(values):
        values = {f.name: getattr(values, f.name) for f in dataclasses.fields(values)}
    out: list[str] = []
    for flag, same in _flag_rows(rows, skip_groups).items():
        same = [r for r in same if r.field not in exclude and r.field in values]
        if not same:
            continue
        r, v = same[0], values[same[0].field]
        for other in same[1:]:
            if values[other.field] != v:
                raise MliteError(
                    f"{other.field}={values[other.field]!r} differs from {r.field}={v!r}: {flag} sets "
                    "both, the command line cannot say this"
                )
        if not r.required and v == r.default:
            continue
        if r.cli in ("switch", "negate"):
            out.append(flag)  # a switch differs from its default only when given
        else:
            out += [flag, _text(r, v)]
    return out


def memory_flags(options) -> list[str]:
    """The ``mlite memory`` / ``mlite export`` option flags (shell-quoted words) that reproduce a
    :class:`~mlite.options.TrainingOptions`, after the mesh flags (``--seq-len``, ``--gpus-per-node``)."""
    from .table import TRAINING

    return [shlex.quote(a) for a in command_args(options, TRAINING, skip_groups=("mesh",))]
