"""Compose a launcher's Hydra overrides against verl's packaged configuration (the installed ``verl`` package's
``trainer/config``), the way ``python3 -m verl.trainer.main_ppo`` / ``sft_trainer`` would: an unknown key, a
missing ``+`` or a ``+`` on an existing key fails.

verl 0.9.1 ships no mlite engine (``verl_mlite`` is a separate package), so a launcher that uses
``hydra.searchpath=[pkg://verl_mlite.config]`` is checked three ways: (1) every override that is not
mlite-specific is composed against verl alone (``mlite_actor`` stood in by verl's ``megatron_actor``, which has the
same optimizer group); (2) the mlite-specific keys are checked against :mod:`mlite.export.mlite_keys`; (3) the whole
command is composed with a stand-in ``verl_mlite.config`` search path rebuilt from that key list.

Needs ``hydra-core`` and ``verl`` installed (the ``verl`` extra); verl itself is not imported (only its YAML files
are read), so this takes seconds, not the ten that ``import verl`` takes.
"""

from __future__ import annotations

import importlib.util
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import MliteError
from . import engine_mlite
from . import mlite_keys as K
from .overrides import parse_override

DEFAULT_CONFIG = {"verl.trainer.main_ppo": "ppo_trainer", "verl.trainer.sft_trainer": "sft_trainer_engine"}
"""The config each entry point's ``@hydra.main`` composes by default."""


def verl_config_dir() -> Path:
    """The installed verl's ``trainer/config`` folder (found without importing verl)."""
    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.submodule_search_locations:
        raise MliteError("verl is not installed: pip install 'mlite-lab[verl]' to validate launchers")
    d = Path(next(iter(spec.submodule_search_locations))) / "trainer" / "config"
    if not (d / "ppo_trainer.yaml").is_file():
        raise MliteError(f"{d}: verl's packaged Hydra configuration (ppo_trainer.yaml) is missing")
    return d


def write_stub(folder: Path) -> Path:
    """A stand-in for ``pkg://verl_mlite.config`` (``engine/mlite.yaml``, ``actor/mlite_actor.yaml``) built from the
    key list; returns ``folder``."""
    (folder / "engine").mkdir(parents=True, exist_ok=True)
    (folder / "actor").mkdir(parents=True, exist_ok=True)
    (folder / "engine" / "mlite.yaml").write_text(K.engine_yaml(), encoding="utf-8")
    (folder / "actor" / "mlite_actor.yaml").write_text(K.actor_yaml(), encoding="utf-8")
    return folder


def compose(config_name: str, overrides: list[str]):
    """verl's config ``config_name`` composed with ``overrides`` (Hydra's compose API); raises :class:`MliteError`
    with Hydra's first line on failure."""
    try:
        from hydra import compose as hydra_compose
        from hydra import initialize_config_dir
        from hydra.core.global_hydra import GlobalHydra
        from hydra.errors import HydraException
        from omegaconf.errors import OmegaConfBaseException
    except ImportError:
        raise MliteError("hydra-core is not installed: pip install 'mlite-lab[verl]' to validate launchers") from None
    import warnings

    GlobalHydra.instance().clear()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with initialize_config_dir(config_dir=str(verl_config_dir()), version_base=None, job_name="mlite"):
                return hydra_compose(config_name=config_name, overrides=list(overrides))
    except (HydraException, OmegaConfBaseException) as e:  # composition, missing config, override parse; bad keys
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise MliteError(f"{config_name}: {first}") from None
    finally:
        GlobalHydra.instance().clear()


@dataclass(kw_only=True)
class Validation:
    """The verdict on one launch command."""

    config_name: str
    """verl config composed (``ppo_trainer``, ``ppo_megatron_trainer``, ``sft_trainer_engine``)."""
    overrides: list[str]
    """The command's Hydra overrides."""
    mlite: bool
    """The command uses verl_mlite's config groups."""
    problems: list[str] = field(default_factory=list)
    """Every failure (empty: valid)."""
    checks: list[str] = field(default_factory=list)
    """What was checked."""
    config: object = None
    """The composed config (with the stand-in mlite groups for mlite launchers)."""

    @property
    def ok(self) -> bool:
        return not self.problems


def split_command(argv: list[str]) -> tuple[str, str, list[str]]:
    """``(entry module, config name, overrides)`` of a launch command's words."""
    entry = next((w for w in argv if w in DEFAULT_CONFIG), None)
    if entry is None:
        raise MliteError("no verl entry point (verl.trainer.main_ppo / verl.trainer.sft_trainer) in the command")
    rest = argv[argv.index(entry) + 1 :]
    name, ovs, i = DEFAULT_CONFIG[entry], [], 0
    while i < len(rest):
        w = rest[i]
        i += 1
        if w.startswith("--config-name"):
            val = w.partition("=")[2] or (rest[i] if i < len(rest) else "")
            i += 0 if "=" in w else 1
            name = val[:-5] if val.endswith(".yaml") else val
        elif w.startswith("--config-path"):
            i += 0 if "=" in w else 1
        else:
            ovs.append(w)
    return entry, name, ovs


def validate_command(argv: list[str]) -> Validation:
    """Check a launch command (its words after shell expansion, e.g. from ``DRY_RUN=1``) against verl's config."""
    entry, name, ovs = split_command(argv)
    mlite = any(o.startswith("hydra.searchpath=") and K.SEARCHPATH in o for o in ovs)
    v = Validation(config_name=name, overrides=ovs, mlite=mlite)
    sft = entry.endswith("sft_trainer")
    engine = "engine" if sft else "actor_rollout_ref.actor.engine"
    optim = "optim" if sft else "actor_rollout_ref.actor.optim"
    if not mlite:
        v.checks.append(f"composed {name} with all {len(ovs)} overrides")
        try:
            v.config = compose(name, ovs)
        except MliteError as e:
            v.problems.append(e.message)
        return v
    plain = []
    for o in ovs:
        p = parse_override(o)
        key = p.key if p else ""
        if key == "hydra.searchpath" or key == "engine" or key.startswith(engine + "."):
            continue
        if p is not None and key == f"actor@{engine.rsplit('.', 1)[0]}" and p.value == K.ACTOR_GROUP_OPTION:
            o = f"{key}={K.STAND_IN_ACTOR}"
        plain.append(o)
    v.checks.append(
        f"composed {name} with the {len(plain)} overrides that are not mlite-specific"
        + ("" if sft else f" ({K.ACTOR_GROUP_OPTION} stood in by {K.STAND_IN_ACTOR})")
    )
    try:
        compose(name, plain)
    except MliteError as e:
        v.problems.append(e.message)
    parsed = [p for p in map(parse_override, ovs) if p]
    v.checks.append("checked the mlite keys against mlite.export.mlite_keys")
    v.problems += engine_mlite.check(parsed, engine=engine, optim=optim)
    choice = next((p for p in parsed if p.key == ("engine" if sft else f"actor@{engine.rsplit('.', 1)[0]}")), None)
    want = K.ENGINE_GROUP_OPTION if sft else K.ACTOR_GROUP_OPTION
    if choice is None or choice.value != want:
        v.problems.append(f"{'engine' if sft else 'actor@actor_rollout_ref.actor'}={want} is missing")
    with tempfile.TemporaryDirectory(prefix="mlite-verl-stub-") as tmp:
        stub = write_stub(Path(tmp))
        full = [f"hydra.searchpath=[file://{stub}]" if o.startswith("hydra.searchpath=") else o for o in ovs]
        v.checks.append(f"composed {name} with all {len(ovs)} overrides and a verl_mlite.config stand-in")
        try:
            v.config = compose(name, full)
        except MliteError as e:
            v.problems.append(e.message)
    return v
