"""verl's FSDP actor and reference as rows of the options table: one :class:`~mlite.options.schema.Option` per field
of :class:`~mlite.memory.rl_fsdp.FsdpOptions` (a test holds the two equal), with its ``mlite rl-memory`` flag, help
and verl key (written and read by :mod:`mlite.memory.rl_keys`: :func:`~mlite.memory.rl_keys.fsdp_kwargs`).

The keys and defaults are verl ``main``'s (``verl/trainer/config/_generated_ppo_trainer.yaml`` @ 1dda039b: the
``ppo_trainer`` config, whose ``actor.strategy`` default is ``fsdp``). The reference's offload is not a row: verl
forces the FSDP reference's CPU offload (:mod:`mlite.memory.rl_fsdp`), so ``ref.fsdp_config.param_offload`` changes
nothing on the GPU.
"""

from __future__ import annotations

from .schema import Option, verl_key_row

GROUP = "verl FSDP actor (actor_rollout_ref.actor.strategy=fsdp|fsdp2)"
"""Argparse group of the FSDP flags."""

STRATEGY_KEY = "actor_rollout_ref.actor.strategy"
"""verl's actor strategy key."""

_A = "actor_rollout_ref.actor"
_M = "actor_rollout_ref.model"
_R = "actor_rollout_ref.rollout"
_REF = "actor_rollout_ref.ref"


def _row(field: str, type_: type, default, key: str, help: str, flag: str | None, **kw) -> Option:
    return verl_key_row(GROUP, field, type_, default, key, help, flag, **kw)


FSDP_ROWS: tuple[Option, ...] = (
    _row(
        "strategy",
        str,
        "megatron",
        STRATEGY_KEY,
        "the actor's backend: megatron (the Megatron estimate) or verl's FSDP1 / FSDP2 workers (default megatron; "
        "verl's ppo_trainer default is fsdp)",
        "--strategy",
        choices=("megatron", "fsdp", "fsdp2"),
        label="actor.strategy",
    ),
    _row(
        "use_remove_padding",
        bool,
        True,
        f"{_M}.use_remove_padding",
        "False: every row padded to P + R (default True: tokens unpadded)",
        "--no-remove-padding",
        cli="negate",
    ),
    _row(
        "use_dynamic_bsz",
        bool,
        False,
        f"{_A}.use_dynamic_bsz",
        "micro-batches packed by tokens (ppo_max_token_len_per_gpu)",
        "--dynamic-bsz",
        cli="switch",
    ),
    _row(
        "ppo_max_token_len_per_gpu",
        int,
        16384,
        f"{_A}.ppo_max_token_len_per_gpu",
        "tokens of one update micro-batch with --dynamic-bsz",
        "--ppo-max-token-len",
    ),
    _row(
        "log_prob_max_token_len_per_gpu",
        int,
        None,
        f"{_R}.log_prob_max_token_len_per_gpu",
        "old_log_prob's tokens with --dynamic-bsz, both strategies (default: --ppo-max-token-len)",
        "--log-prob-max-token-len",
    ),
    _row(
        "ref_log_prob_max_token_len_per_gpu",
        int,
        None,
        f"{_REF}.log_prob_max_token_len_per_gpu",
        "the reference's tokens with --dynamic-bsz, both strategies (default: --ppo-max-token-len)",
        "--ref-log-prob-max-token-len",
    ),
    _row(
        "ppo_micro_batch_size_per_gpu",
        int,
        None,
        f"{_A}.ppo_micro_batch_size_per_gpu",
        "rows of one update micro-batch (default: --micro-batch)",
        None,
    ),
    _row(
        "log_prob_micro_batch_size_per_gpu",
        int,
        None,
        f"{_R}.log_prob_micro_batch_size_per_gpu",
        "old_log_prob's rows, both strategies (default: the update's)",
        "--log-prob-micro-batch",
    ),
    _row(
        "ref_log_prob_micro_batch_size_per_gpu",
        int,
        None,
        f"{_REF}.log_prob_micro_batch_size_per_gpu",
        "the reference's rows, both strategies (default: the update's)",
        "--ref-log-prob-micro-batch",
    ),
    _row(
        "enable_gradient_checkpointing",
        bool,
        True,
        f"{_M}.enable_gradient_checkpointing",
        "False: keep every layer's activations (default True: each layer's input only)",
        "--no-gradient-checkpointing",
        cli="negate",
    ),
    _row(
        "param_offload",
        bool,
        False,
        f"{_A}.fsdp_config.param_offload",
        "parameter and gradient shards on the host outside the actor's calls",
        "--fsdp-param-offload",
        cli="switch",
    ),
    _row(
        "optimizer_offload",
        bool,
        False,
        f"{_A}.fsdp_config.optimizer_offload",
        "AdamW moments on the host outside the update",
        "--fsdp-optimizer-offload",
        cli="switch",
    ),
    _row(
        "offload_policy",
        bool,
        False,
        f"{_A}.fsdp_config.offload_policy",
        "FSDP2 CPUOffloadPolicy: params, grads and moments always on the host",
        "--fsdp-offload-policy",
        cli="switch",
    ),
    _row(
        "fsdp_size",
        int,
        -1,
        f"{_A}.fsdp_config.fsdp_size",
        "GPUs of one shard group (-1: all; else HSDP)",
        "--fsdp-size",
    ),
    _row(
        "ulysses_sequence_parallel_size",
        int,
        1,
        f"{_A}.ulysses_sequence_parallel_size",
        "GPUs splitting one micro-batch's tokens (Ulysses)",
        "--ulysses-sp",
        aliases=(f"{_A}.fsdp_config.ulysses_sequence_parallel_size",),
    ),
    _row("model_dtype", str, "fp32", f"{_A}.fsdp_config.model_dtype", "dtype of the sharded state", None),
    _row("ref_model_dtype", str, "fp32", f"{_REF}.fsdp_config.model_dtype", "dtype of the reference's shards", None),
    _row(
        "use_fused_kernels",
        bool,
        False,
        f"{_M}.use_fused_kernels",
        "log-prob and entropy from the hidden states in chunks (no [tokens, vocab] logits)",
        "--fused-kernels",
        cli="switch",
    ),
    _row("use_torch_compile", bool, True, f"{_A}.use_torch_compile", "the entropy is a compiled kernel", None),
    _row(
        "entropy_from_logits_with_chunking",
        bool,
        False,
        f"{_A}.entropy_from_logits_with_chunking",
        "the entropy over fp32 chunks of rows",
        None,
    ),
    _row("entropy_from_logits_chunk_size", int, 2048, f"{_A}.entropy_from_logits_chunk_size", "rows per chunk", None),
    _row("entropy_checkpointing", bool, False, f"{_A}.entropy_checkpointing", "entropy recomputed in backward", None),
    _row(
        "entropy_coeff",
        float,
        0.0,
        f"{_A}.entropy_coeff",
        "the update computes the entropy when not 0",
        "--entropy-coeff",
    ),
)
"""The FSDP actor's options, in :class:`~mlite.memory.rl_fsdp.FsdpOptions` field order."""

LOG_PROB_FIELDS = (
    "use_dynamic_bsz",
    "ppo_max_token_len_per_gpu",
    "log_prob_max_token_len_per_gpu",
    "ref_log_prob_max_token_len_per_gpu",
    "log_prob_micro_batch_size_per_gpu",
    "ref_log_prob_micro_batch_size_per_gpu",
)
"""The rows that size the old_log_prob / ref forwards of both strategies (:func:`mlite.memory.rl_fsdp.log_prob_sizing`):
read from a Megatron launcher too (:func:`mlite.memory.rl_keys.log_prob_kwargs`) and written by ``mlite export``."""

__all__ = ["FSDP_ROWS", "GROUP", "LOG_PROB_FIELDS", "STRATEGY_KEY"]
