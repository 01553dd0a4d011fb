"""Every training-option refusal at once: the rules of :mod:`mlite.options.rules`, in the order
:func:`mlite.options.optimizers.optimizer_rules` lists them for the plan's backend and algorithm, each run on the
settings as given (not through :class:`~mlite.options.TrainingOptions`, which stops at the first).

The rules stay the one place: a refusal is the rule's own :class:`~mlite.errors.MliteError` line, and its fixes are
found by asking the rule again: the fields the rule reads (recorded while it runs) are tried with the other values
their option row allows (choices, the other boolean, the default, 0 and 1 for a share), one field first, then two;
a fix is kept when the rule then passes and no rule that passed before refuses.
"""

from __future__ import annotations

import itertools
from dataclasses import MISSING, fields
from types import SimpleNamespace
from typing import Any

from ..errors import MliteError
from .finding import Finding

MAX_FIXES = 3
"""Fixes reported per refusal."""


def settings(values: dict) -> SimpleNamespace:
    """The options ``values`` over :class:`~mlite.options.TrainingOptions`' defaults, unvalidated (the rules read
    them by name)."""
    from ..options import TrainingOptions

    out = {}
    for f in fields(TrainingOptions):
        if f.default is not MISSING:
            out[f.name] = f.default
        elif f.default_factory is not MISSING:
            out[f.name] = f.default_factory()
    unknown = sorted(set(values) - set(out))
    if unknown:
        raise MliteError(f"options: unknown field(s) {', '.join(unknown)}")
    out.update(values)
    return SimpleNamespace(**out)


class _Reads:
    """The settings, recording which fields a rule reads."""

    def __init__(self, o: Any):
        object.__setattr__(self, "_o", o)
        object.__setattr__(self, "read", [])

    def __getattr__(self, name: str):
        self.read.append(name)
        return getattr(self._o, name)


def _rules(o: Any):
    from ..options.optimizers import optimizer_rules

    return optimizer_rules(o)


def _failing(o: Any) -> set[str] | None:
    """Names of the rules that refuse ``o`` (None: a name is not registered)."""
    try:
        rules = _rules(o)
    except MliteError:
        return None
    out = set()
    for r in rules:
        try:
            r(o)
        except MliteError:
            out.add(r.__name__)
    return out


def _candidates(name: str, value: Any) -> list:
    """Other values of field ``name``: its row's choices, the other boolean, the default, 0 and 1 for a share."""
    from ..options.table import TRAINING, rows_by_field

    row = rows_by_field(TRAINING).get(name)
    out: list = []
    if row is not None and row.choices:
        out += list(row.choices)
    if isinstance(value, bool) or (row is not None and row.type is bool):
        out += [not value]
    elif isinstance(value, (int, float)) or (row is not None and row.type is float):
        out += [0.0, 1.0]
    if row is not None:
        out.append(row.default)
    seen: list = []
    for v in out:
        if v != value and v not in seen and not (isinstance(v, bool) != isinstance(value, bool) and v in (0, 1)):
            seen.append(v)
    return seen


def _reads(rule, o: Any) -> list[str]:
    """The fields ``rule`` reads on ``o`` (until it passes or refuses)."""
    probe = _Reads(o)
    try:
        rule(probe)
    except MliteError:
        pass
    return list(probe.read)


def _fixes(rule, o: SimpleNamespace, read: list[str], before: set[str]) -> tuple[dict, ...]:
    names = list(dict.fromkeys(n for n in read if hasattr(o, n)))
    found: list[dict] = []
    for k in (1, 2):
        for combo in itertools.combinations(names, k):
            for values in itertools.product(*(_candidates(n, getattr(o, n)) for n in combo)):
                trial = SimpleNamespace(**{**vars(o), **dict(zip(combo, values))})
                if k == 1:  # a field the rule reads once this one is changed (the next moment dtype) joins the pairs
                    names += [n for n in _reads(rule, trial) if n not in names and hasattr(o, n)]
                after = _failing(trial)
                if after is None or rule.__name__ in after or not after <= before:
                    continue
                fix = dict(zip(combo, values))
                if not any(set(f.items()) <= set(fix.items()) for f in found):
                    found.append(fix)
        if found:
            break
    return tuple(found[:MAX_FIXES])


def option_findings(values: dict, source_of) -> list[Finding]:
    """One error per option rule that refuses ``values`` (TrainingOptions fields), with the next valid values;
    ``source_of(field)`` says where the input set a field. Unregistered backend / algorithm names are bad input
    (:class:`MliteError`, as everywhere)."""
    o = settings(values)
    rules = _rules(o)  # an unregistered name raises the registry's own line here
    before = _failing(o) or set()
    out = []
    for rule in rules:
        probe = _Reads(o)
        try:
            rule(probe)
        except MliteError as e:
            field = e.message.split(":", 1)[0]
            read = list(probe.read)
            out.append(
                Finding(
                    "options",
                    "error",
                    rule.__name__,
                    e.message,
                    source_of(field if hasattr(o, field) else (read[0] if read else "")),
                    _fixes(rule, o, read, before),
                )
            )
    return out


def refused_by_rule(e: MliteError, findings: list[Finding]) -> bool:
    """Whether ``e`` (TrainingOptions refusing the values) is one of the option rules already reported."""
    return any(f.kind == "options" and f.message == e.message for f in findings)
