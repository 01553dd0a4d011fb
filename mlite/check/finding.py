"""The preflight's finding: one rule's verdict on a plan, with where the input said it and the next valid values.

A :class:`Finding` names its ``kind`` (which family of rules: ``mesh``, ``options``, ``verl``, ``memory``,
``environment``, ``resume``, ``launcher``), its ``level`` (``error`` / ``warning`` / ``info``), the ``rule`` (the id of
a mesh rule, the name of an option / environment / resume rule function), the one-line ``message`` of that rule, the
``source`` (the file and line, flag or checkpoint the value came from) and ``fixes``: alternative changes, each a dict
of field -> value that satisfies the rule (``{"tp": 4}``, ``{"CUDA_DEVICE_MAX_CONNECTIONS": None}`` = unset it).
"""

from __future__ import annotations

from dataclasses import dataclass

LEVELS = ("error", "warning", "info")
"""Severities, most severe first."""

KINDS = ("launcher", "mesh", "options", "verl", "environment", "memory", "resume")
"""Rule families, in the order a report lists them."""

FINDING_KEYS = ("kind", "level", "rule", "message", "source", "fixes")
"""Keys of one finding in ``mlite check --json``."""


@dataclass(frozen=True, slots=True)
class Finding:
    """One rule's verdict on the plan being checked."""

    kind: str
    """Rule family (:data:`KINDS`)."""
    level: str
    """``error``, ``warning`` or ``info`` (:data:`LEVELS`)."""
    rule: str
    """Rule id: a mesh rule of :data:`mlite.mesh.checks.RULES`, or the name of the rule function."""
    message: str
    """The rule's one line (the reason and, for errors, what would fix it)."""
    source: str
    """Where the input set what the rule judged: ``run.sh:75 export CUDA_DEVICE_MAX_CONNECTIONS=1``, ``--pao``."""
    fixes: tuple[dict, ...] = ()
    """Alternative fixes, each a dict of fields -> the next valid value (None: unset a variable), best first."""

    def to_dict(self) -> dict:
        return {k: (list(self.fixes) if k == "fixes" else getattr(self, k)) for k in FINDING_KEYS}


def fix_text(fix: dict) -> str:
    """``tp=4``, ``CUDA_DEVICE_MAX_CONNECTIONS unset``, ``a=1, b=2``."""
    return ", ".join(f"{k} unset" if v is None else f"{k}={v}" for k, v in fix.items())
