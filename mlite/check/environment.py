"""The launch environment's rules: each optimizer backend's :attr:`~mlite.options.optimizers.Backend.env_refuses`
(a function of the environment mapping that raises :class:`~mlite.errors.MliteError`), run on the variables the
launch would see: the ones the launcher exports (``export NAME=...``, ``NAME=... cmd``), over ``--env`` and, with
``--environ``, the current environment.

Fixes are found by asking the rule again, as for the option rules: each variable the refusal names is tried unset,
then with the nearest integers above and below its value; the first values it accepts are the fixes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..errors import MliteError
from .finding import Finding

SEARCH = 64
"""How far from an integer value the nearest accepted integers are searched."""


@dataclass(frozen=True, slots=True)
class EnvValue:
    """One variable of the launch environment and where it was set."""

    value: str
    """Its value."""
    source: str
    """``run.sh:75 export CUDA_DEVICE_MAX_CONNECTIONS=1``, ``--env``, ``the current environment``."""


def _passes(rule, env: Mapping[str, str]) -> bool:
    try:
        rule(env)
    except MliteError:
        return False
    return True


def _fixes(rule, env: dict[str, str], names: list[str]) -> tuple[dict, ...]:
    out: list[dict] = []
    for name in names:
        rest = {k: v for k, v in env.items() if k != name}
        if _passes(rule, rest):
            out.append({name: None})
        try:
            value = int(env[name])
        except ValueError:
            continue
        for step in (1, -1):
            for v in range(value + step, value + step * SEARCH, step):
                if v < 1:
                    break
                if _passes(rule, {**rest, name: str(v)}):
                    out.append({name: str(v)})
                    break
    return tuple(out)


def environment_findings(backend: str, env: Mapping[str, EnvValue], source: str) -> list[Finding]:
    """One error per environment rule of ``backend`` that refuses ``env``; ``source`` names the input when the
    refusal names no variable that was set."""
    from ..options.optimizers import BACKENDS

    values = {k: v.value for k, v in env.items()}
    out = []
    for rule in BACKENDS.entry(backend).env_refuses:
        try:
            rule(values)
        except MliteError as e:
            named = [n for n in values if n in e.message]
            where = "; ".join(env[n].source for n in named) or source
            out.append(Finding("environment", "error", rule.__name__, e.message, where, _fixes(rule, values, named)))
    return out
