"""Resume rules: the plan being checked against the plan a checkpoint (or a run) was written under.

What is read offline, per format (:func:`read_saved`):

- ``lite-run``: a run directory of ``mlite run`` (:mod:`mlite.rundir`: ``config.json`` is the ``RunConfig``): the
  mesh (``nproc``, TP, CP, EP, ETP; PP 1), the optimizer backend and its options.
- ``lite-dcp``: a lite-runtime checkpoint (:mod:`mlite.runtime.checkpoint`: ``runtime.json`` beside ``dcp/``): the
  world size, the mesh and optimizer of its runtime config, the storage layout.
- ``megatron-dist-ckpt``: a Megatron-Core distributed checkpoint (``metadata.json`` with ``sharded_backend``, beside
  ``common.pt``; also under ``iter_NNNNNNN/`` via ``latest_checkpointed_iteration.txt``, or verl's
  ``global_step_N/actor/dist_ckpt``): the parallel sizes and ``dist_ckpt_optim_fully_reshardable`` from the
  Megatron-LM ``args`` that ``common.pt`` holds when Megatron-LM's trainer wrote it (verl's checkpoint manager writes
  none: then the topology is not known and the finding says so).

The rules (:func:`resume_findings`), each citing what it mirrors:

- :func:`format_topology` — per format. DCP (``torch.distributed.checkpoint``) plans a load against the saved
  metadata and reshards DTensors across DP/TP changes; the lite runtime's tests cover the same world size only
  (mlite/runtime/checkpoint.py), so a change is a warning. Megatron-Core dist-ckpt reshards the model across
  TP/PP/EP/DP, but the distributed optimizer's state only across DP unless it was saved with
  ``dist_ckpt_optim_fully_reshardable`` ("Make optimizer distributed checkpoint fully reshardable (TP/PP/EP/DP) as
  opposed to plain DP reshardability", Megatron-LM ``CheckpointConfig`` / ``--dist-ckpt-optim-fully-reshardable``,
  default False): a TP/PP/CP/EP/ETP change without it is an error (fixes: the saved sizes, or load without the
  optimizer state).
- :func:`model_topology` — per model (:data:`SAME_TOPOLOGY_MODELS`): DeepSeek-V4.1's Engram tables and its local
  checkpoints "require the same topology on resume" (ISEEKYAN/Megatron-LM ``docs/deepseek_v41.md`` @ 04baccf4,
  ``docs/engram_distribution.md`` @ 6f00e559; ../shared/reference/megatron_lite_2026-09.md §1.5).
- :func:`same_backend` — the optimizer state is the backend's (dist-ckpt for ``dist_opt``, DCP DTensors for
  ``fsdp2``): another backend does not read it.
- :func:`lite_layout` — the lite runtime's ``checkpoint.load`` refuses a different storage layout (PAO remainders
  vs fp32 master, moment dtypes, param dtype; mlite/runtime/checkpoint.py ``layout``), read here from the saved
  options.
- the backend's own rules (:data:`RESUME_RULES`, :func:`register_resume_rule`): ``rule(old, new)`` raising
  :class:`~mlite.errors.MliteError`, e.g. M-FSDP's "resuming with a different ``offload_fraction`` is out of scope"
  (ISEEKYAN/Megatron-LM ``docs/mfsdp-fsdp2-style-cpu-offload-design.md`` §Checkpoint) as ``mfsdp_resume_rule``.
  Their fixes are found by asking the rule again with each field that differs set back to its saved value.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..errors import MliteError
from ..mesh.axes import AXIS_NAMES
from .finding import Finding

TOPOLOGY = (*AXIS_NAMES, "ngpu")
"""The fields that make a topology (``dp`` follows from them)."""


@dataclass(frozen=True)
class ResumePlan:
    """A plan as the resume rules read it: the one a checkpoint was written under, or the one being checked."""

    source: str
    """The checkpoint / run directory read, or the input checked."""
    format: str | None = None
    """``lite-run``, ``lite-dcp``, ``megatron-dist-ckpt``; None for the plan being checked."""
    ngpu: int | None = None
    """World size (None: not recorded)."""
    sizes: dict = field(default_factory=dict)
    """Mesh sizes recorded (``tp``, ``pp``, ``vpp``, ``cp``, ``ep``, ``etp``; only those known)."""
    optimizer: str | None = None
    """Optimizer backend (None: not recorded)."""
    options: dict = field(default_factory=dict)
    """Training options recorded, by :class:`~mlite.options.TrainingOptions` field name."""
    model_type: str | None = None
    """The model's ``model_type`` (None: not known)."""
    fully_reshardable: bool | None = None
    """Megatron dist-ckpt: saved with ``dist_ckpt_optim_fully_reshardable`` (None: not recorded)."""
    notes: tuple[str, ...] = ()
    """What could not be read."""

    def topology(self) -> dict:
        """The topology fields known: ``ngpu`` and the mesh sizes."""
        out = dict(self.sizes)
        if self.ngpu is not None:
            out["ngpu"] = self.ngpu
        return out

    def to_dict(self) -> dict:
        return {
            "source": self.source,
            "format": self.format,
            "ngpu": self.ngpu,
            "sizes": self.sizes,
            "optimizer": self.optimizer,
            "model_type": self.model_type,
            "fully_reshardable": self.fully_reshardable,
            "notes": list(self.notes),
        }


ResumeRule = Callable[[ResumePlan, ResumePlan], None]
"""``rule(old, new)``: raises :class:`~mlite.errors.MliteError` when a run with plan ``new`` cannot resume from a
checkpoint written under ``old``."""

RESUME_RULES: dict[str, tuple[ResumeRule, ...]] = {}
"""Optimizer backend -> its resume rules (the backend that wrote the checkpoint is asked)."""

SAME_TOPOLOGY_MODELS: dict[str, str] = {
    "deepseek_v41": (
        "DeepSeek-V4.1's Engram tables (sharded over DP x CP owners) and local checkpoints require the same topology "
        "on resume (ISEEKYAN/Megatron-LM docs/deepseek_v41.md @ 04baccf4, docs/engram_distribution.md @ 6f00e559)"
    ),
}
"""``model_type`` -> why its checkpoints need the topology they were written with."""


def register_resume_rule(backend: str, rule: ResumeRule) -> None:
    """Add ``rule`` to ``backend``'s resume rules."""
    RESUME_RULES[backend] = (*RESUME_RULES.get(backend, ()), rule)


def unregister_resume_rule(backend: str, rule: ResumeRule) -> None:
    """Remove ``rule`` from ``backend``'s resume rules."""
    RESUME_RULES[backend] = tuple(r for r in RESUME_RULES.get(backend, ()) if r is not rule)
    if not RESUME_RULES[backend]:
        del RESUME_RULES[backend]


# ------------------------------------------------------------------------------------------------ readers
def read_saved(path: str | Path) -> ResumePlan:
    """The plan a checkpoint or run directory was written under (:class:`MliteError` when ``path`` is none of the
    formats read)."""
    from ..rundir import CONFIG_FILE, is_run_dir

    p = Path(path).expanduser()
    if not p.exists():
        raise MliteError(f"--resume-from {path}: no such file or folder")
    if p.is_file():
        p = p.parent
    if (p / "runtime.json").is_file():
        return _lite_checkpoint(p)
    if is_run_dir(p) and (p / CONFIG_FILE).is_file():
        return _lite_run(p)
    mp = _megatron_dir(p)
    if mp is not None:
        return _megatron(mp)
    raise MliteError(
        f"--resume-from {path}: not a checkpoint the preflight reads (expected an mlite run directory with "
        "config.json, a lite-runtime checkpoint with runtime.json, or a Megatron dist-ckpt folder with metadata.json)"
    )


def _json(path: Path) -> dict:
    try:
        d = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise MliteError(f"{path}: not readable JSON ({e}); pass another --resume-from") from None
    if not isinstance(d, dict):
        raise MliteError(f"{path}: expected a JSON object; pass another --resume-from")
    return d


def _lite_run(p: Path) -> ResumePlan:
    from dataclasses import asdict

    from ..launch import RunConfig
    from ..rundir import CONFIG_FILE

    cfg = RunConfig.from_dict(_json(p / CONFIG_FILE))
    par = cfg.parallel_config()
    o = asdict(cfg.training_options())
    o["param_dtype"] = cfg.resolved_param_dtype()
    try:
        model_type = cfg.model_spec().model_type
    except MliteError:
        model_type = None
    return ResumePlan(
        source=str(p),
        format="lite-run",
        ngpu=cfg.nproc,
        sizes={**par.sizes(), "pp": 1},
        optimizer=cfg.optimizer,
        options=o,
        model_type=model_type,
    )


def _sub(d: dict, key: str) -> dict:
    v = d.get(key)
    return v if isinstance(v, dict) else {}


def _lite_checkpoint(p: Path) -> ResumePlan:
    meta = _json(p / "runtime.json")
    cfg = _sub(meta, "config")
    bc = _sub(cfg, "backend_cfg")
    par, opt, layout = _sub(bc, "parallel"), _sub(bc, "optimizer"), _sub(meta, "layout")
    sizes = {k: int(v) for k, v in par.items() if k in AXIS_NAMES and isinstance(v, int)}
    if "etp" in par and par["etp"] is None:
        sizes["etp"] = 1  # the lite runtime's ETP default
    options = {k: layout[k] for k in ("exp_avg_dtype", "exp_avg_sq_dtype", "param_dtype") if k in layout}
    options["use_precision_aware_optimizer"] = bool(opt.get("use_precision_aware_optimizer"))
    options["offload_fraction"] = float(opt.get("offload_fraction") or 0.0)
    ws = meta.get("world_size")
    model_type = None
    if isinstance(cfg.get("hf_path"), str):
        from ..models import from_hf_config

        try:
            model_type = from_hf_config(cfg["hf_path"]).model_type
        except MliteError:
            model_type = None
    return ResumePlan(
        source=str(p),
        format="lite-dcp",
        ngpu=ws if isinstance(ws, int) else None,
        sizes=sizes,
        optimizer=opt.get("optimizer"),
        options=options,
        model_type=model_type,
        notes=() if meta.get("has_optimizer_state") else ("saved before the first step: no optimizer state",),
    )


def _megatron_dir(p: Path) -> Path | None:
    """The dist-ckpt folder at or under ``p``: ``p``, ``p/dist_ckpt``, verl's ``actor/dist_ckpt``, or Megatron-LM's
    ``iter_NNNNNNN`` named by ``latest_checkpointed_iteration.txt``."""
    tries = [p, p / "dist_ckpt", p / "actor" / "dist_ckpt", p / "actor"]
    latest = p / "latest_checkpointed_iteration.txt"
    if latest.is_file():
        it = latest.read_text().strip()
        if it.isdigit():
            tries.append(p / f"iter_{int(it):07d}")
            tries.append(p / f"global_step_{int(it)}" / "actor" / "dist_ckpt")
    for t in tries:
        md = t / "metadata.json"
        if md.is_file() and "sharded_backend" in _json(md):
            return t
    return None


_MEGATRON_ARGS = {
    "tp": "tensor_model_parallel_size",
    "pp": "pipeline_model_parallel_size",
    "vpp": "virtual_pipeline_model_parallel_size",
    "cp": "context_parallel_size",
    "ep": "expert_model_parallel_size",
    "etp": "expert_tensor_parallel_size",
}
"""Mesh field -> Megatron-LM's ``args`` name."""


def _megatron(p: Path) -> ResumePlan:
    md = _json(p / "metadata.json")
    notes = [f"dist-ckpt backend {md.get('sharded_backend')} (metadata.json)"]
    args = _common_args(p / "common.pt", notes)
    sizes: dict = {}
    ngpu = fully = opt = None
    if args is not None:
        for k, name in _MEGATRON_ARGS.items():
            v = getattr(args, name, None)
            if k == "vpp" and v is None:
                v = 1
            if isinstance(v, int):
                sizes[k] = v
        ws = getattr(args, "world_size", None)
        ngpu = ws if isinstance(ws, int) else None
        fr = getattr(args, "dist_ckpt_optim_fully_reshardable", None)
        fully = fr if isinstance(fr, bool) else None
        dist = getattr(args, "use_distributed_optimizer", None)
        opt = "dist_opt" if dist is not None else None
    return ResumePlan(
        source=str(p),
        format="megatron-dist-ckpt",
        ngpu=ngpu,
        sizes=sizes,
        optimizer=opt,
        fully_reshardable=fully,
        notes=tuple(notes),
    )


def _common_args(path: Path, notes: list[str]):
    """Megatron-LM's ``args`` namespace from ``common.pt`` (loaded with ``weights_only``: only an
    ``argparse.Namespace`` is allowed beside plain data), or None with a note."""
    if not path.is_file():
        notes.append("no common.pt: the topology it was written with is not recorded")
        return None
    import argparse
    import pickle

    import torch

    try:
        with torch.serialization.safe_globals([argparse.Namespace]):
            common = torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, OSError, ValueError) as e:
        notes.append(f"common.pt not readable with weights_only ({type(e).__name__}): topology not known")
        return None
    args = common.get("args") if isinstance(common, dict) else None
    if args is None:
        notes.append("common.pt holds no Megatron-LM args (verl's checkpoint manager writes none): topology not known")
    return args


# ------------------------------------------------------------------------------------------------ rules
def _changed(old: ResumePlan, new: ResumePlan, names=TOPOLOGY) -> dict:
    """Field -> (old, new) of the topology fields both know and that differ."""
    a, b = old.topology(), new.topology()
    return {k: (a[k], b[k]) for k in names if k in a and k in b and a[k] != b[k]}


def _said(changed: dict) -> str:
    return ", ".join(f"{k} {a} -> {b}" for k, (a, b) in changed.items())


def format_topology(old: ResumePlan, new: ResumePlan) -> list[Finding]:
    """What the checkpoint format allows when the topology changes (module docstring)."""
    ch = _changed(old, new)
    back = {k: a for k, (a, _) in ch.items()}
    if old.format in ("lite-run", "lite-dcp"):
        if not ch:
            return []
        return [
            Finding(
                "resume",
                "warning",
                "format_topology",
                f"the topology changes ({_said(ch)}): torch.distributed.checkpoint reshards the lite runtime's "
                "DTensors on load, but its tests cover resuming at the same world size only "
                "(mlite/runtime/checkpoint.py)",
                old.source,
                (back,),
            )
        ]
    if old.format != "megatron-dist-ckpt":
        return []
    if not old.sizes:
        return [
            Finding(
                "resume",
                "warning",
                "format_topology",
                "the checkpoint does not record its parallel sizes (" + "; ".join(old.notes) + "): Megatron-Core "
                "dist-ckpt reshards the model across TP/PP/EP/DP, the distributed optimizer's state across DP only "
                "unless it was saved with dist_ckpt_optim_fully_reshardable; resume with the mesh it was written with",
                old.source,
            )
        ]
    model_parallel = {k: v for k, v in ch.items() if k in ("tp", "pp", "vpp", "cp", "ep", "etp")}
    if model_parallel and old.fully_reshardable is not True:
        saved = "saved without" if old.fully_reshardable is False else "not recorded as saved with"
        return [
            Finding(
                "resume",
                "error",
                "format_topology",
                f"{_said(model_parallel)}: the distributed optimizer's state of this Megatron-Core dist-ckpt "
                f"({saved} dist_ckpt_optim_fully_reshardable) reshards across DP only (Megatron-LM "
                "--dist-ckpt-optim-fully-reshardable, default False: 'fully reshardable (TP/PP/EP/DP) as opposed to "
                "plain DP reshardability'); keep the saved sizes or load without the optimizer state",
                old.source,
                ({k: a for k, (a, _) in model_parallel.items()}, {"no_load_optim": True}),
            )
        ]
    if ch:
        return [
            Finding(
                "resume",
                "info",
                "format_topology",
                f"{_said(ch)}: Megatron-Core dist-ckpt reshards the model"
                + (" and (fully reshardable) optimizer state" if old.fully_reshardable else " and DP-sharded state"),
                old.source,
            )
        ]
    return []


def model_topology(old: ResumePlan, new: ResumePlan) -> list[Finding]:
    """Models whose checkpoints need the topology they were written with (:data:`SAME_TOPOLOGY_MODELS`)."""
    mt = new.model_type or old.model_type
    why = SAME_TOPOLOGY_MODELS.get(mt or "")
    ch = _changed(old, new)
    if not why or not ch:
        return []
    return [
        Finding(
            "resume",
            "error",
            "model_topology",
            f"{_said(ch)}: {why}; resume with the saved topology",
            old.source,
            ({k: a for k, (a, _) in ch.items()},),
        )
    ]


def same_backend(old: ResumePlan, new: ResumePlan) -> list[Finding]:
    """The optimizer state is its backend's: another backend does not read it."""
    if not old.optimizer or not new.optimizer or old.optimizer == new.optimizer:
        return []
    return [
        Finding(
            "resume",
            "error",
            "same_backend",
            f"optimizer: the checkpoint's optimizer state was written by {old.optimizer}; {new.optimizer} does not "
            f"read it (resume with --optimizer {old.optimizer}, or start the optimizer afresh from the weights)",
            old.source,
            ({"optimizer": old.optimizer},),
        )
    ]


LAYOUT_FIELDS = ("use_precision_aware_optimizer", "exp_avg_dtype", "exp_avg_sq_dtype", "param_dtype")
"""The saved options that decide the lite runtime's storage layout (``checkpoint.layout``)."""


def lite_layout(old: ResumePlan, new: ResumePlan) -> list[Finding]:
    """The lite runtime loads optimizer state only into the same storage layout (``checkpoint.load``)."""
    if old.format not in ("lite-run", "lite-dcp"):
        return []
    diff = {
        k: (old.options[k], new.options[k])
        for k in LAYOUT_FIELDS
        if k in old.options and k in new.options and old.options[k] != new.options[k]
    }
    if not diff:
        return []
    return [
        Finding(
            "resume",
            "error",
            "lite_layout",
            f"{_said(diff)}: the lite runtime's checkpoint.load refuses optimizer state of another storage layout "
            "(mlite/runtime/checkpoint.py layout: PAO remainders or fp32 master, moment dtypes, param dtype); keep "
            "the saved settings or load the weights only (load_optimizer=False)",
            old.source,
            ({k: a for k, (a, _) in diff.items()},),
        )
    ]


def _backend_rules(old: ResumePlan, new: ResumePlan) -> list[Finding]:
    out = []
    for rule in RESUME_RULES.get(old.optimizer or "", ()):
        try:
            rule(old, new)
        except MliteError as e:
            out.append(Finding("resume", "error", rule.__name__, e.message, old.source, _rule_fixes(rule, old, new)))
    return out


def _rule_fixes(rule: ResumeRule, old: ResumePlan, new: ResumePlan) -> tuple[dict, ...]:
    """Each differing option, mesh size or backend set back to its saved value, when the rule then accepts."""
    tries: list[tuple[dict, ResumePlan]] = []
    for k in sorted(set(old.options) & set(new.options)):
        if old.options[k] != new.options[k]:
            tries.append(({k: old.options[k]}, replace(new, options={**new.options, k: old.options[k]})))
    for k, (a, _) in _changed(old, new).items():
        t = replace(new, ngpu=a) if k == "ngpu" else replace(new, sizes={**new.sizes, k: a})
        tries.append(({k: a}, t))
    if old.optimizer and old.optimizer != new.optimizer:
        tries.append(({"optimizer": old.optimizer}, replace(new, optimizer=old.optimizer)))
    out = []
    for fix, t in tries:
        try:
            rule(old, t)
        except MliteError:
            continue
        out.append(fix)
    return tuple(out)


RULES = (same_backend, lite_layout, format_topology, model_topology)
"""The generic resume rules, in order (then the backend's own, :data:`RESUME_RULES`)."""


def resume_findings(old: ResumePlan, new: ResumePlan) -> list[Finding]:
    """Every resume finding of resuming plan ``new`` from a checkpoint written under ``old``."""
    out = [Finding("resume", "info", "read", _read_text(old), old.source)]
    for rule in RULES:
        out += rule(old, new)
    return out + _backend_rules(old, new)


def _read_text(old: ResumePlan) -> str:
    topo = " ".join(f"{k}={v}" for k, v in old.topology().items()) or "topology not recorded"
    opt = f", optimizer {old.optimizer}" if old.optimizer else ""
    notes = f" ({'; '.join(old.notes)})" if old.notes else ""
    return f"read {old.format}: {topo}{opt}{notes}"
