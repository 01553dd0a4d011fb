#!/usr/bin/env bash
# Test fixture written by this project (mlite-lab), not a copy: GRPO | Qwen3-30B-A3B | vLLM rollout | verl's
# Megatron-Core backend with Megatron-Core dev's chunked optimizer-state offload (#6244). The optimizer keys are
# Megatron-Core's OptimizerConfig field names (megatron/core/optimizer/optimizer_config.py @ d48bd6be) under verl's
# actor_rollout_ref.actor.optim.override_optimizer_config, which verl's init_megatron_optim_config hands to
# OptimizerConfig.
set -xeuo pipefail

NNODES=${NNODES:-1}
NGPUS_PER_NODE=${NGPUS_PER_NODE:-8}
CHUNK_MB=${CHUNK_MB:-256}
STATE_FRACTION=${STATE_FRACTION:-0.5}

python3 -m verl.trainer.main_ppo --config-path=config --config-name=ppo_megatron_trainer.yaml \
    algorithm.adv_estimator=grpo \
    data.train_files=/data/gsm8k/train.parquet \
    data.val_files=/data/gsm8k/test.parquet \
    data.train_batch_size=64 \
    data.max_prompt_length=1024 \
    data.max_response_length=3072 \
    actor_rollout_ref.model.path=/models/Qwen/Qwen3-30B-A3B \
    actor_rollout_ref.actor.optim.lr=1e-06 \
    actor_rollout_ref.actor.ppo_mini_batch_size=16 \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1 \
    actor_rollout_ref.actor.megatron.tensor_model_parallel_size=1 \
    actor_rollout_ref.actor.megatron.expert_model_parallel_size=8 \
    actor_rollout_ref.actor.megatron.param_offload=True \
    actor_rollout_ref.actor.optim.use_precision_aware_optimizer=True \
    +actor_rollout_ref.actor.optim.override_optimizer_config.chunked_optimizer_state_offload=True \
    +actor_rollout_ref.actor.optim.override_optimizer_config.optimizer_state_offload_chunk_size_mb=${CHUNK_MB} \
    +actor_rollout_ref.actor.optim.override_optimizer_config.optimizer_state_offload_fraction=${STATE_FRACTION} \
    actor_rollout_ref.rollout.name=vllm \
    actor_rollout_ref.rollout.tensor_model_parallel_size=4 \
    actor_rollout_ref.rollout.gpu_memory_utilization=0.5 \
    trainer.nnodes=${NNODES} \
    trainer.n_gpus_per_node=${NGPUS_PER_NODE} \
    trainer.total_epochs=1 "$@"
