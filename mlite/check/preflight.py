"""The preflight: a plan (read from a launcher, or given as a model config + mesh and training flags) judged by every
rule family at once, each finding with its severity, rule, source and next valid values (:mod:`.finding`).

- ``launcher``: what the launcher reader could not resolve (:func:`mlite.export.import_launcher`'s warnings; the plan
  checked is the one ``mlite import-launcher`` builds).
- ``mesh``: the mesh rules (:data:`mlite.mesh.checks.RULES`) with their fixes, as ``mlite mesh`` judges them.
- ``options``: every training-option rule that refuses (:mod:`.options`).
- ``verl``: for an ``engine=lite`` launcher, the lite engine's refusals (:mod:`mlite.launch.verl_checks`,
  :func:`mlite.options.optimizers.check_verl_lite_engine`).
- ``environment``: the optimizer backend's environment rules (:mod:`.environment`).
- ``memory``: the training memory estimate (:func:`mlite.memory.estimate`): an error with the estimator's figure
  when it does not fit, with the single changes that make it fit; for a GRPO/PPO launcher also the RL step by phase
  (:func:`mlite.export.importer.rl_estimate`, as ``import-launcher --estimate`` reports it).
- ``resume``: with a checkpoint, the resume rules (:mod:`.resume`).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..errors import MliteError
from ..options.rules import muon_rl_research_only
from ..units import GIB
from .environment import EnvValue, environment_findings
from .finding import KINDS, LEVELS, Finding
from .options import _failing, option_findings, refused_by_rule, settings

if TYPE_CHECKING:
    from ..export.importer import ImportedLauncher
    from ..mesh import ParallelConfig

REPORT_KEYS = ("ok", "input", "plan", "counts", "findings", "resume_from")
"""Keys of the ``mlite check --json`` document."""

ENVIRON = "the current environment"
"""The source of a variable read with ``--environ``."""


@dataclass
class CheckInput:
    """The plan to check and where each part of it came from."""

    source: str
    """The launcher read, or ``mlite check CONFIG`` with its flags."""
    model: str | None
    """Model config reference (a data/models name or a path); None: not known (model rules and memory skipped)."""
    ngpu: int
    """World size."""
    gpus_per_node: int
    """GPUs per node."""
    parallel: ParallelConfig
    """The mesh asked for."""
    options: dict
    """:class:`~mlite.options.TrainingOptions` keyword arguments (unvalidated: the rules judge them)."""
    env: dict[str, EnvValue] = field(default_factory=dict)
    """The launch environment: variable -> value and where it was set."""
    option_source: Callable[[str], str] = str
    """Field -> where the input set it (a flag, a launcher key)."""
    imported: ImportedLauncher | None = None
    """The launcher read (None for a config + flags)."""
    environ_read: bool = False
    """The current environment was read (``--environ``)."""


@dataclass
class Report:
    """Every finding on one plan."""

    input: str
    """What was checked."""
    plan: dict
    """The plan: model, GPUs, mesh sizes, options, target."""
    findings: list[Finding]
    """Findings in :data:`~.finding.KINDS` order, then by severity."""
    resume_from: dict | None = None
    """The saved plan read from ``--resume-from`` (:meth:`.resume.ResumePlan.to_dict`), None without."""

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.level == "error"]

    @property
    def ok(self) -> bool:
        return not self.errors

    def to_dict(self) -> dict:
        return {
            "ok": self.ok,
            "input": self.input,
            "plan": self.plan,
            "counts": {lv: sum(f.level == lv for f in self.findings) for lv in LEVELS},
            "findings": [f.to_dict() for f in self.findings],
            "resume_from": self.resume_from,
        }


# ------------------------------------------------------------------------------------------------ inputs
def outside_env(pairs: list[str], environ: bool) -> tuple[dict[str, str], dict[str, EnvValue]]:
    """``--env NAME=VALUE`` pairs over the current environment (with ``environ``): the values the reader expands the
    script with, and the same with their source."""
    values: dict[str, EnvValue] = {}
    if environ:
        values.update({k: EnvValue(v, ENVIRON) for k, v in os.environ.items()})
    for item in pairs:
        name, eq, value = item.partition("=")
        if not eq or not name.isidentifier():
            raise MliteError(f"--env {item!r}: expected NAME=VALUE")
        values[name] = EnvValue(value, f"--env {name}={value}")
    return {k: v.value for k, v in values.items()}, values


def from_launcher(
    path: str,
    *,
    config: str | None = None,
    env: list[str] | None = None,
    environ: bool = False,
    gpu_memory_gib: float | None = None,
    text: str | None = None,
) -> CheckInput:
    """The plan of a launcher, read as ``mlite import-launcher`` reads it, with the environment its launch line
    gets (the script's exports over ``--env`` over, with ``environ``, the current environment)."""
    from ..export import import_launcher

    shell_env, values = outside_env(env or [], environ)
    imp = import_launcher(path, env=shell_env, text=text)
    for name, (value, line) in imp.environment.items():
        values[name] = EnvValue(value, f"{imp.source}:{line} {name}={value}")
    options = {**imp.options, "gpus_per_node": imp.gpus_per_node}
    if gpu_memory_gib is not None:
        options["gpu_memory_gib"] = gpu_memory_gib

    def source(name: str) -> str:
        if name in imp.options:
            return f"{imp.source}: {name}={imp.options[name]}"
        return f"{imp.source}: {name} not set (default)"

    return CheckInput(
        source=imp.source,
        model=imp.model_ref(config),
        ngpu=imp.ngpu,
        gpus_per_node=imp.gpus_per_node,
        parallel=imp.parallel,
        options=options,
        env=values,
        option_source=source,
        imported=imp,
        environ_read=environ,
    )


def from_flags(
    config: str,
    ngpu: int,
    parallel: ParallelConfig,
    options: dict,
    *,
    flags: dict[str, str],
    env: list[str] | None = None,
    environ: bool = False,
) -> CheckInput:
    """The plan of ``mlite check CONFIG --ngpu N [mesh flags] [training flags]`` (the flags of ``mlite memory``);
    ``flags``: field -> its flag."""
    from ..models import from_hf_config

    from_hf_config(config)  # a malformed config is bad input (exit 2), not a finding
    _, values = outside_env(env or [], environ)

    def source(name: str) -> str:
        flag, value = flags.get(name), options.get(name)
        if not flag:
            return name
        return flag if isinstance(value, bool) else f"{flag} {value}"

    return CheckInput(
        source=f"{config} --ngpu {ngpu}",
        model=config,
        ngpu=ngpu,
        gpus_per_node=int(options.get("gpus_per_node", 8)),
        parallel=parallel,
        options=options,
        env=values,
        option_source=source,
        environ_read=environ,
    )


# ------------------------------------------------------------------------------------------------ the check
def check(inp: CheckInput, *, resume_from: str | None = None) -> Report:
    """Every finding on ``inp`` (and, with ``resume_from``, on resuming it from that checkpoint)."""
    from ..models import from_hf_config

    findings: list[Finding] = []
    imp = inp.imported
    spec = from_hf_config(inp.model) if inp.model else None
    if imp is not None:
        findings += [Finding("launcher", "warning", "import", w, imp.source) for w in imp.warnings]
    mp = _mesh(inp, spec, findings)
    opt = option_findings(inp.options, inp.option_source)
    findings += opt
    if imp is not None:
        findings += _verl(imp, inp.options)
    backend = inp.options.get("optimizer", "dist_opt")
    findings += environment_findings(backend, inp.env, inp.source)
    findings += _environment_read(inp, backend)
    findings += _memory(inp, spec, mp, opt)
    rl = imp is not None and not imp.target.endswith("-sft")
    warn = muon_rl_research_only(str(inp.options.get("optimizer_algorithm", "adam")), rl)
    if warn is not None:
        findings.append(
            Finding("options", "warning", "muon_rl_research_only", warn, inp.option_source("optimizer_algorithm"))
        )
    saved = None
    if resume_from is not None:
        from .resume import read_saved, resume_findings

        old = read_saved(resume_from)
        saved = old.to_dict()
        findings += resume_findings(old, _resume_plan(inp, spec))
    order = {k: i for i, k in enumerate(KINDS)}
    findings.sort(key=lambda f: (order.get(f.kind, len(order)), LEVELS.index(f.level)))
    return Report(inp.source, _plan_doc(inp, mp), findings, saved)


def _mesh(inp: CheckInput, spec, findings: list[Finding]):
    """The mesh plan (None without a model config) and its findings."""
    from ..mesh import resolve

    imp = inp.imported
    if imp is not None:
        mp, _ = imp.plan(inp.model)
        if mp is None:
            doc = imp.to_dict(inp.model)
            findings += [Finding("mesh", "error", "world", m, imp.source) for m in doc["errors"]]
            findings.append(
                Finding(
                    "mesh",
                    "warning",
                    "model",
                    f"no model config for '{imp.model_path or '?'}': only the GPU-count rules were checked, no memory "
                    "estimate (pass --config NAME_OR_PATH)",
                    imp.source,
                )
            )
            return None
    else:
        mp = resolve(
            spec,
            inp.ngpu,
            inp.parallel,
            seq_len=int(inp.options.get("seq_len", 4096)),
            gpus_per_node=inp.gpus_per_node,
        )
    sizes = mp.parallel.sizes()
    for f in mp.findings:
        where = f"{inp.source}: {f.field}={sizes.get(f.field, inp.ngpu if f.field == 'ngpu' else '?')}"
        findings.append(Finding("mesh", f.level, f.rule, f.message, where if f.field else inp.source, f.fixes))
    return mp


def _verl(imp: ImportedLauncher, options: dict) -> list[Finding]:
    """The lite engine's refusals of an ``engine=lite`` launcher (verl's engine would refuse after torchrun
    started)."""
    from ..launch.verl_checks import check_lite_engine_key
    from ..options.optimizers import check_verl_lite_engine

    by = {o.key: o for o in imp.overrides}
    eng = by.get("engine")
    if eng is None or eng.value != "lite":
        return []
    out = []
    backend = options.get("optimizer", "dist_opt")
    try:
        check_verl_lite_engine(backend, "engine.impl_cfg.optimizer")
    except MliteError as e:
        from ..options.optimizers import BACKENDS

        runs = [b.name for b in BACKENDS.values() if b.verl_lite_engine]
        out.append(
            Finding(
                "verl",
                "error",
                check_verl_lite_engine.__name__,
                e.message,
                f"{imp.source}: engine.impl_cfg.optimizer={backend}",
                tuple({"optimizer": r} for r in runs),
            )
        )
    for key, ov in by.items():
        try:
            check_lite_engine_key(key, imp.source)
        except MliteError as e:
            where = f"{imp.source}: {key}={ov.raw}"
            out.append(Finding("verl", "error", check_lite_engine_key.__name__, e.message, where))
    return out


def _environment_read(inp: CheckInput, backend: str) -> list[Finding]:
    """Say when the backend has environment rules but the current environment was not read."""
    from ..options.optimizers import BACKENDS

    if inp.environ_read or not BACKENDS.entry(backend).env_refuses:
        return []
    return [
        Finding(
            "environment",
            "info",
            "environ",
            f"{backend} has environment rules; the current environment was not read (pass --environ to add it)",
            inp.source,
        )
    ]


MEMORY_TRIES: tuple[dict, ...] = (
    {"recompute": "full"},
    {"use_precision_aware_optimizer": True, "exp_avg_dtype": "bf16", "exp_avg_sq_dtype": "bf16"},
    {"offload_fraction": 1.0},
)
"""Single changes the memory rule tries when the plan does not fit (kept when the options rules accept them and the
estimate then fits), before the device memory that would hold it."""


def _memory(inp: CheckInput, spec, mp, opt: list[Finding]) -> list[Finding]:
    from ..memory import estimate
    from ..options import TrainingOptions

    if spec is None or mp is None or not mp.valid:
        return []
    if any(f.level == "error" for f in opt):
        return [Finding("memory", "info", "fits", "not estimated: the options are refused", inp.source)]
    try:
        o = TrainingOptions(**inp.options)
    except MliteError as e:
        if refused_by_rule(e, opt):
            return [Finding("memory", "info", "fits", "not estimated: the options are refused", inp.source)]
        raise
    est = estimate(spec, mp, o)
    return _fit(inp, spec, mp, o, est) + _rl_fit(inp, est)


def _fit(inp: CheckInput, spec, mp, o, est) -> list[Finding]:
    """The training estimate's verdict, with the single changes that make it fit when it does not."""
    from ..memory import estimate
    from ..options import TrainingOptions

    w = est.worst
    figure = (
        f"{w.total / GIB:.2f} GiB per GPU (most loaded pipeline rank {w.pp_rank}) vs usable {est.usable / GIB:.2f} "
        f"of {est.gpu_mem / GIB:.2f} GiB ({o.optimizer}, {'PAO' if o.use_precision_aware_optimizer else 'no PAO'}; "
        f"host {w.host_total / GIB:.2f} GiB per GPU)"
    )
    if est.fits:
        return [Finding("memory", "info", "fits", f"fits: {figure}", inp.source)]
    fixes = []
    current = settings(inp.options)
    for change in MEMORY_TRIES:
        values = {**inp.options, **change}
        if all(getattr(current, k) == v for k, v in change.items()):
            continue
        if _failing(settings(values)):
            continue
        try:
            if estimate(spec, mp, TrainingOptions(**values)).fits:
                fixes.append(change)
        except MliteError:
            continue
    need = math.ceil(w.total / (1 - o.headroom) / GIB * 10) / 10
    fixes.append({"gpu_memory_gib": need})
    return [
        Finding(
            "memory",
            "error",
            "fits",
            f"does not fit: {figure}; mlite memory's estimate",
            inp.source,
            tuple(fixes),
        )
    ]


def _rl_fit(inp: CheckInput, est) -> list[Finding]:
    """A GRPO/PPO launcher's RL step by phase (:func:`mlite.export.importer.rl_estimate`, as ``import-launcher
    --estimate`` reports it): an error when a phase does not fit."""
    from ..export.importer import rl_estimate

    imp = inp.imported
    if imp is None or imp.target.endswith("-sft"):
        return []
    try:
        rl = rl_estimate(imp, est, inp.model)
    except MliteError as e:  # the RL model does not cover this model: the training estimate still stands
        return [Finding("memory", "warning", "rl_fits", f"no RL estimate: {e.message}", imp.source)]
    if rl is None:
        return []
    peak = rl["peak_phase"]
    figure = (
        f"peak phase {peak} {rl['phases'][peak]['gpu'] / GIB:.2f} GiB per GPU, host {rl['host_per_node'] / GIB:.1f} "
        "GiB per node (rollout settings read from the launcher, verl's defaults for the rest)"
    )
    if rl["fits"]:
        return [Finding("memory", "info", "rl_fits", f"RL step fits: {figure}", imp.source)]
    why = "; ".join(rl["errors"]) or "a phase exceeds the device memory"
    return [Finding("memory", "error", "rl_fits", f"RL step does not fit: {figure}: {why}", imp.source)]


def _resume_plan(inp: CheckInput, spec):
    """The plan being checked, as the resume rules read it."""
    from .resume import ResumePlan

    return ResumePlan(
        source=inp.source,
        ngpu=inp.ngpu,
        sizes=inp.parallel.sizes(),
        optimizer=inp.options.get("optimizer", "dist_opt"),
        options=dict(vars(settings(inp.options))),
        model_type=spec.model_type if spec is not None else None,
    )


def _plan_doc(inp: CheckInput, mp) -> dict:
    imp = inp.imported
    return {
        "model": inp.model,
        "ngpu": inp.ngpu,
        "gpus_per_node": inp.gpus_per_node,
        **inp.parallel.sizes(),
        "dp": mp.dp if mp is not None else None,
        "options": inp.options,
        "target": imp.target if imp is not None else None,
        "environment": {k: v.value for k, v in inp.env.items() if v.source != ENVIRON},
    }
