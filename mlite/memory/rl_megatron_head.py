"""The output head of verl's Megatron log-prob forwards (``compute_log_prob`` of the actor for old_log_prob, of the
reference for ref): the bytes on one GPU while the logits of one forward-only micro-batch are turned into
log-probs (and, for old_log_prob, the entropy), the step's largest forward working set at long sequences and large
vocabularies.

Sources: verl-project/verl v0.7.0 (f9c855f7cf04d603c9546bc01776c74806a879c1), v0.9.0 for the engine worker;
NVIDIA/Megatron-LM core_v0.14.0 (23e00ed0963c35382dfe8a5a94fb3cda4d21e133).

- The logits are fp32. verl wraps the model in ``Float16Module`` (``get_model`` in ``verl/utils/megatron_utils.py``
  @ v0.7.0: ``if config.fp16 or config.bf16: model = [Float16Module(config, m) ...]``), whose ``forward`` on the
  last pipeline stage returns ``float16_to_fp32(outputs)`` (``megatron/core/transformer/module.py`` @
  core_v0.14.0): the output layer's bf16 ``[N, V/TP]`` (N the micro-batch's tokens on this CP rank) and its fp32
  copy are both alive at that cast, 1.5 fp32 copies.
- old_log_prob computes the entropy (``compute_log_prob(data=data, calculate_entropy=True)`` in
  ``ActorRolloutRefWorker.compute_log_prob``, ``verl/workers/megatron_workers.py`` line 857 @ v0.7.0; the
  reference ``calculate_entropy=False``, line 828). Unfused (``actor_rollout_ref.model.use_fused_kernels=False``,
  the default: ``_generated_ppo_megatron_trainer.yaml`` @ v0.7.0), ``logits_processor`` in
  ``MegatronPPOActor.forward_backward_batch`` (``verl/workers/actor/megatron_actor.py`` @ v0.7.0; the same
  ``logits.clone()`` in ``verl/workers/engine/megatron/transformer_impl.py`` @ v0.9.0) divides the logits in
  place, keeps a ``logits.clone()`` for the log-prob and calls ``vocab_parallel_entropy``
  (``_VocabParallelEntropy.forward``, ``verl/utils/megatron/tensor_parallel.py``), whose ``vocab_parallel_logits
  - logits_max`` is a third fp32 ``[N, V/TP]`` (its ``exp_`` / ``div_`` are in place): 3 fp32 copies at once.
  The log-prob (``vocab_parallel_cross_entropy``, Megatron's ``_VocabParallelCrossEntropy``: ``.float()`` is a
  no-op on fp32, the max subtraction and ``exp`` are in place, ``cross_entropy.py`` @ core_v0.14.0) adds none.
  Under ``torch.no_grad`` the saved tensors die with the call. Without the entropy (the reference) the peak is the
  cast's 1.5 copies.
- ``use_fused_kernels=True`` computes log-prob and entropy from the hidden states (``get_mcore_forward_fused_fn``):
  no ``[N, V/TP]`` tensor.
- Beside the logits: the output layer's input, the final norm's output all-gathered over TP with sequence
  parallelism (bf16 ``[N, h]``). The decoder layers' working set is freed by then (no autograd state): the head
  and one layer's rebuild are not held together (:func:`mlite.memory.rl_phases.forward_bytes` takes the larger).

With ``use_remove_padding`` (thd, verl's Megatron default) N is the micro-batch's valid tokens; the kit sizes it
at full length (rows x P + R, the planner's bound), so a run whose rows are shorter logs less.
"""

from __future__ import annotations

FP32_COPIES_ENTROPY = 3.0
"""fp32 ``[N, V/TP]`` copies at old_log_prob's head peak: the logits, their clone, the entropy's shifted copy."""
FP32_COPIES_LOG_PROB = 1.5
"""fp32 copies at the reference's head peak: ``Float16Module``'s fp32 cast beside the bf16 it is made from."""


def head_bytes(spec, plan, tokens: float, *, entropy: bool, fused: bool = False) -> dict[str, float]:
    """Bytes by part of the log-prob head over ``tokens`` (the micro-batch's tokens on one CP rank) on one GPU of
    ``plan`` (vocabulary padded and split over TP, :attr:`~mlite.mesh.plan.MeshPlan.padded_vocab`): the gathered
    hidden states and, unfused, the fp32 logits working set (:data:`FP32_COPIES_ENTROPY` with ``entropy``, else
    :data:`FP32_COPIES_LOG_PROB`)."""
    parts = {"head_hidden": 2.0 * tokens * spec.hidden_size}
    if fused:
        return parts
    copies = FP32_COPIES_ENTROPY if entropy else FP32_COPIES_LOG_PROB
    parts["logits_fp32"] = copies * 4.0 * tokens * plan.padded_vocab / plan.parallel.tp
    return parts


__all__ = ["FP32_COPIES_ENTROPY", "FP32_COPIES_LOG_PROB", "head_bytes"]
