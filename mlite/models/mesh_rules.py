"""Per-model mesh rules as data: ``mesh_rules.json`` beside this module, one entry per architecture.

The rules are the model registry's limits (DeepSeek-V4: TP = ETP = 1; DeepSeek-V4.1: no CP together with EP, no TP,
VPP or ETP, PP 1 or 2 with PP2 split at layer 20, PP2 with neither EP nor CP), each with its reason, the error code
the source raises and the source (repository, file, commit). :func:`mlite.mesh.checks.rule_model` is the one mesh
rule that reads them (``mlite mesh``, the planner widget, export and import-launcher resolve through it) and
:func:`mlite.mesh.enumerate.candidate_configs` prunes with :func:`sizes_violate` (``mlite mesh --list``).

Kinds (``fields`` are :class:`~mlite.mesh.ParallelConfig` size names):

* ``fixed``: each of ``fields`` equals ``value``; the fix sets them all to it.
* ``allowed``: the one field is one of ``values``; the fixes are the allowed values, nearest first.
* ``exclusive``: not every one of ``fields`` above 1; the fixes set one of them to 1.
* ``split``: when the one field equals ``value``, the first pipeline stage runs layers ``0 .. layer - 1`` and the
  second the rest; the fix is that layout (``pp_layout``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ..errors import MliteError

RULES_FILE = Path(__file__).with_name("mesh_rules.json")
"""The data file."""

KINDS = ("fixed", "allowed", "exclusive", "split")
"""Rule kinds (module docstring)."""

SIZE_FIELDS = ("tp", "pp", "vpp", "cp", "ep", "etp")
"""The mesh sizes a rule may name."""


@dataclass(frozen=True, slots=True)
class ModelMeshRule:
    """One per-model mesh rule read from ``mesh_rules.json``."""

    id: str
    """Rule id (the finding's ``rule``), e.g. ``deepseek_v41_cp_ep``."""
    kind: str
    """One of :data:`KINDS`."""
    fields: tuple[str, ...]
    """The mesh sizes it constrains (:data:`SIZE_FIELDS`)."""
    reason: str
    """One sentence: what the model supports."""
    source: str
    """Repository, file and commit the rule comes from."""
    code: str = ""
    """The error code the source raises (``CP_AND_EP_NOT_SIMULTANEOUSLY_SUPPORTED``), or empty."""
    value: int = 1
    """``fixed``: the required size; ``split``: the size of ``fields[0]`` the split applies to."""
    values: tuple[int, ...] = ()
    """``allowed``: the sizes allowed."""
    layer: int = 0
    """``split``: the first layer of the second pipeline stage."""

    def size_violation(self, sizes: dict[str, int]) -> bool:
        """True when ``sizes`` (field -> size) break this rule; a ``split`` rule needs the stages (never here)."""
        if self.kind == "fixed":
            return any(sizes[f] != self.value for f in self.fields)
        if self.kind == "allowed":
            return sizes[self.fields[0]] not in self.values
        if self.kind == "exclusive":
            return all(sizes[f] > 1 for f in self.fields)
        return False


def _rule(arch: str, raw: dict) -> ModelMeshRule:
    where = f"{RULES_FILE.name}: {arch}"
    try:
        rule = ModelMeshRule(
            id=raw["id"],
            kind=raw["kind"],
            fields=tuple(raw["fields"]),
            reason=raw["reason"],
            source=raw["source"],
            code=raw.get("code", ""),
            value=int(raw.get("value", 1)),
            values=tuple(int(v) for v in raw.get("values", ())),
            layer=int(raw.get("layer", 0)),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise MliteError(f"{where}: a rule lacks or mistypes a field ({e})") from None
    bad = [f for f in rule.fields if f not in SIZE_FIELDS]
    if rule.kind not in KINDS or bad or not rule.fields or not rule.source:
        raise MliteError(
            f"{where}: rule {rule.id!r} has kind {rule.kind!r} (one of {', '.join(KINDS)}), fields {list(rule.fields)} "
            f"(sizes of {', '.join(SIZE_FIELDS)}) and must name its source"
        )
    return rule


@lru_cache(maxsize=1)
def _table() -> dict[str, tuple[ModelMeshRule, ...]]:
    doc = json.loads(RULES_FILE.read_text())
    return {arch: tuple(_rule(arch, r) for r in fam["rules"]) for arch, fam in doc["families"].items()}


def rules_for(architecture: str) -> tuple[ModelMeshRule, ...]:
    """The mesh rules of an architecture (empty for a model without its own rules)."""
    return _table().get(architecture, ())


def families() -> dict[str, tuple[ModelMeshRule, ...]]:
    """Every architecture with its own mesh rules."""
    return dict(_table())


def sizes_violate(architecture: str, sizes: dict[str, int]) -> list[ModelMeshRule]:
    """The rules of ``architecture`` that ``sizes`` (field -> size) break (``split`` rules are checked on stages)."""
    return [r for r in rules_for(architecture) if r.size_violation(sizes)]
