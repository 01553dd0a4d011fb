"""Findings and the small helpers the mesh rules share (divisors, nearest valid values, vocabulary padding, verl's
launcher rule ``ngpu/PP = TP*EP*DP``: verl's Megatron Lite example launchers compute ``DP=$((NGPU_PER_PP / (TP *
EP)))``; the planner's warning, the launcher import and the export header state it through
:func:`launcher_rule_outcome`, never as a fractional DP).

A :class:`Finding` is one rule's verdict; its :attr:`Finding.fixes` are alternative fixes, each a dict of
fields -> values (``{"tp": 4}``, or ``{"ep": 1, "etp": 1}`` where one fix sets two sizes). The rules themselves
are the functions of :mod:`mlite.mesh.checks`.
"""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field as dc_field


@dataclass(frozen=True, slots=True)
class Finding:
    """One rule's verdict on a mesh."""

    rule: str
    """Rule id (see :data:`mlite.mesh.checks.RULES`)."""
    level: str
    """``error``, ``warning`` or ``info``."""
    message: str
    """One line: the rule, the numbers, and what would fix it."""
    field: str | None = None
    """The main ParallelConfig field (or ``ngpu``, ``seq_len``) the rule is about."""
    nearest: tuple[int, ...] = ()
    """Nearest values of :attr:`field` that satisfy this rule."""
    fixes: tuple[dict, ...] = dc_field(default=())
    """Alternative fixes, each a dict of fields -> values that satisfies this rule (best first)."""


def finding(rule: str, level: str, message: str, fld: str | None = None, near=(), fixes=None) -> Finding:
    """A finding whose fixes default to one ``{fld: value}`` per nearest value; errors name the nearest values."""
    near = tuple(near)
    if level == "error":
        message += fmt_nearest(fld or "", near)
    if fixes is None:
        fixes = tuple({fld: v} for v in near) if fld else ()
    return Finding(rule, level, message, fld, near, tuple(fixes))


def fix_label(fix: dict) -> str:
    """A fix as a button reads: ``tp = 4``, ``ep = etp = 1``, ``pp = 2, vpp = 1``; a layout: ``uneven layout``,
    ``clear pp_layout``."""
    if set(fix) == {"pp_layout"}:
        return "uneven layout" if fix["pp_layout"] else "clear pp_layout"
    values = list(fix.values())
    if len(fix) > 1 and all(v == values[0] for v in values):
        return " = ".join(fix) + f" = {values[0]}"
    return ", ".join(f"{k} = {v}" for k, v in fix.items())


def divisors(n: int) -> list[int]:
    """Positive divisors of ``n``, ascending."""
    small, large = [], []
    d = 1
    while d * d <= n:
        if n % d == 0:
            small.append(d)
            if d * d != n:
                large.append(n // d)
        d += 1
    return small + large[::-1]


def nearest(value: int, ok) -> tuple[int, ...]:
    """The closest valid value below and above ``value`` (searching up to 4x), for messages."""
    below = next((v for v in range(value - 1, 0, -1) if ok(v)), None)
    above = next((v for v in range(value + 1, 4 * value + 64) if ok(v)), None)
    return tuple(v for v in (below, above) if v is not None)


def fmt_nearest(field: str, values: tuple[int, ...]) -> str:
    if not values:
        return ""
    return f"; nearest valid {field}: " + " or ".join(str(v) for v in values)


def pad_vocab(vocab: int, tp: int, divisible_by: int = 128) -> int:
    """Megatron pads the vocabulary to a multiple of ``divisible_by * tp``."""
    m = divisible_by * tp
    return -(-vocab // m) * m


LAUNCHER_RULE = "verl's launcher rule ngpu/PP = TP*EP*DP"
"""verl's launcher rule, as the messages name it."""


def launcher_rule_dp(ngpu: int, p) -> float:
    """DP by verl's rule for ``ngpu`` GPUs and the sizes ``p`` (``tp``, ``pp``, ``ep``); not always whole."""
    return ngpu / p.pp / (p.tp * p.ep)


def launcher_rule_outcome(ngpu: int, p) -> str:
    """What the rule gives: ``gives DP 4``, or ``does not divide (ngpu/PP = 8 is not a multiple of TP*EP = 16)``."""
    dp = launcher_rule_dp(ngpu, p)
    if dp.is_integer() and dp >= 1:
        return f"gives DP {int(dp)}"
    return f"does not divide (ngpu/PP = {ngpu / p.pp:g} is not a multiple of TP*EP = {p.tp * p.ep})"
