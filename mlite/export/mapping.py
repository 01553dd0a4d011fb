"""Overrides -> mesh and training options, for the mlite engine's keys and verl's Megatron keys (the reverse of
what :mod:`.engine_mlite` and :mod:`.verl_grpo_megatron` write)."""

from __future__ import annotations

from ..errors import MliteError
from ..mesh import ParallelConfig
from .mlite_keys import ENGINE_FIELDS
from .verl_grpo_megatron import PARALLEL_KEYS

ACTOR = "actor_rollout_ref.actor"


def _roots(ovs, is_sft: bool, config_name: str | None) -> tuple[str, str, str]:
    """``(backend, engine root, optim root)``: backend ``mlite``, ``megatron`` or ``fsdp``."""
    by = {o.key: o for o in ovs}
    if is_sft:
        choice = by.get("engine")
        keys = {o.key for o in ovs}
        if (choice and choice.value == "mlite") or any(k in keys for k in ("engine.tp", "engine.ep", "engine.cp")):
            return "mlite", "engine", "optim"
        if (choice and choice.value == "megatron") or any(k.startswith("engine.") and k.endswith("_parallel_size")
                                                          for k in keys):
            return "megatron", "engine", "optim"
        return "fsdp", "engine", "optim"
    actor = by.get(f"actor@{ACTOR}")
    keys = {o.key for o in ovs}
    if (actor and actor.value == "mlite_actor") or any(k.startswith(f"{ACTOR}.engine.") and k.split(".")[-1] in
                                                       ("tp", "pp", "cp", "ep") for k in keys):
        return "mlite", f"{ACTOR}.engine", f"{ACTOR}.optim"
    engine = by.get("model_engine")
    if (config_name or "").startswith("ppo_megatron_trainer") or (engine and engine.value == "megatron") or \
            (actor and actor.value == "megatron_actor") or any(k.startswith(f"{ACTOR}.megatron.") for k in keys):
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
        for k in ("tp", "pp", "vpp", "cp", "ep", "etp"):
            v, seen = _size(by, f"{root}.{k}", w, allow_null=(k == "etp"))
            if seen:
                consumed.add(f"{root}.{k}")
                vals[k] = v
        vals["etp"] = vals.get("etp") or 1
        consumed |= {f"{root}.{k}" for k in ENGINE_FIELDS if k != "impl_cfg"} | {f"{root}.impl_cfg.use_thd"}
    elif backend == "megatron":
        for k, name in PARALLEL_KEYS.items():
            v, seen = _size(by, f"{root}.{name}", w, allow_null=k in ("vpp", "etp"))
            if seen:
                consumed.add(f"{root}.{name}")
            if v is not None:
                vals[k] = v
        if vals.get("etp") is None:
            vals["etp"] = vals.get("tp", 1)  # verl / Megatron-Core: expert_tensor_parallel_size null means ETP = TP
        layout = by.get(f"{root}.override_transformer_config.pipeline_model_parallel_layout")
        if layout is not None:
            consumed.add(layout.key)
            vals["pp_layout"] = None if layout.value is None else str(layout.value)
    else:
        w.append("no mlite engine or Megatron mesh keys: an FSDP launcher is plain data parallel here "
                 "(tp = pp = cp = ep = 1)")
    try:
        return backend, ParallelConfig(**vals), consumed, w
    except MliteError as e:
        w.append(f"mesh read from the launcher is not valid ({e.message}); defaults used")
        return backend, ParallelConfig(), consumed, w


def _recompute(val) -> tuple[str, list[str]]:
    mods = [str(m) for m in (val if isinstance(val, list) else [val] if val else [])]
    if "full" in mods:
        return "full", []
    if "core_attn" in mods:
        return "selective", [m for m in mods if m != "core_attn"]
    return "none", mods


def read_options(ovs, *, backend: str, is_sft: bool):
    """``(TrainingOptions kwargs, consumed keys, warnings)``: what the launcher says about memory."""
    by = {o.key: o.value for o in ovs}
    root = "engine" if is_sft else f"{ACTOR}.{'megatron' if backend == 'megatron' else 'engine'}"
    optim = "optim" if is_sft else f"{ACTOR}.optim"
    oc = f"{optim}.override_optimizer_config"
    opts: dict = {}
    w: list[str] = []
    used: set = set()

    def get(key, default=None):
        if key in by:
            used.add(key)
            v = by[key]
            if isinstance(v, str) and ("${" in v or "$(" in v):  # could not be expanded: unresolved, not a value
                w.append(f"{key}={v}: unresolved; not used")
                return default
            return v
        return default

    if is_sft:
        opts["seq_len"] = get("data.max_length", 1024)
        opts["micro_batch_size"] = get("data.micro_batch_size_per_gpu", 4)
    else:
        opts["seq_len"] = get("data.max_prompt_length", 512) + get("data.max_response_length", 512) \
            if all(isinstance(get(k, 512), int) for k in ("data.max_prompt_length", "data.max_response_length")) \
            else 4096
        opts["micro_batch_size"] = get(f"{ACTOR}.ppo_micro_batch_size_per_gpu", 1) or 1
    for k in ("seq_len", "micro_batch_size"):
        if not isinstance(opts[k], int) or isinstance(opts[k], bool) or opts[k] < 1:
            w.append(f"{k} could not be read ({opts[k]!r}); the estimator's default is used")
            del opts[k]
    if backend == "mlite":
        opt = get(f"{root}.impl_cfg.optimizer")
        if opt is not None:
            if opt in ("dist_opt", "fsdp2"):
                opts["optimizer"] = opt
            else:
                w.append(f"{root}.impl_cfg.optimizer={opt}: expected dist_opt or fsdp2; not used")
        rec = get(f"{root}.impl_cfg.recompute")
        if rec is not None:
            opts["recompute"], mods = _recompute(rec)
            opts["recompute_modules"] = mods
        for k in ("param_offload", "optimizer_offload", "grad_offload"):
            v = get(f"{root}.{k}")
            if v is not None:
                opts[k] = bool(v)
        frac = get(f"{oc}.offload_fraction", get(f"{oc}.optimizer_offload_fraction"))
        if frac is None and get(f"{oc}.optimizer_cpu_offload"):
            frac = 1.0
        if frac is None and opts.get("optimizer_offload"):
            frac = 1.0  # verl's mlite engine: optimizer_offload without a fraction offloads all of it
        pao = get(f"{oc}.use_precision_aware_optimizer")
        if get(f"{optim}.use_precision_aware_optimizer") is not None:
            w.append(f"{optim}.use_precision_aware_optimizer is not read by verl's mlite engine (it reads "
                     f"{oc}.use_precision_aware_optimizer)")
    elif backend == "megatron":
        opts["optimizer"] = "dist_opt"
        for k in ("param_offload", "optimizer_offload"):
            v = get(f"{root}.{k}")
            if v is not None:
                opts[k] = bool(v)
        v = get(f"{root}.use_distributed_optimizer")
        if v is not None:
            opts["use_distributed_optimizer"] = bool(v)
        sp = get(f"{root}.sequence_parallel")
        tp = get(f"{root}.tensor_model_parallel_size")
        opts["sequence_parallel"] = bool(sp) if sp is not None else isinstance(tp, int) and tp > 1
        pao = get(f"{optim}.use_precision_aware_optimizer", get(f"{oc}.use_precision_aware_optimizer"))
        if pao:
            for k in ("main_grads_dtype", "exp_avg_dtype", "exp_avg_sq_dtype"):
                v = get(f"{optim}.{k}")
                if v is not None:
                    opts[k] = str(v)
        srp = get(f"{oc}.store_param_remainders")
        if srp is not None:
            opts["store_param_remainders"] = bool(srp)
        frac = get(f"{oc}.optimizer_offload_fraction", 1.0) if get(f"{oc}.optimizer_cpu_offload") else None
        get(f"{oc}.overlap_cpu_optimizer_d2h_h2d")
        tc = f"{root}.override_transformer_config"
        gran = get(f"{tc}.recompute_granularity")
        mods = get(f"{tc}.recompute_modules")
        get(f"{tc}.recompute_method")
        get(f"{tc}.recompute_num_layers")
        if gran == "full":
            opts["recompute"], opts["recompute_modules"] = "full", []
        elif gran == "selective":
            opts["recompute"], opts["recompute_modules"] = _recompute(list(mods or ["core_attn"]))
    else:
        frac, pao = None, None
    if pao is not None:
        opts["use_precision_aware_optimizer"] = bool(pao)
    if frac is not None:
        if isinstance(frac, (int, float)) and not isinstance(frac, bool) and 0 <= frac <= 1:
            opts["offload_fraction"] = float(frac)
        else:
            w.append(f"offload fraction {frac!r} is not a number in [0, 1]; not used")
    try:
        from ..memory import TrainingOptions

        TrainingOptions(**opts)
    except MliteError as e:
        w.append(f"training options read are inconsistent ({e.message})")
    except TypeError as e:
        w.append(f"training options could not be read ({e})")
    return opts, used, w
