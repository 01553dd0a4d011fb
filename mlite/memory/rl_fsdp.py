"""verl's FSDP / FSDP2 actor and reference (``actor_rollout_ref.actor.strategy=fsdp|fsdp2``): the bytes on one GPU
and in its process's host RAM, as :class:`~mlite.memory.estimate.RankMemory` so that the RL phases
(:mod:`mlite.memory.rl_phases`) read the FSDP actor exactly as they read the Megatron one.

Sources (verl-project/verl; v0.7.0 = commit f9c855f7cf04d603c9546bc01776c74806a879c1, the last tag with the legacy
workers; main = 1dda039b9c6311889a9c9a26040677e1254814f9, 2026-08-22, whose FSDP engine is
``verl/workers/engine/fsdp/transformer_impl.py``):

- Mesh: ``create_device_mesh(world_size, fsdp_size)`` (``verl/workers/fsdp_workers.py`` @ v0.7.0): ``fsdp_size``
  < 0 or >= world shards over all GPUs, else an HSDP mesh ``(world // fsdp_size, fsdp_size)`` that shards over
  ``fsdp_size`` and replicates across. The state of one GPU is the full model / F, F the FSDP group.
- Dtypes: the actor is built in ``fsdp_config.model_dtype`` (``fp32`` in ``_generated_ppo_trainer.yaml``; None:
  fp32 to train, bf16 forward-only: ``_build_model_optimizer`` @ v0.7.0, ``transformer_impl.py`` @ main), so the
  sharded parameters, their gradients and AdamW's two moments (``torch.optim.AdamW``: states like the parameter)
  are 4 bytes each: 16 bytes per parameter / F, no separate master copy. ``mixed_precision`` (``param_dtype`` bf16,
  ``reduce_dtype`` fp32, ``buffer_dtype`` fp32 by default) makes the all-gathered unit bf16 and the reduce-scatter
  fp32.
- Units: ``apply_fsdp2`` (``verl/utils/fsdp_utils.py`` @ v0.7.0) wraps every decoder layer
  (``_no_split_modules``) and an untied embedding, then the root; FSDP1's auto-wrap policy wraps the layers. The
  root is not resharded after forward (both FSDP versions), so the root's parameters (FSDP2: final norm and untied
  lm_head, plus a tied embedding; FSDP1: everything outside the layers) stay gathered in bf16 from the forward to
  the end of the backward. One layer is gathered at a time plus the prefetched next one (FSDP1's default
  ``BACKWARD_PRE``, FSDP2's implicit prefetch): 2 x the largest layer in bf16; its backward adds the layer's bf16
  gradient and its fp32 copy for the reduce-scatter (``reduce_dtype``): 6 bytes x the largest layer.
- Offload: ``param_offload`` moves the parameter shards and (main: ``self.to(..., grad=self._is_offload_param)``)
  the gradient shards to host RAM outside the actor's own calls, ``optimizer_offload`` the AdamW moments
  (``offload_fsdp_model_to_cpu``, ``offload_fsdp_optimizer`` in ``verl/utils/fsdp_utils.py``); FSDP2's
  ``offload_policy=True`` (``CPUOffloadPolicy(pin_memory=True)``) keeps all three on the host always and turns the
  two flags off. The gradients exist only inside the update: ``update_policy`` ends with ``zero_grad()``
  (``set_to_none=True``; ``verl/workers/actor/dp_actor.py`` line 555 @ v0.7.0), so the idle state and the host's
  offloaded state hold none (:data:`mlite.memory.rl_lazy.FSDP_GRADS_BETWEEN_UPDATES`); the AdamW moments appear at
  the first ``step()`` (:mod:`mlite.memory.rl_lazy`).
- The reference is forward-only and verl forces its CPU offload: ``CPUOffload(offload_params=True)`` (FSDP1) or
  ``CPUOffloadPolicy(pin_memory=True)`` (FSDP2) ("We force reference policy to use CPUOffload to save memory",
  ``_build_model_optimizer`` @ v0.7.0, ``_build_fsdp_module`` @ main). Its shards (``ref.fsdp_config.model_dtype``,
  fp32 by default) live in host RAM; the GPU holds the gathered root and units in bf16 during its forward.
- Micro-batches (``dp_actor.py`` @ v0.7.0): with ``use_dynamic_bsz`` the sequences are packed into micro-batches
  of at most ``ppo_max_token_len_per_gpu`` x SP tokens (``prepare_dynamic_batch``; ``log_prob_max_token_len_per_gpu``
  for ``compute_log_prob``), else ``ppo_micro_batch_size_per_gpu`` (``log_prob_micro_batch_size_per_gpu``) rows of
  P + R tokens. ``use_remove_padding`` unpads them (``unpad_input``): the bound is the same at full length, the
  padded path always computes all ``batch x (P + R)`` positions. Ulysses SP (``ulysses_sequence_parallel_size``)
  slices each micro-batch's tokens over its SP ranks (``ulysses_pad_and_slice_inputs``).
- Activations: the decoder layers' saved tensors come from :func:`mlite.memory.activations.layer_bytes` (reused:
  Megatron-Core's local-spec GQA / MLP / MoE formulas at TP 1, flash attention, no dropout, one row of T tokens), an
  approximation of what HF's layers keep; ``enable_gradient_checkpointing`` (HF's per-layer checkpoint) keeps each
  layer's input (``recompute="full"`` there) and rebuilds one layer in the backward
  (:func:`~mlite.memory.activations.layer_bytes_no_recompute`).
- Log-prob and entropy (``_forward_micro_batch``, ``verl/utils/torch_functional.py`` @ v0.7.0): the model returns
  bf16 logits ``[T, V]`` (T the micro-batch's local tokens), divided in place by the temperature;
  ``logprobs_from_logits`` uses flash-attn's Triton cross-entropy (``inplace_backward=True``: its gradient is
  written into the logits' storage), so the log-prob adds no ``[T, V]`` tensor. ``entropy_from_logits`` (softmax,
  logsumexp, ``pd * logits``) run eagerly under the bf16 autocast holds :data:`EAGER_ENTROPY_COPIES` bf16 ``[T, V]``
  copies at once (fp32 ``softmax``; ``logsumexp``'s fp32 input and temporary). Unpadded, verl compiles it by default
  (``use_torch_compile``: ``self.compute_entropy_from_logits = torch.compile(entropy_from_logits)``), which fuses
  them away (counted 0), and ``entropy_from_logits_with_chunking`` works on fp32 chunks of
  ``entropy_from_logits_chunk_size`` rows (four fp32 ``[chunk, V]``). Padded (``use_remove_padding=False``), the
  branch calls ``verl_F.entropy_from_logits(logits)`` itself over the response view, not
  ``self.compute_entropy_from_logits``: eager whatever ``use_torch_compile`` and the chunking flag say
  (``dp_actor.py`` ``_forward_micro_batch`` @ v0.3.0.post1 070ed6ac line 157, v0.4.1 8d9e350e line 268, v0.5.0
  8fdc4d3f line 266, v0.6.0 ddd86f52 line 269, v0.7.0 f9c855f7 line 303). With gradients the eager entropy keeps
  its fp32 ``softmax`` output and ``logsumexp``'s fp32 input for the backward unless ``entropy_checkpointing``; the
  logits gradient is one bf16 ``[T, V]`` when the entropy term adds to the cross-entropy's in-place one. ``use_fused_kernels`` computes
  log-prob and entropy from the hidden states in chunks: no ``[T, V]`` tensor. old_log_prob computes the entropy
  (``compute_log_prob(calculate_entropy=not is_lora)``), the reference does not, the update does when
  ``entropy_coeff != 0`` (or ``calculate_entropy``).
- verl >= 0.8 (:func:`engine_worker`): the FSDP actor is the engine worker (``ActorRolloutRefWorker`` of
  ``verl/workers/engine_workers.py`` over ``FSDPEngineWithLMHead``, ``verl/workers/engine/fsdp/transformer_impl.py``
  @ 859c7129, the last 0.9.0.dev commit; the legacy workers left at v0.8.0: #5604 ``63e8a0d1``, #6067 ``044bbba2``).
  ``forward_step`` keeps the model output (``raw_output``, bf16 ``[T, V]`` logits under ``torch.autocast(bf16)``)
  until it returns, and ``prepare_model_outputs`` divides by the temperature out of place: a second bf16 ``[T, V]``
  (both paths). Padded (``use_remove_padding=False``): the entropy is ``verl_F.entropy_from_logits`` called eagerly
  over the full ``[B, S, V]`` (neither ``use_torch_compile`` nor the chunking apply to that branch); under autocast
  ``softmax`` returns fp32 (``pd``, 2 x bf16 bytes) and ``logsumexp`` (autocast's fp32 list) runs on an fp32 cast
  of the logits and makes one fp32 ``(x - max).exp_()`` temporary (``logsumexp_out_impl``, ATen
  ``ReduceOps.cpp``): 8 bf16 ``[T, V]`` copies at once inside ``logsumexp``. The log-prob reads
  ``torch.cat`` of the valid positions (a bf16 copy the in-place cross-entropy keeps); its backward makes the dense
  gradient of the divided logits and the division's own (two bf16 ``[T, V]``). The update computes the entropy only
  with ``calculate_entropy`` or ``entropy_coeff != 0`` (``_update_actor``, ``verl/trainer/ppo/ray_trainer.py``),
  old_log_prob always (``_compute_old_log_prob``: ``calculate_entropy=True``), the reference never. The padded
  tensor is ``B x`` the micro-batch's longest row; the kit sizes it as the micro-batch's token budget (no lengths).
- The optimizer step: torch AdamW's foreach temporaries (``sqrt(exp_avg_sq)``, 4 bytes per sharded parameter:
  :attr:`mlite.options.optimizers.Algorithm.step_bytes`, the same rule the Megatron estimate uses).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ..errors import MliteError
from ..options import TrainingOptions
from ..options.rollout import DEFAULT_VERL_VERSION
from .activations import ActDims, layer_bytes, layer_bytes_no_recompute
from .estimate import GIB, RankMemory
from .rl_lazy import FSDP_GRADS_BETWEEN_UPDATES

STRATEGIES = ("megatron", "fsdp", "fsdp2")
"""``actor_rollout_ref.actor.strategy`` values the kit models (verl's ``ppo_trainer`` default is ``fsdp``)."""
FSDP_STRATEGIES = ("fsdp", "fsdp2")
"""The strategies :mod:`mlite.memory.rl_fsdp` models."""
DTYPE_BYTES = {"fp32": 4, "float32": 4, "bf16": 2, "bfloat16": 2, "fp16": 2, "float16": 2}
"""``fsdp_config.model_dtype`` spellings (verl's ``PrecisionType``) -> bytes per element."""
CE_STATS_BYTES = 8
"""flash-attn's cross-entropy per token: fp32 loss and fp32 log-sum-exp (``cross_entropy_loss``)."""
EAGER_ENTROPY_COPIES = 6
"""bf16 ``[T, V]`` copies the eager ``verl_F.entropy_from_logits`` holds at once under verl's bf16 autocast: the fp32
``softmax`` (2), and inside ``logsumexp`` its fp32 input and fp32 temporary (2 + 2); ``softmax`` and ``logsumexp``
are on autocast's fp32 list (``KERNEL_CUDA(softmax, fp32)``, ``KERNEL_CUDA(logsumexp, fp32)`` in pytorch
``aten/src/ATen/autocast_mode.cpp``; ``_forward_micro_batch`` runs under ``torch.autocast`` at every legacy
release, ``prepare_model_outputs`` under the engine's)."""


@dataclass(kw_only=True)
class FsdpOptions:
    """verl's FSDP actor and reference (verl names; defaults those of ``_generated_ppo_trainer.yaml`` @ main)."""

    strategy: str = "megatron"
    """``actor_rollout_ref.actor.strategy``: ``megatron`` (the Megatron estimate), ``fsdp`` or ``fsdp2``."""
    use_remove_padding: bool = True
    """``actor_rollout_ref.model.use_remove_padding``: unpadded tokens (False: every row padded to P + R)."""
    use_dynamic_bsz: bool = False
    """``actor_rollout_ref.actor.use_dynamic_bsz``: micro-batches packed by tokens, not rows."""
    ppo_max_token_len_per_gpu: int = 16384
    """``actor.ppo_max_token_len_per_gpu``: tokens of one update micro-batch with dynamic batch size."""
    log_prob_max_token_len_per_gpu: int | None = None
    """``rollout.log_prob_max_token_len_per_gpu``: old_log_prob's tokens (None: ``ppo_max_token_len_per_gpu``)."""
    ref_log_prob_max_token_len_per_gpu: int | None = None
    """``ref.log_prob_max_token_len_per_gpu``: the reference's tokens (None: ``ppo_max_token_len_per_gpu``)."""
    ppo_micro_batch_size_per_gpu: int | None = None
    """``actor.ppo_micro_batch_size_per_gpu``: rows of one update micro-batch (None: ``--micro-batch``)."""
    log_prob_micro_batch_size_per_gpu: int | None = None
    """``rollout.log_prob_micro_batch_size_per_gpu``: old_log_prob's rows (None: the update's)."""
    ref_log_prob_micro_batch_size_per_gpu: int | None = None
    """``ref.log_prob_micro_batch_size_per_gpu``: the reference's rows (None: the update's)."""
    enable_gradient_checkpointing: bool = True
    """``actor_rollout_ref.model.enable_gradient_checkpointing``: keep only each layer's input."""
    param_offload: bool = False
    """``actor.fsdp_config.param_offload``: parameter and gradient shards on the host outside the actor's calls."""
    optimizer_offload: bool = False
    """``actor.fsdp_config.optimizer_offload``: AdamW moments on the host outside the update."""
    offload_policy: bool = False
    """``actor.fsdp_config.offload_policy`` (FSDP2 ``CPUOffloadPolicy``): params, grads, moments always on the host."""
    fsdp_size: int = -1
    """``actor.fsdp_config.fsdp_size``: GPUs one shard group spans (-1: all; else HSDP over world / fsdp_size)."""
    ulysses_sequence_parallel_size: int = 1
    """``actor.ulysses_sequence_parallel_size``: GPUs that split one micro-batch's tokens (DeepSpeed-Ulysses)."""
    model_dtype: str = "fp32"
    """``actor.fsdp_config.model_dtype``: dtype of the sharded parameters, gradients and AdamW moments."""
    ref_model_dtype: str = "fp32"
    """``ref.fsdp_config.model_dtype``: dtype of the reference's host shards."""
    use_fused_kernels: bool = False
    """``actor_rollout_ref.model.use_fused_kernels``: log-prob and entropy without ``[T, V]`` logits."""
    use_torch_compile: bool = True
    """``actor.use_torch_compile``: the entropy is a compiled, fused kernel (no ``[T, V]`` temporaries)."""
    entropy_from_logits_with_chunking: bool = False
    """``actor.entropy_from_logits_with_chunking``: the entropy over fp32 chunks of rows."""
    entropy_from_logits_chunk_size: int = 2048
    """``actor.entropy_from_logits_chunk_size``: rows of one chunk."""
    entropy_checkpointing: bool = False
    """``actor.entropy_checkpointing``: the entropy recomputed in the backward (nothing kept)."""
    entropy_coeff: float = 0.0
    """``actor.entropy_coeff``: the update computes the entropy when it is not 0."""

    def __post_init__(self):
        self.validate()

    def validate(self) -> None:
        """Raise :class:`MliteError` naming the first bad field."""
        if self.strategy not in STRATEGIES:
            raise MliteError(
                f"actor_rollout_ref.actor.strategy must be one of {', '.join(STRATEGIES)}, got {self.strategy!r}"
            )
        for f in ("ppo_max_token_len_per_gpu", "ulysses_sequence_parallel_size", "entropy_from_logits_chunk_size"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise MliteError(f"{f} must be a positive integer, got {v!r}")
        for f in (
            "log_prob_max_token_len_per_gpu",
            "ref_log_prob_max_token_len_per_gpu",
            "ppo_micro_batch_size_per_gpu",
            "log_prob_micro_batch_size_per_gpu",
            "ref_log_prob_micro_batch_size_per_gpu",
        ):
            v = getattr(self, f)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise MliteError(f"{f} must be a positive integer or unset, got {v!r}")
        if isinstance(self.fsdp_size, bool) or not isinstance(self.fsdp_size, int) or self.fsdp_size == 0:
            raise MliteError(f"fsdp_size must be -1 (all GPUs) or a positive integer, got {self.fsdp_size!r}")
        for f in ("model_dtype", "ref_model_dtype"):
            if getattr(self, f) not in DTYPE_BYTES:
                raise MliteError(f"{f} must be one of {', '.join(DTYPE_BYTES)}, got {getattr(self, f)!r}")
        if self.offload_policy and self.strategy == "fsdp":
            raise MliteError(
                "fsdp_config.offload_policy=True is FSDP2's CPUOffloadPolicy: set actor.strategy=fsdp2 "
                "(verl/workers/fsdp_workers.py @ v0.7.0 reads it only in the fsdp2 branch)"
            )

    @property
    def is_fsdp(self) -> bool:
        return self.strategy in FSDP_STRATEGIES

    def to_dict(self) -> dict:
        return asdict(self)


def fsdp_group(f: FsdpOptions, world: int) -> int:
    """GPUs one parameter is sharded over (``create_device_mesh``): all of them unless 0 < fsdp_size < world."""
    if f.fsdp_size < 0 or f.fsdp_size >= world:
        return world
    if world % f.fsdp_size:
        raise MliteError(
            f"fsdp_config.fsdp_size {f.fsdp_size} must divide the {world} GPUs (verl's HSDP mesh is "
            f"(world // fsdp_size, fsdp_size): create_device_mesh in verl/workers/fsdp_workers.py @ v0.7.0)"
        )
    return f.fsdp_size


def check_fsdp(spec, world: int, f: FsdpOptions) -> None:
    """The mesh verl's FSDP workers accept: SP divides the world and the attention heads (Ulysses all-to-all splits
    heads: ``verl/models/transformers/monkey_patch.py`` asserts ``num_attention_heads % ulysses_sp_size == 0``)."""
    sp = f.ulysses_sequence_parallel_size
    if world % sp:
        raise MliteError(
            f"ulysses_sequence_parallel_size {sp} must divide the {world} GPUs (verl's device mesh is (dp, sp))"
        )
    if spec.num_attention_heads % sp:
        raise MliteError(
            f"ulysses_sequence_parallel_size {sp} must divide the {spec.num_attention_heads} attention heads of "
            f"{spec.name} (Ulysses splits the heads; verl/models/transformers/monkey_patch.py)"
        )
    fsdp_group(f, world)


def _layer_params(spec) -> list[int]:
    return [layer.params for layer in spec.main_layers]


def trained_params(spec) -> int:
    """Parameters the HF model holds (embedding, the main decoder layers, final norm, untied lm_head; no MTP)."""
    return sum(g.numel for g in (*spec.pre, *spec.post) if not g.checkpoint_only) + sum(_layer_params(spec))


def root_params(spec, f: FsdpOptions) -> int:
    """Parameters of the root unit, gathered from the forward to the end of the backward: everything outside the
    decoder layers under FSDP1, all but an untied embedding under FSDP2 (``apply_fsdp2``)."""
    outside = [g for g in (*spec.pre, *spec.post) if not g.checkpoint_only]
    if f.strategy == "fsdp2" and not spec.tie_word_embeddings:
        outside = [g for g in outside if "embed" not in g.name]
    return sum(g.numel for g in outside)


def micro_tokens(f: FsdpOptions, seq_tokens: int, rows: int, max_tokens: int | None) -> int:
    """Tokens of one micro-batch on one GPU: ``max_tokens`` with dynamic batch size (packed, at least one sequence:
    verl asserts ``max_token_len >= max_seq_len``), else ``rows`` x (P + R); divided by the Ulysses SP size."""
    sp = f.ulysses_sequence_parallel_size
    if f.use_dynamic_bsz:
        tokens = max(max_tokens or f.ppo_max_token_len_per_gpu, seq_tokens // sp)
        return tokens  # verl packs max_token_len x SP and slices them over SP
    return -(-rows * seq_tokens // sp)


def _dims(tokens: int, recompute: str) -> ActDims:
    return ActDims(tokens, 1, 1, 1, False, True, False, recompute, frozenset())


ENGINE_WORKER_FROM = "0.8"
"""The first verl release whose FSDP actor is the engine worker (``verl/workers/engine_workers.py``)."""


def engine_worker(verl_version: str) -> bool:
    """Whether verl ``verl_version`` runs the FSDP actor through the engine worker (>= 0.8, see the module
    docstring) rather than ``dp_actor.py`` (v0.7.x and before)."""
    from .rl_metrics import verl_release

    return verl_release(verl_version) >= verl_release(ENGINE_WORKER_FROM)


def _engine_padded_parts(spec, tokens: int, *, entropy: bool, grad: bool) -> tuple[dict, dict]:
    """(kept, transient) bytes of the engine worker's padded path (``prepare_model_outputs``, not rmpad) over
    ``tokens`` positions, in bf16 ``[T, V]`` copies ``b``: the model's logits and the divided copy (b each), the
    eager fp32 entropy (``pd`` 2b; inside ``logsumexp`` its fp32 input 2b and temporary 2b), the valid-position
    ``torch.cat`` copy (b); with gradients the backward's dense gradient and the division's (2b), and the entropy's
    saved ``pd`` and fp32 ``logsumexp`` input (the tensors ``softmax`` and ``logsumexp`` save) with two fp32
    gradients of its branches."""
    b = tokens * spec.vocab_size * 2
    stats = {"log_prob_stats": tokens * CE_STATS_BYTES}
    if not grad:  # forward_step's raw_output and the divided copy, then entropy or the valid copy
        kept = {"logits": b, "logits_divided": b, **stats}
        return kept, ({"entropy_temporaries": EAGER_ENTROPY_COPIES * b} if entropy else {"logits_valid_copy": b})
    kept = {"logits_valid_copy": b, **stats}  # the cross-entropy's input, its gradient written in place
    if not entropy:  # forward end: raw + divided; backward: dense gradient + the division's
        return kept, {"logits_grad": 2 * b}
    kept.update({"logits_divided": b, "entropy_softmax": 2 * b, "entropy_logsumexp_input": 2 * b})
    return kept, {"logits_grad": max(b + 2 * b, 2 * b + 2 * b + b)}  # raw + the exp temporary; backward grads


def _logit_parts(
    spec,
    f: FsdpOptions,
    tokens: int,
    *,
    entropy: bool,
    grad: bool,
    response_share: float = 1.0,
    verl_version: str = DEFAULT_VERL_VERSION,
) -> tuple[dict, dict]:
    """(kept, transient) bytes of the log-prob / entropy working set over ``tokens`` local tokens. Padded
    (``use_remove_padding=False``): the loss reads ``logits[:, -R-1:-1, :]``, a strided view that
    ``logprobs_from_logits`` reshapes into a contiguous bf16 copy of the response positions (``response_share`` of
    the tokens), and whose backward allocates a zero gradient of the full logits; without gradients that copy is a
    local of ``logprobs_from_logits`` (``logits.reshape(-1, last_dim)``, ``verl/utils/torch_functional.py`` @
    v0.6.0 ddd86f52) freed when it returns, before the entropy (a transient); unpadded: ``logits_rmpad`` is
    contiguous (no copy) and the cross-entropy's gradient is written into it."""
    v = spec.vocab_size
    if f.use_fused_kernels:
        return {"log_prob_stats": tokens * CE_STATS_BYTES}, {}
    logits = tokens * v * 2
    padded = not f.use_remove_padding
    engine = engine_worker(verl_version)
    if engine and padded:
        return _engine_padded_parts(spec, tokens, entropy=entropy, grad=grad)
    seen = int(tokens * response_share) if padded else tokens  # positions the log-prob and entropy read
    kept = {"logits": logits, "log_prob_stats": seen * CE_STATS_BYTES}
    trans = {}
    if padded and grad:
        kept["logits_response_copy"] = seen * v * 2
    elif padded:  # no_grad: the reshape's copy dies with logprobs_from_logits, before the entropy starts
        trans["logits_response_copy"] = seen * v * 2
    if entropy:
        # padded: verl_F.entropy_from_logits called as is (dp_actor.py's padded branch at every legacy release):
        # neither use_torch_compile nor the chunking apply there
        if not padded and f.entropy_from_logits_with_chunking:
            trans["entropy_chunk"] = 4 * min(seen, f.entropy_from_logits_chunk_size) * v * 4
        elif padded or not f.use_torch_compile:
            trans["entropy_temporaries"] = EAGER_ENTROPY_COPIES * seen * v * 2
            if grad and not f.entropy_checkpointing:  # softmax's fp32 output, logsumexp's fp32 input
                kept["entropy_softmax"] = 2 * seen * v * 2
                kept["entropy_logsumexp_input"] = 2 * seen * v * 2
    if grad and (entropy or padded):
        # rmpad: the entropy's gradient beside the cross-entropy's in-place one; padded: the slice's full gradient
        trans["logits_grad"] = logits
    if engine:  # forward_step's raw_output beside the out-of-place division, until it returns
        trans["logits_grad"] = max(trans.get("logits_grad", 0.0), logits)
    return kept, trans


def forward_only(
    spec,
    f: FsdpOptions,
    tokens: int,
    *,
    entropy: bool,
    response_share: float = 1.0,
    verl_version: str = DEFAULT_VERL_VERSION,
) -> float:
    """One forward-only micro-batch (``compute_log_prob`` under ``no_grad``): one layer's working set over
    ``tokens`` tokens, its input and the log-prob / entropy working set (``response_share``: R / (P + R), what the
    padded path's loss reads)."""
    layer = max(layer_bytes_no_recompute(spec, lay, _dims(tokens, "none")) for lay in spec.main_layers)
    kept, trans = _logit_parts(
        spec, f, tokens, entropy=entropy, grad=False, response_share=response_share, verl_version=verl_version
    )
    return layer + 2 * tokens * spec.hidden_size + sum(kept.values()) + max(trans.values(), default=0.0)


def gathered_units(spec, f: FsdpOptions) -> float:
    """bf16 bytes of the units gathered during a forward: the root, the current and the prefetched layer."""
    return 2 * (root_params(spec, f) + 2 * max(_layer_params(spec)))


@dataclass(kw_only=True)
class FsdpPass:
    """Token sizing of the three passes on one GPU."""

    update: int
    """Tokens of one update micro-batch."""
    old_log_prob: int
    """Tokens of one old_log_prob micro-batch."""
    ref: int
    """Tokens of one reference micro-batch."""


def log_prob_sizing(f: FsdpOptions, o: TrainingOptions, which: str) -> tuple[int, int]:
    """``(rows, max tokens)`` of one forward-only micro-batch of ``which`` (``old_log_prob`` or ``ref``), both
    strategies: ``rollout.log_prob_micro_batch_size_per_gpu`` / ``ref.log_prob_micro_batch_size_per_gpu`` rows
    (unset: the update's, ``ppo_micro_batch_size_per_gpu`` or ``--micro-batch``) and, with ``use_dynamic_bsz``,
    ``rollout.`` / ``ref.log_prob_max_token_len_per_gpu`` tokens (unset: ``ppo_max_token_len_per_gpu``, verl's
    ``${oc.select:actor_rollout_ref.actor.ppo_max_token_len_per_gpu}``). verl main (1dda039b) hands them to the
    forward: ``ActorRolloutRefWorker.init_model`` in ``verl/workers/engine_workers.py`` sets
    ``infer_micro_batch_size_per_gpu`` / ``infer_max_token_len_per_gpu`` from them (the reference's through
    ``ref.ppo_micro_batch_size_per_gpu``); v0.7.0 (f9c855f7) sets ``meta_info["micro_batch_size"]`` /
    ``["max_token_len"]`` in ``compute_log_prob`` / ``compute_ref_log_prob`` (``verl/workers/megatron_workers.py``,
    ``fsdp_workers.py``)."""
    update = f.ppo_micro_batch_size_per_gpu or o.micro_batch_size
    if which == "old_log_prob":
        rows, tokens = f.log_prob_micro_batch_size_per_gpu, f.log_prob_max_token_len_per_gpu
    elif which == "ref":
        rows, tokens = f.ref_log_prob_micro_batch_size_per_gpu, f.ref_log_prob_max_token_len_per_gpu
    else:
        raise MliteError(f"log_prob_sizing: which must be old_log_prob or ref, got {which!r}")
    return rows or update, tokens or f.ppo_max_token_len_per_gpu


def passes(f: FsdpOptions, o: TrainingOptions, seq_tokens: int) -> FsdpPass:
    """The micro-batch tokens of the update, old_log_prob and the reference (:func:`micro_tokens`,
    :func:`log_prob_sizing`)."""
    rows = f.ppo_micro_batch_size_per_gpu or o.micro_batch_size
    return FsdpPass(
        update=micro_tokens(f, seq_tokens, rows, f.ppo_max_token_len_per_gpu),
        old_log_prob=micro_tokens(f, seq_tokens, *log_prob_sizing(f, o, "old_log_prob")),
        ref=micro_tokens(f, seq_tokens, *log_prob_sizing(f, o, "ref")),
    )


def fsdp_actor(
    spec,
    world: int,
    o: TrainingOptions,
    f: FsdpOptions,
    seq_tokens: int,
    response_share: float = 1.0,
    verl_version: str = DEFAULT_VERL_VERSION,
) -> RankMemory:
    """The FSDP actor on one GPU as a :class:`RankMemory`: sharded params / grads / AdamW moments on the GPU
    (``idle_gpu``: what the offload flags leave there between its calls), the update's peak (activations of one
    micro-batch, gathered units, reduce-scatter, log-prob working set, AdamW's step temporaries) and host bytes."""
    from ..options.optimizers import ALGORITHMS

    if not f.is_fsdp:
        raise MliteError(f"fsdp_actor needs strategy fsdp or fsdp2, got {f.strategy!r}")
    check_fsdp(spec, world, f)
    g = fsdp_group(f, world)
    n = trained_params(spec)
    pb = DTYPE_BYTES[f.model_dtype]
    shard = n * pb / g
    params, grads, m1, m2 = shard, shard, shard, shard
    host = {}
    on_host_p = f.offload_policy or f.param_offload
    on_host_o = f.offload_policy or f.optimizer_offload
    if f.offload_policy:  # CPUOffloadPolicy: always on the host; the GPU sees gathered units only
        host = {"params": params, "grads": grads, "exp_avg": m1, "exp_avg_sq": m2}
        params = grads = m1 = m2 = 0.0
    else:
        if on_host_p:
            host.update({"params": params, **({"grads": grads} if FSDP_GRADS_BETWEEN_UPDATES else {})})
        if on_host_o:
            host.update({"exp_avg": m1, "exp_avg_sq": m2})
    tokens = passes(f, o, seq_tokens).update
    recompute = "full" if f.enable_gradient_checkpointing else "none"
    d = _dims(tokens, recompute)
    acts: dict = {}
    for lay in spec.main_layers:
        for k, v in layer_bytes(spec, lay, d).items():
            acts[k] = acts.get(k, 0.0) + v
    entropy = f.entropy_coeff != 0
    kept, trans = _logit_parts(
        spec, f, tokens, entropy=entropy, grad=True, response_share=response_share, verl_version=verl_version
    )
    acts.update(kept)
    acts["root_unit_unsharded"] = 2 * root_params(spec, f)
    biggest = max(_layer_params(spec))
    transients = {
        "fsdp2_all_gather": 2 * 2 * biggest,
        "fsdp2_reduce_scatter": (2 + 4) * biggest,
        "logits_grad": trans.get("logits_grad", 0.0) + trans.get("entropy_temporaries", 0.0),
    }
    if f.enable_gradient_checkpointing:
        transients["recompute_layer"] = max(layer_bytes_no_recompute(spec, lay, d) for lay in spec.main_layers)
    if "entropy_chunk" in trans:
        transients["logits_grad"] = max(transients["logits_grad"], trans["entropy_chunk"])
    step = ALGORITHMS.entry(o.optimizer_algorithm).step_bytes * n / g
    if not f.offload_policy:
        transients["optimizer_step"] = step
    kept_grads = grads if FSDP_GRADS_BETWEEN_UPDATES else 0.0  # zero_grad(set_to_none) ends update_policy
    idle = (0.0 if on_host_p else params + kept_grads) + (0.0 if on_host_o else m1 + m2)
    return RankMemory(
        pp_rank=0,
        local_params=n * pb,
        params=params,
        grads=grads,
        master=0.0,
        exp_avg=m1,
        exp_avg_sq=m2,
        activations=acts,
        transients=transients,
        other={"framework": o.framework_overhead_gib * GIB},
        host=host,
        idle_gpu=idle,
    )


def fsdp_ref(spec, world: int, f: FsdpOptions) -> tuple[float, float]:
    """(GPU bytes during its forward, host bytes) of verl's FSDP reference: host shards in ``ref_model_dtype``
    (CPU offload forced), the gathered root and two units in bf16 on the GPU, plus the one shard copied in."""
    g = fsdp_group(f, world)
    n = trained_params(spec)
    pb = DTYPE_BYTES[f.ref_model_dtype]
    return gathered_units(spec, f) + max(_layer_params(spec)) * pb / g, n * pb / g


__all__ = [
    "DTYPE_BYTES",
    "ENGINE_WORKER_FROM",
    "FSDP_STRATEGIES",
    "STRATEGIES",
    "FsdpOptions",
    "FsdpPass",
    "check_fsdp",
    "engine_worker",
    "forward_only",
    "fsdp_actor",
    "fsdp_group",
    "fsdp_ref",
    "gathered_units",
    "log_prob_sizing",
    "micro_tokens",
    "passes",
    "root_params",
    "trained_params",
]
