#!/usr/bin/env bash
# GRPO | Kimi K2.6 | vLLM rollout | Megatron Lite training (test fixture in the style of verl's examples)
#
# Mesh accounting follows Megatron Lite's per-pipeline-stage layout:
#   ngpu / pp = tp * ep * dp = etp * ep * edp
set -xeuo pipefail

MODEL_VARIANT=${MODEL_VARIANT:-kimi_k2_6}
NNODES=${NNODES:-32}
NDEVICES_PER_NODE=${NDEVICES_PER_NODE:-8}
TP=${TP:-1}
PP=${PP:-8}
EP=${EP:-8}
CP=${CP:-4}
ETP=${ETP:-1}
OPTIMIZER=${OPTIMIZER:-fsdp2} # dist_opt
ALL_OFFLOAD=${ALL_OFFLOAD:-True}

case "${MODEL_VARIANT}" in
    kimi_k2_6)
        MODEL_PATH=${MODEL_PATH:-${KIMI_K2_6_MODEL_PATH:-}}
        ;;
    glm5_1|glm5)
        MODEL_PATH=${MODEL_PATH:-${GLM5_1_MODEL_PATH:-}}
        PP=16
        ;;
    *)
        echo "Unsupported MODEL_VARIANT=${MODEL_VARIANT}" >&2
        exit 1
        ;;
esac

: "${MODEL_PATH:?set MODEL_PATH}"

NGPU=$((NNODES * NDEVICES_PER_NODE))
if (( NGPU % PP != 0 )); then
    echo "Invalid mesh" >&2
    exit 1
fi
NGPU_PER_PP=$((NGPU / PP))
DP=$((NGPU_PER_PP / (TP * EP)))
EDP=$((NGPU_PER_PP / (ETP * EP)))
echo "MLITE_MESH ngpu=${NGPU} pp=${PP} tp=${TP} ep=${EP} etp=${ETP} cp=${CP} dp=${DP} edp=${EDP}"

TRAIN_FILE=${TRAIN_FILE:-$HOME/data/gsm8k/train.parquet}
TEST_FILE=${TEST_FILE:-$HOME/data/gsm8k/test.parquet}
MAX_PROMPT_LENGTH=${MAX_PROMPT_LENGTH:-2048}
MAX_RESPONSE_LENGTH=${MAX_RESPONSE_LENGTH:-6144}

if [[ -n "${CUDA_VISIBLE_DEVICES:-}" ]]; then
    unset ROCR_VISIBLE_DEVICES
    TP=2
fi

ALGORITHM=(
    algorithm.adv_estimator=grpo
    algorithm.use_kl_in_reward=False
)

DATA=(
    data.train_files="${TRAIN_FILE}"
    data.val_files="${TEST_FILE}"
    data.max_prompt_length=${MAX_PROMPT_LENGTH}
    data.max_response_length=${MAX_RESPONSE_LENGTH}
)

ACTOR=(
    actor@actor_rollout_ref.actor=mlite_actor
    actor_rollout_ref.actor.optim.lr=1e-6
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1
    # mesh
    actor_rollout_ref.actor.engine.tp=${TP}
    actor_rollout_ref.actor.engine.pp=${PP}
    actor_rollout_ref.actor.engine.vpp=1
    actor_rollout_ref.actor.engine.ep=${EP}
    actor_rollout_ref.actor.engine.cp=${CP}
    actor_rollout_ref.actor.engine.etp=${ETP}
    actor_rollout_ref.actor.engine.param_offload=${ALL_OFFLOAD}
    actor_rollout_ref.actor.engine.optimizer_offload=${ALL_OFFLOAD}
    actor_rollout_ref.actor.engine.impl_cfg.use_thd=True
    +actor_rollout_ref.actor.engine.impl_cfg.optimizer=${OPTIMIZER}
    +actor_rollout_ref.actor.engine.impl_cfg.recompute=[full]
    +actor_rollout_ref.actor.optim.override_optimizer_config.offload_fraction=1.0
)

TRAINER=(
    trainer.logger=[console]
    trainer.nnodes=${NNODES}
    trainer.n_gpus_per_node=${NDEVICES_PER_NODE}
)

python3 -m verl.trainer.main_ppo \
    hydra.searchpath=[pkg://verl_mlite.config] \
    "${ALGORITHM[@]}" \
    "${DATA[@]}" \
    "${ACTOR[@]}" \
    "${TRAINER[@]}" \
    "$@"
