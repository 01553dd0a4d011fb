"""Options <-> verl Hydra overrides, both directions from :data:`mlite.options.table.TRAINING`.

* :func:`target_view`: the options a target really runs (what it cannot express replaced, couplings applied),
  with the exporter's notes;
* :func:`write`: the launcher knobs and overrides of those options for one target;
* :func:`read`: the reverse, from parsed overrides (``mlite import-launcher``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace

from .codecs import CODECS
from .schema import DEFAULT, KEEP, ByMode, Codec, Key, NotExpressible
from .table import ROOTS, TARGETS, TRAINING


@dataclass
class Written:
    """What :func:`write` returns."""

    knobs: list = field(default_factory=list)
    """``(name, default text, comment)`` of the launcher knobs, in table order."""
    overrides: list = field(default_factory=list)
    """``(key, value, add, knob)``: ``knob`` set means the value is ``${KNOB}``, else ``value`` is literal."""
    notes: list = field(default_factory=list)
    """What the target does not run as given."""


def mapping(row, backend: str, is_sft: bool):
    """The row's mapping for a launcher of ``backend`` (``mlite``, ``megatron``; ``fsdp``: data keys only)."""
    m = row.megatron if backend == "megatron" else row.mlite
    if backend == "fsdp" and not isinstance(m, ByMode):
        return None
    if isinstance(m, ByMode):
        m = m.sft if is_sft else m.grpo
    return m


def fill(template: str, backend: str, is_sft: bool) -> str:
    """A key template with ``{engine}``, ``{optim}``, ``{actor}``, ``{megatron}`` filled in."""
    return template.format(**ROOTS[(backend, is_sft)])


def _as_dict(options) -> dict:
    return {f.name: getattr(options, f.name) for f in fields(options)}


def _verl_value(m: Key, v):
    return next((b for a, b in m.values if a == v), v)


def _option_value(m: Key, v):
    return next((a for a, b in m.values if b == v), v)


def _fmt(v) -> str:
    if isinstance(v, bool):
        return "True" if v else "False"
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def target_view(options, target: str, ctx: dict | None = None):
    """``(options, notes)``: ``options`` as ``target`` runs them; ``ctx``: ``tp``, ``moe`` of the mesh."""
    backend, is_sft = TARGETS[target]
    ctx = ctx or {}
    o = _as_dict(options)
    changes, notes, seen = {}, [], set()
    for row in TRAINING:
        m = mapping(row, backend, is_sft)
        v = o[row.field]
        if isinstance(m, NotExpressible) and m.runs is not KEEP:
            runs = row.default if m.runs == DEFAULT else m.runs
            if v != runs:
                notes.append(f"{row.field}={_fmt(v)} is not exported: {m.reason}")
                changes[row.field] = runs
                changes.update(dict(m.folds))
        elif isinstance(m, Key) and m.requires and not o[m.requires] and v != row.default:
            changes[row.field] = row.default  # no effect without its prerequisite (remainders without PAO)
        elif isinstance(m, Codec) and m.name not in seen:
            seen.add(m.name)
            ch, n = CODECS[m.name][0]({**o, **changes}, ctx)
            changes.update(ch)
            notes += n
    return replace(options, **changes), notes


def write(options, target: str, ctx: dict | None = None) -> Written:
    """The knobs and overrides that carry ``options`` (already :func:`target_view`-ed) on ``target``."""
    backend, is_sft = TARGETS[target]
    ctx = ctx or {}
    o = _as_dict(options)
    out, seen = Written(), set()

    def emit(row, key, value, add, knob):
        if knob:
            short = key.removeprefix("actor_rollout_ref.actor.")
            comment = (" | ".join(row.choices) + f" ({short})") if row.choices else short
            out.knobs.append((knob, _fmt(value), comment))
        out.overrides.append((key, value, add, knob))

    for row in TRAINING:
        m = mapping(row, backend, is_sft)
        if isinstance(m, Key) and m.write in ("always", "changed"):
            v = o[row.field]
            if m.requires and not o[m.requires]:
                continue
            if m.write == "changed" and v == (row.default if m.verl_default is None else m.verl_default):
                continue
            emit(row, fill(m.key, backend, is_sft), _verl_value(m, v), m.add, m.knob)
        elif isinstance(m, Codec) and m.name not in seen:
            seen.add(m.name)
            keys = [fill(k, backend, is_sft) for k in m.keys]
            for e in CODECS[m.name][1](o, ctx, keys):
                emit(row, e.key, e.value, e.add, e.knob)
    return out


def _typed(row, v):
    """``v`` as the row's type, or raise ValueError."""
    if row.type is bool:
        if isinstance(v, bool):
            return v
        raise ValueError
    if row.type is int:
        if isinstance(v, int) and not isinstance(v, bool) and v >= (0 if row.default == 0 else 1):  # 0: chunk MiB
            return v
        raise ValueError
    if row.type is float:
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return float(v)
        raise ValueError
    if row.type is tuple:
        return tuple(str(x) for x in (v if isinstance(v, (list, tuple)) else [v]))
    v = str(v)
    if row.choices and v not in row.choices:
        raise ValueError
    return v


def read(ovs, *, backend: str, is_sft: bool) -> tuple[dict, set, list[str]]:
    """``(TrainingOptions kwargs, consumed keys, warnings)`` from parsed overrides (``.key``, ``.value``)."""
    by = {o.key: o.value for o in ovs}
    opts: dict = {}
    used: set = set()
    warnings: list[str] = []
    seen = set()

    unresolved: set = set()

    def get(key, default=None):
        if key in by:
            used.add(key)
            v = by[key]
            if isinstance(v, str) and ("${" in v or "$(" in v):  # not expanded: unresolved, not a value
                if key not in unresolved:
                    unresolved.add(key)
                    warnings.append(f"{key}={v}: unresolved; not used")
                return default
            return v
        return default

    for row in TRAINING:
        m = mapping(row, backend, is_sft)
        if isinstance(m, NotExpressible) and m.runs not in (KEEP, DEFAULT):
            opts[row.field] = m.runs
        elif isinstance(m, Key) and m.write != "cluster":
            if m.requires and not opts.get(m.requires):
                continue
            key = fill(m.key, backend, is_sft)
            v = next((get(k) for k in [key] + [fill(a, backend, is_sft) for a in m.aliases] if k in by), None)
            if v is None:
                if key in unresolved:
                    continue
                if m.verl_default is not None and m.verl_default != row.default:
                    opts[row.field] = m.verl_default
                continue
            try:
                opts[row.field] = _typed(row, _option_value(m, v))
            except ValueError:
                want = f"one of {', '.join(row.choices)}" if row.choices else f"a {row.type.__name__}"
                warnings.append(f"{key}={v!r}: expected {want} for {row.field}; not used")
        elif isinstance(m, Codec) and m.name not in seen:
            seen.add(m.name)
            keys = [fill(k, backend, is_sft) for k in m.keys]
            opts.update(CODECS[m.name][2](get, opts, {}, keys, warnings.append))
    return opts, used, warnings


def not_expressible(target: str) -> dict[str, str]:
    """``field -> reason`` of the options ``target`` has no key for (the round-trip tests skip exactly these)."""
    backend, is_sft = TARGETS[target]
    return {r.field: m.reason for r in TRAINING if isinstance(m := mapping(r, backend, is_sft), NotExpressible)}
