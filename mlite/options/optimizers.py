"""The optimizer registries: algorithms (what update runs: ``adam``) and sharding backends (where the state lives:
``fsdp2``, ``dist_opt``). Each entry is the only place that names its kind: what it refuses (rule functions of
:mod:`.rules`), what it stores per parameter (the estimator reads :attr:`Algorithm.state_bytes`), its runtime class
(a dotted path, imported only when the lite runtime builds it, so ``options/`` imports no ``runtime/``) and its name
is verl's Megatron backend value. A new optimizer is one :func:`ALGORITHMS.register <mlite.options.registry.Registry.register>` call; the
``--optimizer-algorithm`` choices, the options table, the memory view and ``mlite run`` read the registry.

Sources: Megatron-Core ``OptimizerConfig.optimizer`` (``adam`` / ``sgd``, megatron/core/optimizer/optimizer_config.py
at core_v0.16.1) names the algorithm; verl's Megatron backend writes it as ``actor_rollout_ref.actor.optim.optimizer``
(verl/trainer/config/optim/megatron.yaml: ``optimizer: adam``). Megatron Lite's ``impl_cfg.optimizer`` names the backend.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import MliteError
from . import rules
from .registry import Registry

DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
"""Bytes per element of a storage dtype."""

UPDATE_CHUNK = 1 << 20
"""Elements per chunk of the lite runtime's optimizer update (its torch-op chunks, and the least span of its
host kernel on an offloaded group; the time model prices the last span's copy back with it)."""

Rule = Callable[[Any], None]
"""A rule: reads the settings (Megatron-Core names) and raises :class:`~mlite.errors.MliteError` when it refuses."""


@dataclass(frozen=True)
class Algorithm:
    """An optimizer algorithm (the update rule)."""

    name: str
    """Its name: the ``--optimizer-algorithm`` value and Megatron-Core's ``OptimizerConfig.optimizer``."""
    help: str
    """One line for ``--help`` and the widget's tooltip."""
    state_bytes: Callable[[Any], tuple[int, int]]
    """Bytes per shard parameter of its first and second state tensor for the given options (reported as
    ``exp_avg`` / ``exp_avg_sq``; 0 for a tensor the algorithm does not keep). The master weights are not its."""
    runtime: dict[str, str] = field(default_factory=dict)
    """Backend name -> ``module:Class`` of the lite runtime's optimizer for it; a backend not listed does not run
    the algorithm in the lite runtime (refused before a run starts)."""
    refuses: tuple[Rule, ...] = ()
    """Rules of the settings it does not run (estimator, run and runtime alike)."""
    step_bytes: int = 0
    """Transient bytes per shard parameter of the update step outside its state (Megatron-Core's torch AdamW keeps
    ``sqrt(exp_avg_sq)``: 4)."""
    matrix_state: tuple[int, int] | None = None
    """Bytes per shard parameter of its two state tensors for the weight matrices it updates itself
    (:attr:`mlite.models.spec.ParamGroup.matrix`; Muon: one fp32 momentum buffer, ``(4, 0)``), where the rest runs
    its fallback's :attr:`state_bytes` (Muon's AdamW); None: one state layout for every parameter."""
    newton_schulz: bool = False
    """The step orthogonalises each full matrix (Newton-Schulz): the estimator counts its workspace
    (:func:`mlite.memory.muon.ns_workspace_bytes`) in ``transients["optimizer_step"]``."""


@dataclass(frozen=True)
class Backend:
    """An optimizer sharding backend (who shards parameters, gradients and state)."""

    name: str
    """Its name: the ``--optimizer`` value and Megatron Lite's ``impl_cfg.optimizer``."""
    help: str
    """One line for ``--help``."""
    setup: str
    """``module:function`` building the lite runtime's model sharding and optimizer:
    ``f(runtime, model, expert_names, optimizer_class) -> optimizer``."""
    refuses: tuple[Rule, ...] = ()
    """Rules of the settings it does not have (estimator, run and runtime alike)."""
    lite_refuses: tuple[Rule, ...] = ()
    """Rules of what the lite runtime's implementation does not run (not the estimator's concern)."""
    fixed: dict = field(default_factory=dict)
    """Options that do not apply to it -> the value they keep (the memory view disables their controls)."""
    shards_params: bool = False
    """Parameters and gradients are sharded over d too (``fully_shard``); False: whole parameters on every rank."""
    grad_buffer: bool = False
    """A contiguous gradient buffer in ``main_grads_dtype`` (Megatron-Core DDP): bucket padding, allocated for the
    whole run (``zero_grad`` zeroes it), the fp32 main-grad copies of a bf16 buffer without PAO, ``grad_offload``."""
    frees_grads: bool = False
    """``zero_grad`` frees the gradients after the step (they are not resident between steps)."""
    unit_gather: bool = False
    """Each layer's parameters are all-gathered for compute and its gradients reduce-scattered: one layer's
    unsharded copy is a transient."""
    hybrid_offload: bool = False
    """``offload_fraction`` runs Megatron-Core's HybridDeviceOptimizer: the state turns fp32 (PAO dtypes not applied)
    and the host holds an fp32 param copy and a pinned fp32 grad per offloaded parameter; False: the offloaded state
    keeps its dtypes and the host update reads fp32 copies of the gradients."""
    step_temporaries: bool = False
    """The algorithm's step temporaries (:attr:`Algorithm.step_bytes`) are counted at the peak (Megatron-Core's
    optimizer steps on its fp32 shard after the backward)."""
    verl_lite_engine: bool = False
    """verl's lite engine (:mod:`mlite.verl_engine`, ``engine=lite``) runs it."""
    chunked_state_offload: bool = False
    """Megatron-Core's chunked optimizer-state offload (``ChunkedOptimizerStateOffloader``,
    ``chunked_optimizer_state_offload``) runs on it; False: :func:`mlite.options.rules.chunked_offload` refuses it."""
    env_refuses: tuple[Callable[[Mapping[str, str]], None], ...] = ()
    """Rules of the launch environment it refuses (``CUDA_DEVICE_MAX_CONNECTIONS``); the preflight (``mlite check``)
    and ``mlite run`` call them."""
    override_refuses: tuple[Callable[[Mapping[str, Any]], None], ...] = ()
    """Rules of ``optim.override_optimizer_config`` keys it refuses that are no mlite option (mfsdp: sharding
    strategy, HSDP, optimizer instances); ``mlite import-launcher`` calls them."""
    fp32_main_buffers: bool = False
    """Megatron-FSDP's layout (:mod:`mlite.memory.optimizer`, ``mfsdp_bytes``): an fp32 local parameter shard (the
    master of the device-updated part; a compute-dtype mirror under full offload) and an fp32 ``main_grad`` shard held
    for the whole run; the host keeps the fp32 master, both moments and the gradient staging of the offloaded part."""


ALGORITHMS: Registry[Algorithm] = Registry("optimizer algorithm", "optimizer_algorithm")
"""The optimizer algorithms by name."""
BACKENDS: Registry[Backend] = Registry("optimizer backend", "optimizer")
"""The optimizer sharding backends by name."""


def _adam_state(o: Any) -> tuple[int, int]:
    return DTYPE_BYTES[o.exp_avg_dtype], DTYPE_BYTES[o.exp_avg_sq_dtype]


ALGORITHMS.register(
    Algorithm(
        "adam",
        "Adam with decoupled weight decay (AdamW; Megatron-Core's adam)",
        _adam_state,
        runtime={
            "fsdp2": "mlite.runtime.optim.optimizer:ShardedAdamW",
            "dist_opt": "mlite.runtime.optim.distributed:DistributedAdamW",
            "mfsdp": "mlite.runtime.optim.mfsdp:MfsdpAdamW",
        },
        refuses=(rules.bf16_moments_need_pao,),
        step_bytes=4,
    )
)
ALGORITHMS.register(
    Algorithm(
        "sgd",
        "SGD with momentum (Megatron-Core's sgd, sgd_momentum 0.9: one fp32 momentum buffer; estimator only)",
        lambda o: (4, 0),
        refuses=(rules.no_pao,),
    )
)
# Muon (Megatron Lite: ISEEKYAN/Megatron-LM experimental/lite/examples/muon/README.md @ 045fc78a): Newton-Schulz
# orthogonalised momentum for the weight matrices, AdamW for embeddings, output layer, norms and biases; DistOpt only.
# Rules and sources: mlite.options.rules (Muon block); bytes: mlite.memory.muon; runtime: mlite.runtime.optim.muon.
ALGORITHMS.register(
    Algorithm(
        "muon",
        "Muon (Newton-Schulz orthogonalised momentum on weight matrices, AdamW for the rest; dist_opt only)",
        lambda o: (4, 4),
        runtime={"dist_opt": "mlite.runtime.optim.muon:DistributedMuon"},
        refuses=(rules.muon_needs_dist_opt, rules.muon_no_pao, rules.muon_no_cpu_offload, rules.muon_settings),
        step_bytes=4,
        matrix_state=(4, 0),
        newton_schulz=True,
    )
)
BACKENDS.register(
    Backend(
        "dist_opt",
        "Megatron-Core DDP + distributed optimizer",
        "mlite.runtime.optim.backends:dist_opt",
        refuses=(rules.pao_needs_distributed_optimizer, rules.fp8_weights_need_fsdp2),
        lite_refuses=(rules.state_on_device,),
        grad_buffer=True,
        hybrid_offload=True,
        step_temporaries=True,
        chunked_state_offload=True,
    )
)
BACKENDS.register(
    Backend(
        "fsdp2",
        "PyTorch fully_shard",
        "mlite.runtime.optim.backends:fsdp2",
        refuses=(rules.grads_in_param_dtype, rules.always_sharded),
        fixed={"main_grads_dtype": "fp32", "use_distributed_optimizer": True},
        shards_params=True,
        frees_grads=True,
        unit_gather=True,
        verl_lite_engine=True,
    )
)

# Megatron-FSDP (Megatron Lite's impl_cfg.optimizer=mfsdp; the fork's primitive/optimizers/__init__.py @ e7095224
# registers "mfsdp" -> primitive/optimizers/mfsdp/backend.py). Rules and sources: mlite.options.rules (mfsdp block).
BACKENDS.register(
    Backend(
        "mfsdp",
        "Megatron-FSDP (Megatron Lite's standalone M-FSDP, optim_grads_params; offload_fraction 0, (0, 1) or 1)",
        "mlite.runtime.optim.backends:mfsdp",
        refuses=(
            rules.mfsdp_fp32_main_grads,
            rules.mfsdp_sharded,
            rules.mfsdp_bucket_size_positive,
            rules.fp8_weights_need_fsdp2,  # FP8_WEIGHT_SUPPORTED_OPTIMIZERS = {"fsdp2"}
        ),
        lite_refuses=(rules.mfsdp_no_pao_lite,),
        fixed={"main_grads_dtype": "fp32", "use_distributed_optimizer": True},
        shards_params=True,
        unit_gather=True,
        env_refuses=(rules.no_single_device_connection,),
        override_refuses=(rules.mfsdp_overrides,),
        fp32_main_buffers=True,
    )
)


def check_overrides(backend: str, values: Mapping[str, Any]) -> None:
    """The backend's rules of launcher keys mlite has no option for (:attr:`Backend.override_refuses`), on a
    launcher's ``optim.override_optimizer_config`` children (``mlite import-launcher``)."""
    for rule in BACKENDS.entry(backend).override_refuses:
        rule(values)


def check_env(backend: str, env: Mapping[str, str]) -> None:
    """The backend's launch-environment rules (:attr:`Backend.env_refuses`) on ``env`` (``os.environ`` for ``mlite
    run``, the launcher's exports for the preflight)."""
    for rule in BACKENDS.entry(backend).env_refuses:
        rule(env)


def algorithm_rules(o: Any) -> tuple[Rule, ...]:
    """The rules that hold whichever backend runs ``o`` (fields named as in :class:`~mlite.options.TrainingOptions`:
    ``optimizer`` the backend, ``optimizer_algorithm``), in order: the offload share is in range, then what the
    algorithm refuses. Both names must be registered (else :class:`MliteError` here)."""
    BACKENDS.entry(o.optimizer)
    a = ALGORITHMS.entry(o.optimizer_algorithm)
    return (rules.offload_fraction_in_range, *a.refuses)


def optimizer_rules(o: Any, backend: str | None = None) -> tuple[Rule, ...]:
    """Every optimizer rule for the settings ``o`` in the order :func:`check_optimizer` runs them:
    :func:`algorithm_rules`, then what the backend refuses (``backend`` overrides ``o.optimizer``). The preflight
    (``mlite check``) runs each of them to report every refusal, not only the first."""
    b = BACKENDS.entry(backend or o.optimizer)
    return (*algorithm_rules(o), *b.refuses, _chunked_rule(b))


def _chunked_rule(b: Backend) -> Rule:
    """:func:`mlite.options.rules.chunked_offload` on backend ``b``, as a rule of the settings alone."""

    def chunked_offload(o: Any) -> None:
        rules.chunked_offload(o, b)

    chunked_offload.__doc__ = rules.chunked_offload.__doc__
    return chunked_offload


def check_algorithm(o: Any) -> None:
    """Raise the first refusal of :func:`algorithm_rules`: both names are registered, the offload share is in range,
    and the algorithm does not refuse the settings."""
    for rule in algorithm_rules(o):
        rule(o)


def check_optimizer(o: Any, backend: str | None = None) -> None:
    """Every optimizer rule for the settings ``o`` (:func:`optimizer_rules`): :func:`check_algorithm`, then what the
    backend refuses (``backend`` overrides ``o.optimizer``: Megatron Lite's ``impl_cfg.optimizer``), then the
    chunked-offload rules on that backend."""
    for rule in optimizer_rules(o, backend):
        rule(o)


def check_lite_runtime(o: Any, backend: str | None = None) -> None:
    """What the lite runtime refuses beyond :func:`check_optimizer`: its backend's ``lite_refuses`` and an
    algorithm without a runtime class for the backend."""
    b = BACKENDS.entry(backend or o.optimizer)
    a = ALGORITHMS.entry(o.optimizer_algorithm)
    if b.name not in a.runtime:
        where = f"it runs it with --optimizer {', '.join(a.runtime)}" if a.runtime else "it has no class for it"
        raise MliteError(
            f"optimizer_algorithm: {a.name} is not run by the lite runtime's {b.name} ({where}); "
            "choose another --optimizer or --optimizer-algorithm"
        )
    for rule in b.lite_refuses:
        rule(o)


def check_verl_lite_engine(backend: str, field_name: str = "optimizer") -> None:
    """verl's lite engine runs only the backends whose entry says so (:attr:`Backend.verl_lite_engine`); the one
    refusal of ``mlite run --trainer verl-sft``, ``mlite export --target verl-lite-sft`` and the engine itself
    (``field_name`` names the caller's spelling of the setting)."""
    if BACKENDS.entry(backend).verl_lite_engine:
        return
    runs = ", ".join(b.name for b in BACKENDS.values() if b.verl_lite_engine)
    fix = f"use {field_name} {runs}" if field_name.startswith("--") else f"set it to {runs}"
    raise MliteError(
        f"{field_name}: {backend} is not run by verl's lite engine (engine=lite builds {runs} only); {fix}"
    )


def load(path: str) -> Any:
    """The object a ``module:name`` path names (imported now)."""
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


def runtime_class(algorithm: str, backend: str) -> Any:
    """The lite runtime's optimizer class of ``algorithm`` on ``backend``."""
    return load(ALGORITHMS.entry(algorithm).runtime[backend])


def inapplicable(optimizer: str, pao: bool) -> dict:
    """The options that do not apply to ``optimizer`` with (or without) PAO -> the value each takes then: without PAO
    bf16 moments and the param remainders (Megatron-Core rejects bf16 moments, and remainders are PAO's); then what
    the backend does not have (:attr:`Backend.fixed`: fsdp2 keeps gradients in the parameter dtype and always
    shards). The memory view disables these controls; bf16 main grads without PAO do apply (Megatron-Core's
    ``grad_reduce_in_fp32=False``)."""
    out: dict = {}
    if not pao:
        out.update({m: "fp32" for m in rules.MOMENTS}, store_param_remainders=True)
    out.update(BACKENDS.entry(optimizer).fixed)
    return out


PLUGINS_ENV = "MLITE_PLUGINS"
"""Environment variable: comma-separated modules imported once the registries exist, so that the entries they
register are there in every process of a run (``mlite run`` workers inherit the environment)."""


def load_plugins() -> None:
    """Import the modules named in ``$MLITE_PLUGINS`` (each registers its entries when imported)."""
    for name in filter(None, (m.strip() for m in os.environ.get(PLUGINS_ENV, "").split(","))):
        try:
            importlib.import_module(name)
        except ImportError as e:
            raise MliteError(f"{PLUGINS_ENV}: cannot import {name} ({e}); fix the module name or PYTHONPATH") from e


def mfsdp_split_sizes(numels: Sequence[int], decay: Sequence[bool], fraction: float) -> list[bool]:
    """Which tensors (in parameter order, sizes ``numels``, ``decay``: in the weight-decay group) M-FSDP offloads
    for ``offload_fraction = fraction``: the decay group first, then the rest, each in parameter order; whole tensors;
    a tensor goes to the host while the count already sent is below ``int(fraction x total)`` (so the last one may
    overshoot). This is the fork's ``_split_param_groups_by_fraction`` (ISEEKYAN/Megatron-LM ``experimental/lite/
    megatron/lite/primitive/optimizers/mfsdp/``, called by ``build_mfsdp_stack``; its fraction-0.5 test: "The greedy
    split assigns whole params"), not an element split: the real Megatron-FSDP offloads whole tensors. The one
    rule: the lite runtime's :func:`mlite.runtime.optim.mfsdp.mfsdp_split` and the estimator
    (:func:`mlite.memory.estimate.estimate` with ``activation_model="lite"``, over
    :func:`mlite.memory.lite.lite_tensors`) both call it."""
    if fraction <= 0.0:
        return [False] * len(numels)
    if fraction >= 1.0:
        return [True] * len(numels)
    target = int(sum(numels) * fraction)
    order = [i for i, d in enumerate(decay) if d] + [i for i, d in enumerate(decay) if not d]
    out, sent = [False] * len(numels), 0
    for i in order:
        if sent < target:
            out[i] = True
            sent += numels[i]
    return out


load_plugins()
