"""What both GRPO launchers share: knobs, algorithm / data / model / rollout / trainer overrides, environment.

Keys are verl 0.9.1's (``ppo_trainer.yaml`` and its groups); the tests compose them against the installed config.
"""

from __future__ import annotations

from .launcher import COMMON_ENV, Knob, mtp_overrides
from .overrides import Override, var

ENTRY = ["python3", "-m", "verl.trainer.main_ppo"]
"""verl's PPO/GRPO entry point (a Ray driver)."""

ACTOR = "actor_rollout_ref.actor"


def knobs(plan, dp: int) -> list[Knob]:
    o = plan.options
    tbs = plan.batch_size(dp)
    return [
        Knob(name="TRAIN_BATCH_SIZE", default=str(tbs), comment="prompts per step"),
        Knob(name="PPO_MINI_BATCH_SIZE", default=str(tbs), comment="prompts per optimizer step (= batch: on-policy)"),
        Knob(name="PPO_MICRO_BATCH_SIZE_PER_GPU", default=str(o.micro_batch_size)),
        Knob(name="MAX_PROMPT_LENGTH", default=str(plan.prompt_length)),
        Knob(name="MAX_RESPONSE_LENGTH", default=str(plan.response_length)),
        Knob(
            name="PPO_MAX_TOKEN_LEN_PER_GPU",
            default=str(o.seq_len * o.micro_batch_size),
            comment="dynamic batch: tokens per micro-batch",
        ),
        Knob(name="ACTOR_LR", default=f"{plan.learning_rate:g}"),
        Knob(name="ROLLOUT_TP", default=str(plan.rollout_tensor_parallel), comment="vLLM tensor parallel size"),
        Knob(name="ROLLOUT_N", default=str(plan.rollout_n), comment="responses per prompt"),
        Knob(name="ROLLOUT_GPU_MEM_UTIL", default=f"{plan.rollout_gpu_memory_utilization:g}"),
        Knob(name="TOTAL_EPOCHS", default=str(plan.total_epochs)),
    ]


def env(spec) -> list[tuple[str, str]]:
    out = list(COMMON_ENV) + [("VLLM_USE_V1", "1")]
    if spec.linear_num_value_heads:  # Qwen3.5 / Qwen3-Next: verl's Qwen3.5 example turns vLLM's symm-mem all-reduce off
        out.append(("VLLM_ALLREDUCE_USE_SYMM_MEM", "0"))
    return out


def algorithm(plan=None) -> list[Override]:
    """``algorithm.adv_estimator`` (the plan's critic options: ``gae`` builds PPO's critic) and no KL reward."""
    est = plan.critic.adv_estimator if plan is not None else "grpo"
    return [Override.lit("algorithm.adv_estimator", est), Override.lit("algorithm.use_kl_in_reward", False)]


def log_prob(plan) -> list[Override]:
    """The old_log_prob / ref forwards' sizing of ``plan.log_prob_knobs``, written through the rows of
    :data:`mlite.options.rl_fsdp.FSDP_ROWS` (:func:`mlite.memory.rl_keys.log_prob_overrides`), the table
    ``import-launcher`` reads them back with; the fields the launcher writes itself are left out."""
    from ..memory.rl_fsdp import FsdpOptions
    from ..memory.rl_keys import log_prob_overrides

    f = plan.log_prob_options
    keep = FsdpOptions(
        strategy="megatron", **{k: getattr(f, k) for k in ("use_dynamic_bsz", "ppo_max_token_len_per_gpu")}
    )
    return [Override.lit(k, v) for k, v in log_prob_overrides(f, defaults=keep).items()]


def critic(plan) -> list[Override]:
    """PPO's critic (``plan.critic`` when verl builds one: ``need_critic``), its keys through the rows of
    :data:`mlite.options.rl_critic.CRITIC_ROWS` (:func:`mlite.memory.rl_keys.critic_overrides`); the estimator is
    the ALGORITHM section's. Without one nothing is written: verl builds no critic for ``grpo``."""
    from ..memory.rl_critic import CriticOptions
    from ..memory.rl_keys import critic_overrides

    c = plan.critic
    out = critic_overrides(c, defaults=CriticOptions(adv_estimator=c.adv_estimator))
    out.pop("algorithm.adv_estimator", None)
    return [Override.lit(k, v) for k, v in out.items()]


def data() -> list[Override]:
    return [
        Override("data.train_files", var("TRAIN_FILES")),
        Override("data.val_files", var("VAL_FILES")),
        Override("data.train_batch_size", var("TRAIN_BATCH_SIZE")),
        Override("data.max_prompt_length", var("MAX_PROMPT_LENGTH")),
        Override("data.max_response_length", var("MAX_RESPONSE_LENGTH")),
        Override.lit("data.filter_overlong_prompts", True),
        Override.lit("data.truncation", "error"),
    ]


def model(spec, train_mtp: bool | None = None) -> list[Override]:
    return [
        Override("actor_rollout_ref.model.path", var("MODEL_PATH")),
        Override.lit("actor_rollout_ref.model.trust_remote_code", True),
        Override.lit("actor_rollout_ref.model.use_fused_kernels", False),
        *mtp_overrides("actor_rollout_ref.model", spec, train_mtp),
    ]


def actor_common() -> list[Override]:
    return [
        Override(f"{ACTOR}.optim.lr", var("ACTOR_LR")),
        Override(f"{ACTOR}.ppo_mini_batch_size", var("PPO_MINI_BATCH_SIZE")),
        Override(f"{ACTOR}.ppo_micro_batch_size_per_gpu", var("PPO_MICRO_BATCH_SIZE_PER_GPU")),
        Override(f"{ACTOR}.ppo_max_token_len_per_gpu", var("PPO_MAX_TOKEN_LEN_PER_GPU")),
        Override.lit(f"{ACTOR}.use_dynamic_bsz", True),
        Override.lit(f"{ACTOR}.use_kl_loss", False),
        Override.lit(f"{ACTOR}.entropy_coeff", 0),
        Override.lit(f"{ACTOR}.loss_agg_mode", "token-mean"),
    ]


def rollout(plan) -> list[Override]:
    """The rollout engine: its knobs as variables, the plan's other rollout knobs (``plan.rollout_knobs``) written
    through :data:`mlite.memory.rl_keys.ROLLOUT_KEYS`, the table ``import-launcher`` reads them back with."""
    from ..memory.rl_keys import rollout_overrides
    from .plan import ROLLOUT_OWNED

    r = "actor_rollout_ref.rollout"
    opts = plan.rollout_options
    out = [
        Override.lit(f"{r}.name", opts.name),
        Override.lit(f"{r}.mode", "async"),
        Override(f"{r}.tensor_model_parallel_size", var("ROLLOUT_TP")),
        Override(f"{r}.gpu_memory_utilization", var("ROLLOUT_GPU_MEM_UTIL")),
        Override(f"{r}.n", var("ROLLOUT_N")),
        Override(f"{r}.prompt_length", var("MAX_PROMPT_LENGTH")),
        Override(f"{r}.response_length", var("MAX_RESPONSE_LENGTH")),
        Override.lit(f"{r}.free_cache_engine", opts.free_cache_engine),
    ]
    written = {o.key for o in out}
    from ..memory.rl_keys import ROLLOUT_KEYS

    owned_keys = {k for f, k in ROLLOUT_KEYS if f in ROLLOUT_OWNED}
    for key, value in rollout_overrides(opts, defaults=type(opts)()).items():
        if key not in written and key not in owned_keys:
            out.append(Override.lit(key, value))
    return out


def trainer() -> list[Override]:
    return [
        Override.lit("trainer.logger", ["console", "file"]),
        Override("trainer.project_name", var("PROJECT_NAME")),
        Override("trainer.experiment_name", var("EXPERIMENT_NAME")),
        Override.lit("trainer.val_before_train", False),
        Override("trainer.nnodes", var("NNODES")),
        Override("trainer.n_gpus_per_node", var("NDEVICES_PER_NODE")),
        Override("trainer.total_epochs", var("TOTAL_EPOCHS")),
        # the TaskRunner actor writes the JSONL: hand it the path even when Ray was started without it
        Override(
            "ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH",
            "'" + var("VERL_FILE_LOGGER_PATH") + "'",
            add=True,
        ),
    ]
