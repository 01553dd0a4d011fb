#!/usr/bin/env bash
# SFT | Qwen3.5-35B-A3B | Megatron Lite engine | torchrun (test fixture in the style of verl's examples)
set -euo pipefail

NNODES=${NNODES:-2}
NPROC=${NPROC:-8}
TP=${TP:-2}
CP=${CP:-2}
EP=${EP:-$((NPROC))}
MODEL_PATH=${MODEL_PATH:-/models/Qwen/Qwen3.5-35B-A3B}
MASTER_ADDR=${MASTER_ADDR:-$(hostname -i)}
MAX_LENGTH=${MAX_LENGTH:-$((4096 * 2))}
WORLD=$((NNODES * NPROC))

ENGINE=(
    hydra.searchpath=[pkg://verl_mlite.config]
    engine=mlite
    engine.tp=${TP}
    engine.cp="${CP}"
    engine.ep=$EP
    engine.pp=1
    engine.param_offload=True
    '+engine.impl_cfg.optimizer=dist_opt'
    "+engine.impl_cfg.recompute=[core_attn,mlp]"
)

torchrun --nnodes="${NNODES}" --nproc_per_node="${NPROC}" --master_addr="${MASTER_ADDR}" \
    -m verl_mlite.launch verl.trainer.sft_trainer \
    data.train_files="$HOME/data/sft.parquet" \
    data.max_length=${MAX_LENGTH} \
    data.micro_batch_size_per_gpu=2 \
    model.path="${MODEL_PATH}" \
    optim=megatron \
    +optim.override_optimizer_config.use_precision_aware_optimizer=True \
    "${ENGINE[@]}" \
    trainer.nnodes=${NNODES} \
    trainer.n_gpus_per_node=${NPROC} \
    trainer.logger=['console','file'] 2>&1 | tee "sft-${WORLD}.log"
