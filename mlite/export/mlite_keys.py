"""The Hydra keys of verl's mlite engine (package ``verl_mlite``, not on PyPI) that launchers may set.

verl 0.9.1 as installed has no mlite engine, so its packaged Hydra configuration cannot judge ``engine.tp=...`` or
``+engine.impl_cfg.optimizer=...``. This module is the explicit key list the exporter writes and the validator
accepts instead. Sources (written down so the list can be re-checked when verl_mlite changes):

* ``/work/shared/reference/megatron_lite.md`` ("verl side"): ``engine=mlite`` with
  ``hydra.searchpath=[pkg://verl_mlite.config]``, ``actor@actor_rollout_ref.actor=mlite_actor``, engine knobs
  ``engine.tp/pp/vpp/cp/ep/etp`` (:attr:`mlite.mesh.axes.Axis.engine_key`), ``engine.impl=lite``, ``engine.model_name=auto``, ``+engine.impl_cfg.optimizer=
  dist_opt|fsdp2``, ``+engine.impl_cfg.recompute=[full]``, ``+optim.override_optimizer_config.offload_fraction=1.0``,
  ``+optim.override_optimizer_config.use_precision_aware_optimizer=True``, runtime context offload
  ``engine.param_offload / optimizer_offload / grad_offload``.
* verl_mlite's public Hydra group files (Megatron-LM ``experimental/lite/examples/verl/verl_mlite/config/``):
  ``engine/mlite.yaml`` (the fields below with their defaults; ``impl_cfg`` holds only ``use_thd`` so every other
  ``impl_cfg`` key needs ``+``) and ``actor/mlite_actor.yaml`` (defaults ``/optim@optim: megatron``,
  ``/engine@engine: mlite``, ``actor``; ``strategy: mlite``), and its engine, which reads ``offload_fraction``
  (alias ``optimizer_offload_fraction``, or 1.0 from ``optimizer_cpu_offload``), ``use_precision_aware_optimizer``,
  ``decoupled_weight_decay`` and ``adam_eps`` from ``optim.override_optimizer_config``.
* verl 0.9.0's example launchers ``run_qwen3_5_35b_megatron_lite.sh``, ``run_kimi_k2_6_glm5_1_megatron_lite.sh``
  and ``examples/sft/gsm8k/run_deepseek_v4_megatron_lite.sh`` (the same keys, ``+`` exactly where listed here).

Because the optimizer group under ``mlite_actor`` is verl's own ``optim/megatron.yaml``, ``optim.*`` keys are
checked against verl's packaged config; only ``override_optimizer_config.*`` children (an empty dict there) need ``+``.
"""

from __future__ import annotations

from ..mesh.axes import AXES
from ..options.table import OPTIMIZERS

SEARCHPATH = "pkg://verl_mlite.config"
"""Hydra search path that provides the ``engine/mlite`` and ``actor/mlite_actor`` config groups."""

ENGINE_GROUP_OPTION = "mlite"
"""``engine=mlite`` (SFT: the engine group option)."""

ACTOR_GROUP_OPTION = "mlite_actor"
"""``actor@actor_rollout_ref.actor=mlite_actor`` (PPO/GRPO: the actor group option)."""

IMPL_CFG_FIELDS: dict[str, object] = {"use_thd": True}
"""``engine.impl_cfg`` keys that exist in ``engine/mlite.yaml`` and their defaults."""

ENGINE_FIELDS: dict[str, object] = {
    "_target_": "verl_mlite.engine.config.MegatronLiteEngineConfig",
    "strategy": "mlite",
    "custom_backend_module": "verl_mlite.engine.mlite_engine",
    "param_offload": False,
    "optimizer_offload": False,
    "grad_offload": False,
    "forward_only": False,
    "dtype": "bfloat16",
    "export_dtype": "bfloat16",
    "seed": 42,
    "full_determinism": False,
    "model_name": "auto",
    "impl": "lite",
    **{a.engine_key: a.default for a in AXES},  # engine/mlite.yaml: tp etp ep pp vpp cp (order of no effect)
    "attention_backend_override": "flash",
    "router_aux_loss_coef": None,
    "impl_cfg": IMPL_CFG_FIELDS,
}
"""``engine/mlite.yaml``: keys that exist in the engine config (set them WITHOUT ``+``) and their defaults."""

IMPL_CFG_ADDED: dict[str, tuple] = {
    "optimizer": OPTIMIZERS,
    "recompute": (),
}
"""``engine.impl_cfg`` keys that are not in ``engine/mlite.yaml`` (set them WITH ``+``); allowed values (empty: any)."""

OPTIM_OVERRIDE_KEYS: tuple[str, ...] = (
    "offload_fraction",
    "optimizer_offload_fraction",
    "optimizer_cpu_offload",
    "use_precision_aware_optimizer",
    "decoupled_weight_decay",
    "adam_eps",
    "overlap_cpu_optimizer_d2h_h2d",
    # M-FSDP's build_mfsdp_config reads bucket_size from the optimizer's override_optimizer_config
    # (ISEEKYAN/Megatron-LM experimental/lite/megatron/lite/primitive/optimizers/mfsdp/config.py @ 0d14590c)
    "bucket_size",
)
"""``optim.override_optimizer_config`` children the mlite engine reads (always WITH ``+``: the dict is empty)."""

ACTOR_DEFAULTS: tuple[str, ...] = ("/optim@optim: megatron", "/engine@engine: mlite", "actor", "_self_")
"""``actor/mlite_actor.yaml`` defaults list."""

ACTOR_FIELDS: dict[str, object] = {"_target_": "verl.workers.config.ActorConfig", "strategy": "mlite"}
"""``actor/mlite_actor.yaml`` own fields."""

STAND_IN_ACTOR = "megatron_actor"
"""verl's packaged actor option with the same optimizer group as ``mlite_actor`` (used to compose the non-mlite
overrides of a GRPO launcher against verl alone)."""


def engine_key_problem(key: str, add: bool, value=None) -> str | None:
    """Why ``[+]engine.<key>=value`` is wrong for the mlite engine (``key`` relative to ``engine.``), or None."""
    if key.startswith("impl_cfg."):
        sub = key[len("impl_cfg.") :]
        if sub in IMPL_CFG_FIELDS:
            return f"engine.{key} exists in engine/mlite.yaml: drop the '+'" if add else None
        if sub not in IMPL_CFG_ADDED:
            return f"engine.{key} is not a known mlite impl_cfg key (known: {', '.join(IMPL_CFG_ADDED)}, use_thd)"
        if not add:
            return f"engine.{key} is not in engine/mlite.yaml: write +engine.{key}"
        allowed = IMPL_CFG_ADDED[sub]
        if allowed and value not in allowed:
            return f"engine.{key}={value!r}: expected one of {', '.join(allowed)}"
        return None
    if key not in ENGINE_FIELDS:
        return f"engine.{key} is not a field of the mlite engine config (engine/mlite.yaml)"
    if add:
        return f"engine.{key} exists in engine/mlite.yaml: drop the '+'"
    return None


def optim_override_problem(key: str, add: bool) -> str | None:
    """Why ``[+]optim.override_optimizer_config.<key>`` is wrong for the mlite engine, or None."""
    if key not in OPTIM_OVERRIDE_KEYS:
        return f"optim.override_optimizer_config.{key} is not read by the mlite engine"
    if not add:
        return f"optim.override_optimizer_config is empty in verl's optim/megatron.yaml: write +...{key}"
    return None


def engine_yaml() -> str:
    """``engine/mlite.yaml`` rebuilt from :data:`ENGINE_FIELDS` (a stand-in config group for composing)."""
    return _yaml(ENGINE_FIELDS)


def actor_yaml() -> str:
    """``actor/mlite_actor.yaml`` rebuilt from :data:`ACTOR_DEFAULTS` and :data:`ACTOR_FIELDS`."""
    return "defaults:\n" + "".join(f"  - {d}\n" for d in ACTOR_DEFAULTS) + _yaml(ACTOR_FIELDS)


def _scalar(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _yaml(d: dict, indent: str = "") -> str:
    out = []
    for k, v in d.items():
        if isinstance(v, dict):
            out.append(f"{indent}{k}:\n" + _yaml(v, indent + "  "))
        else:
            out.append(f"{indent}{k}: {_scalar(v)}\n")
    return "".join(out)
