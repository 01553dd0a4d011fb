"""Options <-> overrides for the launchers: the forward direction (:func:`option_overrides`, used by every
launcher) and the reverse (:func:`read_parallel`, :func:`read_options`, used by ``mlite import-launcher``). The
training options go both ways through the options table (:mod:`mlite.options.verl`); the mesh keys are here."""

from __future__ import annotations

from ..errors import MliteError
from ..mesh import ParallelConfig
from ..mesh.axes import AXES, MEGATRON_KEYS
from ..mesh.layout import SPLIT_KEYS, PipelineSplit, layer_list
from ..options import verl as table
from .launcher import Knob
from .mlite_keys import ENGINE_FIELDS
from .overrides import Override, var

ACTOR = "actor_rollout_ref.actor"

PARALLEL_KEYS = MEGATRON_KEYS
"""mlite mesh name -> verl ``actor_rollout_ref.actor.megatron.*`` key (:data:`mlite.mesh.axes.AXES`)."""


def option_overrides(plan, mp, spec=None):
    """``(knobs, overrides, notes, options run)`` of ``plan.options`` for ``plan.target`` (from the options
    table): ``options run`` is what the target really runs (the launcher header states it)."""
    ctx = {"tp": mp.parallel.tp, "moe": bool(spec is not None and spec.num_experts)}
    view, notes = table.target_view(plan.options, plan.target, ctx)
    w = table.write(view, plan.target, ctx)
    knobs = [Knob(name=n, default=d, comment=c) for n, d, c in w.knobs]
    ovs = [Override(k, var(knob), add) if knob else Override.lit(k, v, add) for k, v, add, knob in w.overrides]
    return knobs, ovs, notes, view


def _roots(ovs, is_sft: bool, config_name: str | None) -> tuple[str, str, str]:
    """``(backend, engine root, optim root)``: backend ``mlite``, ``megatron`` or ``fsdp``."""
    by = {o.key: o for o in ovs}
    if is_sft:
        choice = by.get("engine")
        keys = {o.key for o in ovs}
        if (choice and choice.value == "mlite") or any(k in keys for k in ("engine.tp", "engine.ep", "engine.cp")):
            return "mlite", "engine", "optim"
        if (choice and choice.value == "megatron") or any(
            k.startswith("engine.") and k.endswith("_parallel_size") for k in keys
        ):
            return "megatron", "engine", "optim"
        return "fsdp", "engine", "optim"
    actor = by.get(f"actor@{ACTOR}")
    keys = {o.key for o in ovs}
    if (actor and actor.value == "mlite_actor") or any(
        k.startswith(f"{ACTOR}.engine.") and k.split(".")[-1] in ("tp", "pp", "cp", "ep") for k in keys
    ):
        return "mlite", f"{ACTOR}.engine", f"{ACTOR}.optim"
    engine = by.get("model_engine")
    if (
        (config_name or "").startswith("ppo_megatron_trainer")
        or (engine and engine.value == "megatron")
        or (actor and actor.value == "megatron_actor")
        or any(k.startswith(f"{ACTOR}.megatron.") for k in keys)
    ):
        return "megatron", f"{ACTOR}.megatron", f"{ACTOR}.optim"
    return "fsdp", f"{ACTOR}.fsdp_config", f"{ACTOR}.optim"


def _size(by, key: str, warnings: list[str], *, allow_null: bool = False):
    ov = by.get(key)
    if ov is None:
        return None, False
    v = ov.value
    if v is None and allow_null:
        return None, True
    if isinstance(v, int) and not isinstance(v, bool) and v >= 1:
        return v, True
    warnings.append(f"{key}={ov.raw}: not a positive integer (unresolved?); 1 used")
    return 1, True


def read_parallel(ovs, *, is_sft: bool, config_name: str | None):
    """``(backend, ParallelConfig, consumed keys, warnings)``."""
    backend, root, _ = _roots(ovs, is_sft, config_name)
    by = {o.key: o for o in ovs}
    w: list[str] = []
    consumed = {"engine", "optim", f"actor@{ACTOR}", "model_engine", "hydra.searchpath"}
    vals: dict = {}
    if backend == "mlite":
        for a in AXES:  # a null engine key (ETP: its default None) is mlite's 1
            v, seen = _size(by, f"{root}.{a.engine_key}", w, allow_null=a.default is None)
            if seen:
                consumed.add(f"{root}.{a.engine_key}")
                vals[a.name] = v
            if a.default is None:
                vals[a.name] = vals.get(a.name) or 1
        consumed |= {f"{root}.{k}" for k in ENGINE_FIELDS if k != "impl_cfg"} | {f"{root}.impl_cfg.use_thd"}
    elif backend == "megatron":
        for a in AXES:
            v, seen = _size(by, f"{root}.{a.megatron}", w, allow_null=a.megatron_nullable)
            if seen:
                consumed.add(f"{root}.{a.megatron}")
            if v is not None:
                vals[a.name] = v
        for a in AXES:  # verl / Megatron-Core: expert_tensor_parallel_size null means ETP = TP
            if a.megatron_inherits and vals.get(a.name) is None:
                vals[a.name] = vals.get(a.megatron_inherits, 1)
        layout = by.get(f"{root}.override_transformer_config.pipeline_model_parallel_layout")
        if layout is not None:
            consumed.add(layout.key)
            vals["pp_layout"] = None if layout.value is None else str(layout.value)
    else:
        w.append(
            "no mlite engine or Megatron mesh keys: an FSDP launcher is plain data parallel here "
            "(tp = pp = cp = ep = 1)"
            + ("" if is_sft else "; --estimate uses verl's FSDP actor model (mlite/memory/rl_fsdp.py)")
        )
    try:
        return backend, ParallelConfig(**vals), consumed, w
    except MliteError as e:
        w.append(f"mesh read from the launcher is not valid ({e.message}); defaults used")
        return backend, ParallelConfig(), consumed, w


def split_key(field: str, *, is_sft: bool) -> str:
    """The Hydra key of a :class:`~mlite.mesh.PipelineSplit` field in a verl Megatron launcher: the
    ``TransformerConfig`` fields under ``megatron.override_transformer_config.``, the layer list under ``megatron.``
    (verl-on-Ascend's ``ppo_mindspeed_trainer``)."""
    root = "engine" if is_sft else f"{ACTOR}.megatron"
    leaf = SPLIT_KEYS[field]
    return f"{root}.{leaf}" if field == "layer_list" else f"{root}.override_transformer_config.{leaf}"


def read_split(ovs, *, backend: str, is_sft: bool) -> tuple[PipelineSplit, set]:
    """``(PipelineSplit, consumed keys)``: the launcher's Megatron-Core pipeline split keys (null: unset). A value
    of the wrong kind raises MliteError naming the key (the CLI's exit 2)."""
    if backend != "megatron":
        return PipelineSplit(), set()
    by = {o.key: o for o in ovs}
    vals: dict = {}
    for f in SPLIT_KEYS:
        ov = by.get(split_key(f, is_sft=is_sft))
        if ov is None or ov.value is None:
            continue
        v = ov.value
        if f == "layer_list":
            vals[f] = layer_list(v, ov.key)
        elif f.startswith("account_for_"):
            if not isinstance(v, bool):
                raise MliteError(f"{ov.key}={ov.raw}: not True or False")
            vals[f] = v
        elif isinstance(v, int) and not isinstance(v, bool):
            vals[f] = v  # <= 0 is Megatron-Core's own error, said by the layers rule
        else:
            raise MliteError(f"{ov.key}={ov.raw}: not an integer layer count (or null)")
    return PipelineSplit(**vals), {split_key(f, is_sft=is_sft) for f in SPLIT_KEYS}


def read_options(ovs, *, backend: str, is_sft: bool):
    """``(TrainingOptions kwargs, consumed keys, warnings)``: what the launcher says about memory (the options
    table read backwards, :func:`mlite.options.verl.read`)."""
    opts, used, w = table.read(ovs, backend=backend, is_sft=is_sft)
    opts = {k: list(v) if isinstance(v, tuple) else v for k, v in opts.items()}  # JSON-shaped, as before
    if backend == "mlite":
        optim = "optim" if is_sft else f"{ACTOR}.optim"
        if any(o.key == f"{optim}.use_precision_aware_optimizer" for o in ovs):
            w.append(
                f"{optim}.use_precision_aware_optimizer is not read by verl's mlite engine (it reads "
                f"{optim}.override_optimizer_config.use_precision_aware_optimizer)"
            )
    try:
        from ..memory import TrainingOptions

        TrainingOptions(**opts)
    except MliteError as e:
        w.append(f"training options read are inconsistent ({e.message})")
    except TypeError as e:
        w.append(f"training options could not be read ({e})")
    return opts, used, w
