"""PPO's critic as rows of the options table: one :class:`~mlite.options.schema.Option` per field of
:class:`~mlite.memory.rl_critic.CriticOptions` (a test holds the two equal), with its ``mlite rl-memory`` flag, help
and verl key (read back from a launcher by :func:`mlite.memory.rl_keys.critic_kwargs`).

Keys and defaults: ``verl/trainer/config/_generated_ppo_megatron_trainer.yaml`` @ 1dda039b (verl main); an FSDP
critic's offload keys (``critic.model.fsdp_config.param_offload`` / ``optimizer_offload``,
``_generated_ppo_trainer.yaml`` @ 1dda039b) are read as the same two fields (aliases; export writes the Megatron
keys).
"""

from __future__ import annotations

from .schema import Option, verl_key_row

GROUP = "PPO critic (algorithm.adv_estimator=gae)"
"""Argparse group of the critic flags."""

_C = "critic"


def _row(field: str, type_: type, default, key: str, help: str, flag: str | None, **kw) -> Option:
    return verl_key_row(GROUP, field, type_, default, key, help, flag, **kw)


CRITIC_ROWS: tuple[Option, ...] = (
    _row(
        "adv_estimator",
        str,
        "grpo",
        "algorithm.adv_estimator",
        "gae (PPO) builds a critic; grpo and the others do not (default grpo)",
        "--adv-estimator",
    ),
    _row(
        "enable", bool, None, f"{_C}.enable", "build the critic whatever the estimator", "--critic-enable", cli="switch"
    ),
    _row("model", str, None, f"{_C}.model.path", "the critic's model (default: the actor's)", "--critic-model"),
    _row(
        "strategy",
        str,
        "megatron",
        f"{_C}.strategy",
        "the critic's backend (megatron; fsdp / fsdp2: verl's FSDP critic)",
        "--critic-strategy",
    ),
    _row("tp", int, 1, f"{_C}.megatron.tensor_model_parallel_size", "critic TP (default 1)", "--critic-tp"),
    _row("pp", int, 1, f"{_C}.megatron.pipeline_model_parallel_size", "critic PP (default 1)", "--critic-pp"),
    _row("cp", int, 1, f"{_C}.megatron.context_parallel_size", "critic CP (default 1)", "--critic-cp"),
    _row("ep", int, 1, f"{_C}.megatron.expert_model_parallel_size", "critic EP (default 1)", "--critic-ep"),
    _row(
        "param_offload",
        bool,
        False,
        f"{_C}.megatron.param_offload",
        "critic params on the host, its grad buffer freed, outside its calls",
        "--critic-param-offload",
        cli="switch",
        aliases=(f"{_C}.model.fsdp_config.param_offload",),
    ),
    _row(
        "optimizer_offload",
        bool,
        False,
        f"{_C}.megatron.optimizer_offload",
        "critic optimizer state on the host outside update_critic",
        "--critic-optimizer-offload",
        cli="switch",
        aliases=(f"{_C}.model.fsdp_config.optimizer_offload",),
    ),
    _row(
        "ppo_micro_batch_size_per_gpu",
        int,
        None,
        f"{_C}.ppo_micro_batch_size_per_gpu",
        "rows of one critic update / values micro-batch (default: --micro-batch)",
        "--critic-micro-batch",
    ),
    _row(
        "ppo_max_token_len_per_gpu",
        int,
        32768,
        f"{_C}.ppo_max_token_len_per_gpu",
        "critic update tokens with --dynamic-bsz",
        "--critic-max-token-len",
    ),
    _row(
        "forward_max_token_len_per_gpu",
        int,
        None,
        f"{_C}.forward_max_token_len_per_gpu",
        "critic values tokens with --dynamic-bsz (default: --critic-max-token-len)",
        "--critic-forward-max-token-len",
    ),
)
"""The critic's options, in :class:`~mlite.memory.rl_critic.CriticOptions` field order."""

__all__ = ["CRITIC_ROWS", "GROUP"]
