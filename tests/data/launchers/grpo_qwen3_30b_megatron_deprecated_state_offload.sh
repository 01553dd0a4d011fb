#!/usr/bin/env bash
# Test fixture written by this project (mlite-lab), not a copy: GRPO | Qwen3-30B-A3B | verl's Megatron-Core backend
# asking for optimizer-state offload by Megatron-Core's deprecated alias offload_optimizer_states, which
# OptimizerConfig.__post_init__ (megatron/core/optimizer/optimizer_config.py @ d48bd6be) turns into
# chunked_optimizer_state_offload=True with chunk size 0 and fraction 1.0 (verl's init_megatron_optim_config passes
# override_optimizer_config to OptimizerConfig's constructor, so __post_init__ sees it).
set -xeuo pipefail

python3 -m verl.trainer.main_ppo --config-path=config --config-name=ppo_megatron_trainer.yaml \
    algorithm.adv_estimator=grpo \
    data.train_files=/data/gsm8k/train.parquet \
    data.max_prompt_length=1024 \
    data.max_response_length=1024 \
    actor_rollout_ref.model.path=/models/Qwen/Qwen3-30B-A3B \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1 \
    actor_rollout_ref.actor.megatron.tensor_model_parallel_size=1 \
    actor_rollout_ref.actor.megatron.expert_model_parallel_size=8 \
    actor_rollout_ref.actor.optim.use_precision_aware_optimizer=True \
    +actor_rollout_ref.actor.optim.override_optimizer_config.offload_optimizer_states=True \
    trainer.nnodes=1 \
    trainer.n_gpus_per_node=8
