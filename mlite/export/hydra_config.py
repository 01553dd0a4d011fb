"""The config a launcher names with ``--config-path`` / ``--config-name``, read as Hydra composes it: the primary YAML
and its ``defaults:`` list as far as it names files beside it (``- ppo_megatron_trainer``, ``- actor@actor_rollout_ref
.actor: megatron_actor``, ``_self_``), each placed at its package; values with ``${...}`` interpolation are left out.
What could not be read (a file not there, a search-path config, ``optional`` / ``override`` entries) is named.

Composition order as Hydra 1.3 builds it (https://hydra.cc/docs/advanced/defaults_list/): entries in list order,
``_self_`` where it stands (last when missing); a group entry ``group@pkg: option`` reads ``group/option.yaml`` into
``pkg`` (the group's path by default); a plain entry ``name`` reads ``name.yaml`` of the containing config's group into
its package.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import yaml

from .overrides import ParsedOverride

_MAX_DEPTH = 8


@dataclass
class ReadConfig:
    """What reading a launcher's config found."""

    values: list[ParsedOverride] = field(default_factory=list)
    """Every scalar or list the files set, as overrides with :attr:`ParsedOverride.origin` set (composition order)."""
    files: list[str] = field(default_factory=list)
    """Files read, relative to the config folder."""
    unread: list[str] = field(default_factory=list)
    """``NAME (why)`` for each part that could not be read."""


def _flat(node, prefix: str, origin: str, out: dict) -> None:
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "defaults" and not prefix:
                continue
            _flat(v, f"{prefix}.{k}" if prefix else str(k), origin, out)
        return
    if isinstance(node, str) and "${" in node:
        out.pop(prefix, None)  # an interpolation: not a value here
        return
    out[prefix] = ParsedOverride(key=prefix, value=node, raw=str(node), origin=origin)


def _entries(defaults, group: str, package: str):
    """``(file relative to the config folder, package, shown name)`` per entry, ``None`` file for ``_self_``, or
    ``(None, None, why)`` for an entry that is not read."""
    for e in defaults or []:
        if e == "_self_":
            yield "_self_", package, "_self_"
        elif isinstance(e, str):
            name = e.removesuffix(".yaml")
            yield (f"{group}/{name}" if group else name), package, e
        elif isinstance(e, dict) and len(e) == 1:
            ((k, v),) = e.items()
            k = str(k)
            if v is None:
                continue
            if k.startswith(("override ", "optional ")) or k.startswith("hydra"):
                yield None, None, f"{k}: {v} (not read)"
                continue
            g, _, pkg = k.partition("@")
            g_path = f"{group}/{g}" if group else g
            if pkg in ("_here_", "_global_"):
                pkg = package if pkg == "_here_" else ""
            else:  # relative to the containing config's package; the group's name by default
                rel = pkg or g.replace("/", ".")
                pkg = f"{package}.{rel}" if package else rel
            yield f"{g_path}/{str(v).removesuffix('.yaml')}", pkg, f"{k}: {v}"
        else:
            yield None, None, f"{e!r} (not a defaults entry read here)"


def _read(folder: Path, rel: str, package: str, out: ReadConfig, values: dict, depth: int) -> None:
    path = folder / f"{rel}.yaml"
    if depth > _MAX_DEPTH:
        out.unread.append(f"{rel}.yaml (nested too deeply)")
        return
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8", errors="replace")) or {}
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        out.unread.append(f"{rel}.yaml (no such file)")
        return
    except yaml.YAMLError as e:
        out.unread.append(f"{rel}.yaml (not YAML: {str(e).splitlines()[0]})")
        return
    if not isinstance(doc, dict):
        out.unread.append(f"{rel}.yaml (not a mapping)")
        return
    out.files.append(f"{rel}.yaml")
    group = rel.rpartition("/")[0]
    entries = list(_entries(doc.get("defaults"), group, package))
    if not any(f == "_self_" for f, _, _ in entries):
        entries.append(("_self_", package, "_self_"))
    for f, pkg, shown in entries:
        if f == "_self_":
            _flat(doc, package, f"{rel}.yaml", values)
        elif f is None:
            out.unread.append(f"{rel}.yaml defaults '{shown}'")
        else:
            _read(folder, f, pkg or "", out, values, depth + 1)


def read_config(folder: Path, name: str) -> ReadConfig:
    """The values of config ``name`` (``--config-name``, ``.yaml`` optional) in ``folder`` (``--config-path``)."""
    out = ReadConfig()
    values: dict[str, ParsedOverride] = {}
    _read(folder, name.removesuffix(".yaml"), "", out, values, 0)
    out.values = list(values.values())
    return out
