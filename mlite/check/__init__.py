"""The preflight behind ``mlite check``: every rule family judged at once on one plan, each finding with its
severity, rule, source and the next valid values (:mod:`.finding`); the rules themselves stay where they live
(:mod:`mlite.mesh.checks`, :mod:`mlite.options.rules` through :mod:`mlite.options.optimizers`,
:mod:`mlite.launch.verl_checks`, the backends' ``env_refuses``, :mod:`mlite.memory`) and :mod:`.resume` adds the
checkpoint rules. The shape follows training_hub's preflight (``Issue(severity, category, message, fix_hint)``,
Red-Hat-AI-Innovation-Team/training_hub ``src/training_hub/profiling/preflight.py`` @ f8dfa3ea), with the fix a dict
of the next valid values as the mesh rules give them.
"""

from __future__ import annotations

from .finding import FINDING_KEYS, KINDS, LEVELS, Finding
from .preflight import REPORT_KEYS, CheckInput, Report, check, from_flags, from_launcher

__all__ = [
    "FINDING_KEYS",
    "KINDS",
    "LEVELS",
    "REPORT_KEYS",
    "CheckInput",
    "Finding",
    "Report",
    "check",
    "from_flags",
    "from_launcher",
]
