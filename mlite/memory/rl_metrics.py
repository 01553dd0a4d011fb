"""What verl's logged memory metrics count (``measured_as``) and the kit's prediction of exactly that number
(``predicted_metrics``), from an :class:`~mlite.memory.rl.RLEstimate`.

verl logs three memory metrics per step (file names relative to verl-project/verl; tags with their commits:
v0.3.0.post1 ``070ed6ac``, v0.4.1 ``8d9e350e``, v0.5.0 ``8fdc4d3f``, v0.6.0 ``ddd86f52``, v0.7.0 ``f9c855f7``,
v0.7.1 ``bec9ef74``, v0.8.0 ``7aed6b23``, v0.9.0 ``483b8a00``, main ``1dda039b``):

- ``perf/max_memory_allocated_gb`` = ``get_torch_device().max_memory_allocated() / (1024**3)`` ("gb" is GiB):
  v0.3 to v0.7.x in ``update_actor`` of ``verl/workers/fsdp_workers.py`` / ``megatron_workers.py``, right after
  ``self.actor.update_policy(...)``; v0.8 on in ``TrainingWorker._postprocess_output``
  (``verl/workers/engine_workers.py``), once per ``train_batch`` (mini-batch) of the update, after the all-gather of
  the other metrics (so each rank logs its own). Never reset by verl (no ``reset_peak_memory_stats`` on the
  training path at any of these tags: ``verl/utils/memory_utils.py`` resets only for the memory profiler), so it is
  the process's peak since it started, over every phase run so far: at step 1 the first weight sync
  (``checkpoint_manager.update_weights`` before the loop, ``verl/trainer/ppo/ray_trainer.py`` on main; the sharding
  manager's ``__enter__`` before each generation in v0.3-v0.5), the rollout, old_log_prob, ref and the update.
- ``perf/max_memory_reserved_gb``: the same with ``max_memory_reserved()``.
- ``perf/cpu_memory_used_gb`` = ``psutil.virtual_memory().used / (1024**3)``: the whole node's used RAM (every
  process on it; page cache and buffers excluded by psutil).

Over ranks: before v0.6.0 ``DataProto.concat`` (``verl/protocol.py`` @ v0.5.0) keeps ``data[0].meta_info``, so the
logged figure is the first DP rank's; from v0.6.0 (``eb06fda2`` "merge metrics from all workers in
DataProto.concat()", #3699, 2025-10-10) the metrics of every worker are merged into lists and ``reduce_metrics``
(``verl/utils/metric/utils.py``) takes ``np.max`` of a key containing "max" and the mean otherwise: the two GPU
metrics are the max over ranks, ``cpu_memory_used_gb`` the mean over ranks of their node's RAM. From v0.8 the
engine workers return the metrics as a ``TensorDict`` with an empty batch, and ``concat_tensordict`` keeps the first
one (``concat_tensordict_with_none_bsz``, ``verl/utils/tensordict_utils.py`` @ v0.8.0: "directly return the first
meta info"): the first DP rank's again, the max over its mini-batches (``reduce_metrics``). From v0.8 the trainer
also renames them: ``_update_actor`` prefixes every actor metric with ``actor/`` (``rename_dict``,
``verl/trainer/ppo/ray_trainer.py`` @ v0.8.0), so a log carries ``actor/perf/max_memory_allocated_gb`` (and, with a
critic, ``critic/perf/...`` from the critic's update, earlier in the step, in the same fused ``WorkerDict`` process);
:attr:`MetricMeaning.key` is the key as logged, the names here stay verl's ``perf/...``.

Which process: the actor worker (a ``WorkerDict`` holding the actor and, fused, a colocated reference or critic).
``RayPPOTrainer.init_workers`` (``verl/trainer/ppo/ray_trainer.py`` @ 1dda039b; the same loop at v0.3.0.post1 and
v0.7.0) groups the roles by resource pool and calls ``create_colocated_worker_cls`` once per pool
(``verl/single_controller/ray/base.py`` @ 1dda039b): its ``WorkerDict.__init__`` instantiates every role's class in
the one ``ray.remote`` actor, one process per GPU; ``main_ppo.py`` maps ``Role.Critic`` to the ``global_pool`` with
the actor. So the critic's allocations (its idle state, ``compute_values``, ``update_critic``) share the actor's
CUDA caching allocator and its ``max_memory_allocated``: every critic part of a phase counts here.
vLLM's model runner lives in that process up to verl v0.7.0 in hybrid mode (sync rollout:
``distributed_executor_backend="external_launcher"`` in ``vllm_rollout_spmd.py``; async:
``ExternalZeroMQDistributedExecutor`` driving the hybrid workers, ``vllm_async_server.py`` @ v0.7.0); from v0.7.1
vLLM runs in processes of its own (``"distributed_executor_backend": "mp"``, ``e9405d70``, #4280, 2026-01-24, first
released in v0.7.1), so the metric covers the actor process only. verl's colocated and standalone rollout modes give
vLLM no hybrid workers (``ExternalZeroMQDistributedExecutor if len(self.workers) > 0 else None``) and so their own
processes too. SGLang always runs its model in scheduler subprocesses (sgl-project/sglang
``python/sglang/srt/entrypoints/engine.py``: ``Engine`` -> ``_launch_subprocesses``, one ``mp.Process`` per TP rank
running ``run_scheduler_process``), outside the actor process at every verl version. In verl 0.3
(``verl/workers/rollout/sglang_rollout/sglang_rollout.py`` @ v0.3.0.post1) the rollout builds sglang's ``VerlEngine``
with ``enable_memory_saver=True`` and ``mem_fraction_static=gpu_memory_utilization``; ``VerlEngine`` starts an
``Engine`` on the first TP rank of each node only (``python/sglang/srt/entrypoints/verl_engine.py`` @ ``01f14fd3``,
read at that stored commit: the v0.4.5.post3 tag's snapshot was over the size limit) and the engine's docstring puts
the scheduler, which holds the weights and KV pool, in a subprocess (``engine.py`` @ ``001067ff``). So
``release_memory_occupation`` / ``resume_memory_occupation`` (torch_memory_saver pausing the scheduler's regions;
``fsdp_sglang.py`` calls them around each generation) change another process's memory, never the actor's
``max_memory_allocated``; what the weight sync adds to the actor process is its state dict and, per parameter, the
``DTensor.full_tensor()`` that ``update_weights_from_tensor`` serializes for CUDA IPC (``verl_engine.py``).

How an in-process vLLM shows: vLLM >= 0.7 sleep mode allocates its weights and KV cache inside
``torch.cuda.memory.use_mem_pool(MemPool(pluggable allocator))`` and ``CuMemAllocator.sleep`` unmaps and releases
the physical memory but keeps the tensors and its ``pointer_to_data`` (vllm-project/vllm
``vllm/device_allocator/cumem.py`` @ ``9ac96588``): PyTorch's allocator still counts those blocks, so weights + KV
stay in ``memory_allocated`` through training (``in_process_cumem``). verl <= 0.4 with its vLLM 0.5.4 / 0.6.3 fork
(``verl/third_party/vllm/vllm_v_0_6_3``, removed in v0.5.0) frees the KV cache (``free_cache_engine``) and the
weights (``offload_model_weights``) through PyTorch (``vllm_rollout.py`` @ v0.3.0.post1), so the engine counts only
while awake (``in_process_freed``). The engine's forward activations are PyTorch allocations of that process in both.
An in-process vLLM resets the peak once, at its start-up (``determine_available_memory`` calls
``torch.cuda.reset_peak_memory_stats()`` before the profiling run, ``vllm/v1/worker/gpu_worker.py`` @ ``35d5cda1``;
``sleep`` and ``wake_up`` do not): what the actor's build held before the engine started is forgotten, every phase
after it counts.

The prediction (bytes, the metric's figure x 1024**3): allocated = the largest over the phases of the phase parts the
process allocates through PyTorch (:data:`OUTSIDE_TORCH` parts, the CUDA context, NCCL buffers and CUDA graphs, are
not; the engine's parts only in process), plus vLLM's CuMem pool (weights + KV) with ``in_process_cumem``. The
phases are the estimate's, all of them (each has run once before the first read). Reserved = allocated + the
caching allocator's reserve on the PyTorch allocations outside the CuMem pool, :data:`ALLOCATOR_RESERVE` (a
documented guess: the three public runs show 6-56 %), no more than the device leaves beside the pool.
cpu_memory_used = the estimate's host RAM per node (a floor: other processes and the OS count too).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from ..errors import MliteError
from ..options.rollout import DEFAULT_VERL_VERSION, ENGINE_PLACEMENTS, VERL_VERSIONS
from ..units import GIB

ALLOCATED = "perf/max_memory_allocated_gb"
"""verl's key: ``torch.cuda.max_memory_allocated()`` of the actor worker process, GiB."""
RESERVED = "perf/max_memory_reserved_gb"
"""verl's key: ``torch.cuda.max_memory_reserved()`` of that process, GiB."""
CPU_USED = "perf/cpu_memory_used_gb"
"""verl's key: ``psutil.virtual_memory().used`` of the node, GiB."""
METRICS = (ALLOCATED, RESERVED, CPU_USED)
"""The memory metrics verl logs, in its order."""

ENGINE_TORCH = ("engine_weights", "kv_cache", "engine_activations", "engine_share")
"""Engine parts allocated through PyTorch when its model runner lives in the actor's process (``engine_share``:
the claim of an engine that would not start)."""
CUMEM_POOL = ("engine_weights", "kv_cache")
"""The engine parts in vLLM's CuMem sleep pools (``tag="weights"`` / ``"kv_cache"``), counted asleep."""
OUTSIDE_TORCH = ("framework", "engine_overhead", "cuda_graphs", "engine_sleep_residue", "sibling_contexts")
"""Phase parts outside PyTorch's allocator statistics of the actor process (its CUDA context, NCCL / custom
all-reduce buffers, CUDA-graph pools held by the engine, a sleeping engine's measured flat residue, other
processes' CUDA contexts on the GPU): never in the two GPU metrics. Every other part of a phase is the actor
process's own PyTorch memory (the actor, the reference, the weight sync's buckets and gathered copies)."""
ALLOCATOR_RESERVE = 0.25
"""Reserved bytes over allocated ones on the PyTorch allocations outside the CuMem pool (fragmentation, cached
free blocks; documented guess)."""

_VERSION = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?([.+\-]?[A-Za-z0-9.+\-]*)$")


@dataclass(frozen=True, order=True)
class VerlRelease:
    """A verl release the kit knows, as the rules compare it."""

    major: int
    """Major version."""
    minor: int
    """Minor version."""
    patch: int
    """Patch (0 unless it matters: 0.7.0 / 0.7.1)."""
    text: str = ""
    """The canonical spelling (an entry of ``VERL_VERSIONS`` or ``main``)."""


def verl_release(version: str) -> VerlRelease:
    """The release ``version`` names (``0.7.1``, ``v0.4.1``, ``0.3.0.post1``, ``main``); an unknown one raises
    :class:`MliteError` naming the known ones."""
    known = ", ".join(VERL_VERSIONS)
    v = str(version).strip()
    if v == "main":
        return VerlRelease(0, 99, 0, "main")
    m = _VERSION.match(v)
    if m is None:
        raise MliteError(f"--verl-version {version!r}: not a verl version; the kit knows {known}")
    major, minor, patch = int(m[1]), int(m[2]), int(m[3] or 0)
    text = f"{major}.{minor}"
    if text == "0.7":
        if m[3] is None:
            raise MliteError("--verl-version 0.7: say 0.7.0 or 0.7.1 (v0.7.1 moved vLLM to its own processes)")
        text = f"0.7.{patch}"
        if patch > 1:
            text = "0.7.1"
    if text not in VERL_VERSIONS:
        raise MliteError(f"--verl-version {version!r}: unknown to the kit; it knows {known}")
    return VerlRelease(major, minor, patch if text.startswith("0.7.") else 0, text)


def placement_for(rollout, verl_version: str | None = None) -> str:
    """Where the engine of ``rollout`` (:class:`~mlite.memory.rl_options.RolloutOptions`) shows in the actor
    process: its ``engine_placement`` when given; ``separate`` for SGLang, for verl's colocated mode and for verl
    >= 0.7.1; ``in_process_freed`` for verl <= 0.4 with a vLLM release before 0.7 (``rollout.vllm_version``: verl's
    0.5.4 / 0.6.3 fork, ``verl/third_party/vllm``); else ``in_process_cumem`` (vLLM >= 0.7 sleep mode)."""
    if rollout.engine_placement is not None:
        return rollout.engine_placement
    rel = verl_release(verl_version or rollout.verl_version)
    if rollout.name == "sglang" or rollout.mode == "colocated" or rel >= VerlRelease(0, 7, 1):
        return "separate"
    if rel < VerlRelease(0, 5, 0) and _vllm_before_0_7(getattr(rollout, "vllm_version", None)):
        return "in_process_freed"
    return "in_process_cumem"


def _vllm_before_0_7(version) -> bool:
    """Whether ``version`` (``RolloutOptions.vllm_version``) names a vLLM release before 0.7 (a rule name or
    ``latest``: no)."""
    from .rl_vllm import parse_version

    try:
        return parse_version(str(version)) < (0, 7, 0)
    except MliteError:
        return False


@dataclass(frozen=True)
class MetricMeaning:
    """What one logged metric counts."""

    name: str
    """verl's metric key."""
    processes: str
    """``actor`` (the actor worker process), ``actor+engine`` (with the engine's model runner in it) or ``node``."""
    cumem_kept: bool
    """The engine's CuMem pool (weights + KV) counts through every phase, asleep or not."""
    phases: str
    """Which phases: ``all`` (the peak since the process started: every phase has run before the first read) or
    ``now`` (the value when read, inside the update)."""
    reset: bool
    """Whether verl resets the figure between steps."""
    ranks: str
    """How ranks are reduced: ``first`` (the first DP rank's), ``max`` or ``mean`` over ranks."""
    source: str
    """Where verl computes and reduces it (file @ tag / commit)."""
    key: str = ""
    """The key a log carries (``actor/`` + the name from v0.8; the name before)."""

    def covers(self) -> str:
        """One line: what the number is."""
        if self.processes == "node":
            what = "used host RAM of the whole node (every process; page cache excluded), read inside update_actor"
        else:
            where = {
                "actor": "the actor worker process only (the engine runs in its own processes)",
                "actor+engine": "the actor worker process with the engine's model runner in it"
                + (
                    " (vLLM's CuMem pool, weights + KV, counted even asleep)"
                    if self.cumem_kept
                    else " (counted while awake)"
                ),
            }[self.processes]
            what = f"peak since the process started over every phase, never reset, of {where}"
        rank = {"first": "the first DP rank's", "max": "max over ranks", "mean": "mean over ranks"}[self.ranks]
        return f"{what}; {rank}; GiB (bytes / 1024**3)"


def measured_as(verl_version: str, placement: str, engine: str = "vllm") -> dict[str, MetricMeaning]:
    """Metric name -> :class:`MetricMeaning` for a verl release, an engine placement (``ENGINE_PLACEMENTS``) and the
    engine (``vllm`` / ``sglang``); a placement the release or engine cannot have raises :class:`MliteError`."""
    rel = verl_release(verl_version)
    if placement not in ENGINE_PLACEMENTS:
        raise MliteError(f"engine placement {placement!r}: one of {', '.join(ENGINE_PLACEMENTS)}")
    if placement != "separate" and engine == "sglang":
        raise MliteError("SGLang runs its model in scheduler subprocesses: its placement is separate")
    if placement != "separate" and rel >= VerlRelease(0, 7, 1):
        raise MliteError(
            f"verl {rel.text} runs vLLM in its own processes (distributed_executor_backend mp, verl e9405d70, "
            "first in v0.7.1): its placement is separate"
        )
    if placement == "in_process_freed" and rel >= VerlRelease(0, 5, 0):
        raise MliteError(f"verl {rel.text} has no vLLM 0.5.4/0.6.3 fork (removed in v0.5.0): use in_process_cumem")
    engine_workers = rel >= VerlRelease(0, 8, 0)
    merged = VerlRelease(0, 6, 0) <= rel < VerlRelease(0, 8, 0)
    where = (
        "verl/workers/engine_workers.py TrainingWorker._postprocess_output"
        if rel >= VerlRelease(0, 8, 0)
        else "update_actor in verl/workers/fsdp_workers.py / megatron_workers.py"
    )
    if engine_workers:
        reduce = (
            "concat_tensordict keeps the first DP rank's metrics (verl/utils/tensordict_utils.py "
            "concat_tensordict_with_none_bsz @ v0.8.0), reduce_metrics the max over its mini-batches; "
            "_update_actor renames them actor/... (verl/trainer/ppo/ray_trainer.py)"
        )
    elif merged:
        reduce = (
            "DataProto.concat merges every worker's metrics (verl/protocol.py, eb06fda2) and reduce_metrics "
            "(verl/utils/metric/utils.py)"
        )
    else:
        reduce = "DataProto.concat keeps data[0].meta_info (verl/protocol.py @ v0.5.0)"
    prefix = "actor/" if engine_workers else ""
    src = f"{where} @ {rel.text}; {reduce}"
    procs = "actor" if placement == "separate" else "actor+engine"
    gpu = MetricMeaning(
        name=ALLOCATED,
        processes=procs,
        cumem_kept=placement == "in_process_cumem",
        phases="all",
        reset=False,
        ranks="max" if merged else "first",
        source=src,
        key=prefix + ALLOCATED,
    )
    return {
        ALLOCATED: gpu,
        RESERVED: replace(gpu, name=RESERVED, key=prefix + RESERVED),
        CPU_USED: MetricMeaning(
            name=CPU_USED,
            processes="node",
            cumem_kept=False,
            phases="now",
            reset=True,
            ranks="mean" if merged else "first",
            source=src,
            key=prefix + CPU_USED,
        ),
    }


def torch_bytes(parts: dict, placement: str) -> float:
    """Bytes the actor process's PyTorch allocator holds in one phase of GPU ``parts`` (part -> bytes), outside
    vLLM's CuMem pool: its own parts, and the engine's in process (all of them freed through PyTorch with
    ``in_process_freed``; only its activations beside the pool with ``in_process_cumem``)."""
    own = sum(v for k, v in parts.items() if k not in OUTSIDE_TORCH and k not in ENGINE_TORCH)
    if placement == "separate":
        return own
    keys = ENGINE_TORCH if placement == "in_process_freed" else ("engine_activations", "engine_share")
    return own + sum(v for k, v in parts.items() if k in keys)


def peak_allocated(phases: list[dict], placement: str, pool: float = 0.0) -> float:
    """``max_memory_allocated`` after the phases (each a dict of GPU parts), never reset: the largest phase's
    :func:`torch_bytes`, plus the CuMem ``pool`` (weights + KV) with ``in_process_cumem``."""
    return max(torch_bytes(p, placement) for p in phases) + (pool if placement == "in_process_cumem" else 0.0)


def predicted_metrics(
    estimate, verl_version: str | None = None, placement: str | None = None, logged_step: int | None = None
) -> dict[str, int]:
    """Metric name -> the bytes the kit predicts the log shows (the metric x 1024**3) for ``estimate``
    (:class:`~mlite.memory.rl.RLEstimate`) under ``verl_version`` and ``placement`` (default: the estimate's rollout
    options, :func:`placement_for`), on the log line of step ``logged_step``: the peak over the phases as they have
    run up to that step's update (:meth:`~mlite.memory.rl.RLEstimate.phases_at`, :mod:`mlite.memory.rl_lazy`; at
    step 1 no owner's optimizer moments exist before its first update). None: the steady state (every phase with
    its whole state), a planner's worst case; a log line of step >= 2 shows the same."""
    r = estimate.rollout
    version = verl_version or r.verl_version
    placement = placement or placement_for(r, version)
    measured_as(version, placement, r.name)  # refuses what the release cannot have
    pool = 0.0
    if placement == "in_process_cumem" and estimate.engine.kv > 0:
        pool = estimate.engine.weights + estimate.engine.kv
    phases = estimate.phases_at(logged_step)
    allocated = peak_allocated([p.gpu for p in phases.values()], placement, pool)
    peak = allocated - pool
    device = estimate.training.gpu_memory_gib * GIB
    reserved = min(peak * (1 + ALLOCATOR_RESERVE), max(peak, device - pool)) + pool
    return {
        ALLOCATED: round(allocated),
        RESERVED: round(reserved),
        CPU_USED: round(estimate.host_per_node),
    }


def assumed(estimate, verl_version: str | None = None, placement: str | None = None) -> dict:
    """The ``predicted_metrics_assumed`` document: the release, the placement and what each metric covers."""
    r = estimate.rollout
    version = verl_version or r.verl_version
    placement = placement or placement_for(r, version)
    meaning = measured_as(version, placement, r.name)
    return {
        "verl_version": verl_release(version).text,
        "placement": placement,
        "placement_source": "--engine-placement"
        if r.engine_placement
        else "derived from the verl version, engine and mode",
        "covers": {k: m.covers() for k, m in meaning.items()},
        "logged_keys": {k: m.key for k, m in meaning.items()},
        "allocator_reserve": ALLOCATOR_RESERVE,
        "log_shows": ALLOCATED,
    }


__all__ = [
    "ALLOCATED",
    "ALLOCATOR_RESERVE",
    "CPU_USED",
    "DEFAULT_VERL_VERSION",
    "METRICS",
    "RESERVED",
    "MetricMeaning",
    "VerlRelease",
    "assumed",
    "measured_as",
    "peak_allocated",
    "placement_for",
    "predicted_metrics",
    "torch_bytes",
    "verl_release",
]
