"""The weight resync (``weight_sync`` phase): the actor's export peak on one GPU and the host RAM of the sync.

Export peak. Before a parameter is handed to the checkpoint engine the actor gathers it to its full shape: verl's
Megatron exporter (``per_tensor_generator`` in ``verl/utils/megatron_utils.py`` @ 1811bfeb) all-gathers a
tensor-parallel parameter over TP into a list of shards and ``torch.cat``-s them (``default_tp_concat_fn``), so
the list and the concatenated tensor are both alive at the ``cat``: two full copies (``resync_gather_copies``,
default 2); a parameter the rank holds whole (TP 1, replicated norms and routers) is yielded as it is. Expert
weights are gathered over EP: Megatron Lite's dense export gathers all experts of a layer's weight at once (the
"dense EP all-gather" of ISEEKYAN/Megatron-LM ``docs/research/ds4_vllm_tp16_rollout_memory.md`` @ 017aa887,
``worst_tensor_peak_gib`` of ``docs/ds4-resync-memory-protocol.md`` @ 03d1e972: the single-tensor lower bound of
the resync), verl's per-expert exporter gathers one local expert over EP (EP experts at once,
``resync_expert_gather=per_expert``). An FSDP actor (``optimizer=fsdp2``) ``full_tensor()``-s every parameter
over its DP shards, in the parameter dtype: one all-gather output, one copy (the DTensor API; verl's FSDP engine's
cast to the rollout dtype after it is not modelled). The peak is the largest such tensor of the model's own tensors
(:class:`mlite.models.spec.ParamGroup`; experts: one group per layer and weight, all experts) on this mesh.

Staging. The checkpoint engine copies the exported tensors into buckets of ``update_weights_bucket_megabytes``
(verl ``verl/trainer/config/_generated_ppo_megatron_trainer.yaml`` @ 1dda039b9: ``checkpoint_engine.backend:
naive``, ``update_weights_bucket_megabytes: 2048``): ``naive`` (colocated, CUDA IPC) one bucket (a small model
fills less than one); ``nccl`` two ("we use two buffer to send and recv weights at same time, so the device memory
overhead is 2 * bucket_size", ``NCCLCheckpointEngine`` in ``verl/checkpoint_engine/nccl_checkpoint_engine.py`` @
b13a546a), allocated whole; the delta backends extend it ("sender peak memory stays ~2 buckets",
``docs/advance/delta_weight_sync.md`` @ fb5624af); the other backends are taken as two buckets too (not read).

Host RAM (the same documents): ``delta_sharded`` pins a CPU snapshot of each actor rank's own shard (bf16, 2 B per
parameter of the shard), ``delta`` a full-model snapshot on rank 0 (the worst rank); both need SGLang ("Selecting a
delta backend with any other rollout engine raises NotImplementedError") and ``delta_sharded`` an FSDP actor
(``Shard(0)`` DTensor parameters; Megatron is on the roadmap). ``trainer.v1.trainer_mode=separate_async``
(``docs/advance/v1_async_trainer.md`` @ b89c3b34) copies pi_old to CPU once per cycle and, before each later
mini-batch, the current weights too (restored and cleared after the old-log-prob forward): the actor's weights
on the host through the step, twice during ``old_log_prob``; it needs a non-``naive`` backend.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..units import GIB, MIB
from .optimizer import state_bytes
from .rl_options import RolloutOptions

DOUBLE_BUFFERED = ("nccl", "hccl", "nixl", "kimi_ckpt_engine", "mooncake", "delta", "delta_sharded")
"""Backends that stage two buckets (send + receive buffers) on the sender's GPU."""


@dataclass(frozen=True)
class ExportPeak:
    """What the actor's export adds on one GPU at the weight resync."""

    tensor: str
    """The largest gathered tensor (layer-relative checkpoint name)."""
    gather: str
    """How it is gathered: ``tp``, ``ep`` (experts over EP / expert TP), ``fsdp``, ``largest`` (the model's largest
    tensor whatever the mesh) or ``none`` (nothing is gathered)."""
    full_bytes: float
    """One full copy of it (bytes)."""
    copies: int
    """Full copies alive at once while it is gathered."""
    bucket_bytes: float
    """One staging bucket (bytes)."""
    buckets: int
    """Staging buckets on the GPU."""

    @property
    def gathered(self) -> float:
        """The gathered tensor (one copy; 0 when nothing is gathered)."""
        return 0.0 if self.gather == "none" else self.full_bytes

    @property
    def extra_copies(self) -> float:
        """The further copies alive at the gather (list of shards + concatenated tensor)."""
        return self.gathered * max(0, self.copies - 1)

    @property
    def staging(self) -> float:
        return self.bucket_bytes * self.buckets

    @property
    def peak(self) -> float:
        """Export peak beyond the actor's own weights: gathered copies plus the staging buckets."""
        return self.gathered + self.extra_copies + self.staging

    def to_dict(self) -> dict:
        return {
            "tensor": self.tensor,
            "gather": self.gather,
            "tensor_bytes": round(self.gathered),
            "copies": self.copies,
            "buckets": self.buckets,
            "bucket_bytes": round(self.bucket_bytes),
            "export_peak": round(self.peak),
        }


def _groups(spec):
    return [*spec.pre, *spec.post, *(g for layer in spec.main_layers for g in layer.groups)]


def _experts(spec) -> int:
    c = spec.config
    return int(c.get("n_routed_experts") or c.get("num_experts") or c.get("num_local_experts") or 1)


def gathered_bytes(group, spec, plan, o, r: RolloutOptions) -> tuple[float, str]:
    """(bytes of one full gathered copy, how) of one :class:`~mlite.models.spec.ParamGroup` on ``plan``."""
    p = plan.parallel
    etp = p.etp if p.etp is not None else p.tp
    if o.optimizer == "fsdp2" and plan.dp > 1:
        return group.numel * state_bytes(o).param, "fsdp"
    if group.parallel == "expert":
        if p.ep <= 1 and etp <= 1:
            return 0.0, "none"
        if r.resync_expert_gather == "per_expert":
            return group.numel / _experts(spec) * p.ep * 2, "ep"
        return group.numel * 2.0, "ep"
    if group.parallel in ("tp", "vocab") and p.tp > 1:
        return group.numel * 2.0, "tp"
    return 0.0, "none"


def export_peak(spec, plan, o, r: RolloutOptions) -> ExportPeak:
    """The export peak of ``spec`` on the actor mesh ``plan`` with the rollout options' backend and bucket."""
    bucket = r.update_weights_bucket_megabytes * MIB
    if r.checkpoint_backend in DOUBLE_BUFFERED:
        buckets = 2
    else:  # naive: one bucket, no larger than the model
        buckets, bucket = 1, min(bucket, spec.total * 2)
    if r.resync_gather == "largest":  # the kit before the mesh rule: the model's largest tensor, whatever the mesh
        g = max(_groups(spec), key=lambda x: x.numel)
        return ExportPeak(
            tensor=g.name, gather="largest", full_bytes=g.numel * 2.0, copies=r.resync_gather_copies,
            bucket_bytes=bucket, buckets=buckets,
        )  # fmt: skip
    best, how, name = 0.0, "none", ""
    for g in _groups(spec):
        b, kind = gathered_bytes(g, spec, plan, o, r)
        if b > best:
            best, how, name = b, kind, g.name
    copies = 1 if how == "fsdp" else r.resync_gather_copies  # full_tensor(): one all-gather output
    return ExportPeak(
        tensor=name, gather=how, full_bytes=best, copies=copies, bucket_bytes=bucket, buckets=buckets,
    )  # fmt: skip


def sync_host(spec, actor_params: float, o, r: RolloutOptions) -> tuple[dict, dict]:
    """(host bytes every phase holds, extra host bytes by phase name) of the sync backend and trainer mode, on
    the worst actor rank; ``actor_params``: the actor's weight bytes on one GPU."""
    every, by_phase = {}, {}
    shard_params = actor_params / state_bytes(o).param
    if r.checkpoint_backend == "delta_sharded":
        every["delta_snapshot"] = shard_params * 2
    elif r.checkpoint_backend == "delta":
        every["delta_snapshot"] = spec.total * 2.0  # rank 0's full-model snapshot
    if r.trainer_mode == "separate_async":
        every["pi_old_cpu"] = actor_params
        by_phase["old_log_prob"] = {"current_weights_cpu": actor_params}
    return every, by_phase


def sync_refusals(o, r: RolloutOptions) -> list[str]:
    """What verl refuses about the sync backend and trainer mode (each names its source)."""
    out = []
    if r.checkpoint_backend in ("delta", "delta_sharded") and r.name != "sglang":
        out.append(
            f"checkpoint_engine.backend={r.checkpoint_backend} needs an SGLang rollout: verl raises "
            "NotImplementedError at worker start-up with any other engine (verl docs/advance/delta_weight_sync.md "
            "@ fb5624af); use --rollout sglang or another backend"
        )
    if r.checkpoint_backend == "delta_sharded" and o.optimizer != "fsdp2":
        out.append(
            "checkpoint_engine.backend=delta_sharded needs an FSDP actor (Shard(0) DTensor parameters; Megatron "
            "sharded delta is on verl's roadmap, docs/advance/delta_weight_sync.md @ fb5624af); use --optimizer "
            "fsdp2 or backend delta"
        )
    if r.trainer_mode == "separate_async" and r.checkpoint_backend == "naive":
        out.append(
            "trainer.v1.trainer_mode=separate_async requires a non-naive checkpoint_engine.backend such as nccl "
            "(verl docs/advance/v1_async_trainer.md @ b89c3b34); give --checkpoint-backend nccl"
        )
    return out


def resync_verdict(total: float, usable: float, peak: ExportPeak) -> str | None:
    """The message when the ``weight_sync`` phase does not fit: by how much, and the export peak's part."""
    if total <= usable:
        return None
    short = total - usable
    what = f"{peak.tensor} gathered over {peak.gather}" if peak.gathered else "no tensor gathered"
    return (
        f"the weight resync runs out of memory by {short / MIB:,.0f} MiB ({total / GIB:.2f} GiB needed, "
        f"{usable / GIB:.2f} GiB usable): export peak {peak.peak / GIB:.2f} GiB ({what}, {peak.copies} "
        f"cop{'y' if peak.copies == 1 else 'ies'}, {peak.buckets} bucket{'s' if peak.buckets > 1 else ''} of "
        f"{peak.bucket_bytes / MIB:,.0f} MiB); lower update_weights_bucket_megabytes, offload the actor "
        "(param_offload) or export experts per expert"
    )


__all__ = ["DOUBLE_BUFFERED", "ExportPeak", "export_peak", "gathered_bytes", "resync_verdict", "sync_host"]
