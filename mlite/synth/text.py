"""Text pools of the synthetic logs: the noise of a multi-node Slurm job (worker chatter, vLLM
stats, Ray notes, rollout dumps, warnings, tqdm bars) and the endings of failed jobs (CUDA OOM, NCCL
watchdog, Slurm cancellations, tracebacks), written the way verl, Ray, torch and Slurm print them."""

from __future__ import annotations

import random

from .metrics import KL_COEF, STEPS_PER_EPOCH

ESC_CYAN, ESC_YELLOW, ESC_GREEN, ESC_RESET = "\x1b[36m", "\x1b[33m", "\x1b[32m", "\x1b[0m"

QUESTIONS = (
    (
        "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. How many "
        "clips did Natalia sell altogether in April and May?"
    ),
    "Weng earns $12 an hour for babysitting. Yesterday, she just did 50 minutes of babysitting. How much did she earn?",
    "Betty is saving money for a new wallet which costs $100. Betty has only half of the money she needs.",
    "Translate from English to Chinese: The current deal amounts to a 3.2% increase for a one-year period.",
    "Move the cursor to the 'Add to cart' button and click it; the screenshot shows a product page.",
)
RESPONSES = (
    (
        "Let's break it down step by step:\n\n1. In April she sold 48 clips.\n2. In May she sold 48 / 2 = 24 clips.\n"
        "3. Altogether 48 + 24 = 72 clips.\n\n#### 72"
    ),
    "Weng earns 12 / 60 = $0.2 per minute. Working 50 minutes, she earned 0.2 x 50 = $10.\n#### 10",
    (
        "<think>The wallet costs $100 and she has half, so she needs $50 more. Her parents give $15 and her "
        "grandparents twice as much, $30.</think>\n<answer>5</answer>"
    ),
    "目前的协议相当于一年期内增长3.2%，涵盖2024年4月1日至2025年3月31日。",
    (
        "<think>The 'Add to cart' button is at the right of the price; zoom is 340% so coordinates scale.</think>\n"
        "<answer>(812, 440)</answer>"
    ),
)


def ray(name: str, pid: int, ip: str | None = None, *, ansi: bool = True, color: str = ESC_CYAN) -> str:
    """A Ray line prefix such as ``(WorkerDict pid=1609, ip=10.0.0.2) `` (coloured like Ray does)."""
    inner = f"{name} pid={pid}" + (f", ip={ip}" if ip else "")
    return f"{color}({inner}){ESC_RESET} " if ansi else f"({inner}) "


def repeated(n: int, ansi: bool = True) -> str:
    """Ray's de-duplication note."""
    return f"{ESC_GREEN} [repeated {n}x across cluster]{ESC_RESET}" if ansi else f" [repeated {n}x across cluster]"


def tqdm_bar(desc: str, i: int, n: int, rate: float, width: int = 40) -> str:
    """A tqdm bar as it appears in a log."""
    frac = i / n if n else 1.0
    full = int(frac * width)
    bar = "█" * full + ("▍" if full < width else "") + " " * max(0, width - full - 1)
    el = int(i * rate)
    left = int((n - i) * rate)
    return (
        f"{desc}: {int(frac * 100):3d}%|{bar}| {i}/{n} [{el // 60:02d}:{el % 60:02d}<{left // 60:02d}:"
        f"{left % 60:02d}, {rate:5.2f}s/it]"
    )


def hard_wrap(line: str, width: int | None) -> list[str]:
    """``line`` cut every ``width`` characters, as a terminal that wraps at a fixed width writes it."""
    if not width or len(line) <= width:
        return [line]
    return [line[i : i + width] for i in range(0, len(line), width)]


ACTOR_CONFIG = {
    "ppo_epochs": "1",
    "ppo_mini_batch_size": "256",
    "ppo_micro_batch_size_per_gpu": "8",
    "use_kl_loss": "True",
    "kl_loss_coef": repr(KL_COEF),
    "entropy_coeff": "0",
    "loss_agg_mode": "'token-mean'",
    "nccl_timeout": "600",
    "strategy": "'fsdp'",
}
"""The actor settings the config dump shows (what the metrics of :mod:`.metrics` are plausible for)."""


def startup(rng: random.Random, *, driver: str, nodes: int, gpus: int, ansi: bool, total_steps: int) -> list[str]:
    """Lines before the first step: Ray start-up, the config dump, worker init, dataset sizes."""
    lines = [
        (
            f"2025-05-22 07:07:{rng.randint(10, 59)},{rng.randint(100, 999)}\tINFO worker.py:1879 -- Connecting to "
            f"existing Ray cluster at address: 10.0.0.1:6379..."
        ),
        f"{driver}TaskRunner hostname: node-0, PID: {rng.randint(1000, 99999)}",
        f"{driver}{{'actor_rollout_ref': {{'actor': {{'clip_ratio': 0.2,",
    ]
    for k, v in ACTOR_CONFIG.items():
        lines.append(f"{driver}                                 '{k}': {v},")
    lines.append(
        f"{driver} 'trainer': {{'logger': ['console', 'file'], 'nnodes': {nodes}, 'n_gpus_per_node': {gpus}, "
        f"'total_training_steps': {total_steps}}}}}"
    )
    for node in range(nodes):
        for g in range(min(gpus, 2)):
            w = ray("WorkerDict", 1600 + 10 * node + g, f"10.0.0.{node + 1}", ansi=ansi)
            lines.append(
                f'{w}Model config after override: Qwen2Config {{ "hidden_size": 3584, "num_hidden_layers": 28 }}'
            )
            lines.append(
                f"{w}/usr/local/lib/python3.11/site-packages/torch/distributed/fsdp/_init_utils.py:440: "
                f"UserWarning: FSDP is switching to use `NO_SHARD` instead of ShardingStrategy.FULL_SHARD"
            )
            lines.append(f"{w}  warnings.warn(")
    lines.append(f"{driver}Size of train dataloader: {STEPS_PER_EPOCH}, Size of val dataloader: 1")
    lines.append(f"{driver}Total training steps: {total_steps}")
    return lines


def step_noise(rng: random.Random, *, driver: str, nodes: int, ansi: bool, scale: float, step: int) -> list[str]:
    """Chatter between two metric lines: vLLM stats from workers, a rollout dump, Ray notes, warnings."""
    lines: list[str] = []
    for _ in range(max(0, round(rng.uniform(2, 6) * scale))):
        node = rng.randrange(nodes)
        w = ray("WorkerDict", 1600 + 10 * node + rng.randrange(8), f"10.0.0.{node + 1}", ansi=ansi)
        lines.append(
            f"{w}INFO 05-22 07:{rng.randint(10, 59)}:{rng.randint(10, 59)} [metrics.py:455] Avg prompt throughput: "
            f"{rng.uniform(100, 900):.1f} tokens/s, Avg generation throughput: {rng.uniform(800, 4000):.1f} "
            f"tokens/s, Running: {rng.randint(1, 64)} reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache "
            f"usage: {rng.uniform(1, 60):.1f}%, CPU KV cache usage: 0.0%."
            + (repeated(rng.randint(2, 15), ansi) if rng.random() < 0.3 else "")
        )
    if rng.random() < min(1.0, 0.7 * scale):
        w = ray("WorkerDict", 1600 + rng.randrange(8), "10.0.0.1", ansi=ansi)
        bars = "\r".join(tqdm_bar("Processed prompts", i, 64, 0.05) for i in (0, 16, 48, 64))
        lines.append(f"{w}{bars}")
    dumps = max(0, round(rng.uniform(0, 2) * scale))
    for _ in range(dumps):
        q = rng.randrange(len(QUESTIONS))
        lines.append(f"{driver}[prompt] system")
        lines.append(f"{driver}You are Qwen, created by Alibaba Cloud. You are a helpful assistant.")
        lines.append(f"{driver}user")
        lines.append(f"{driver}{QUESTIONS[q]}")
        lines.append(f"{driver}assistant")
        lines.extend(f"{driver}{'[response] ' if i == 0 else ''}{t}" for i, t in enumerate(RESPONSES[q].split("\n")))
        lines.append(f"{driver}[ground_truth] {rng.randint(1, 100)}")
        lines.append(f"{driver}[score] {rng.choice(['0.0', '1.0', '1.0'])}")
    if rng.random() < 0.05 * scale:
        lines.append(
            f"{ray('raylet', 0, ansi=ansi, color=ESC_YELLOW).replace(' pid=0', '')}[2025-05-22 07:42:36,213 E "
            f"2097714 2097744] file_system_monitor.cc:116: /tmp/ray/session_2025-05-22 is over 95% full, "
            f"available space: 1.2 GB; capacity: 98 GB. Object creation will fail if spilling is required."
        )
    if rng.random() < 0.05 * scale:
        lines.append(
            f"{driver}WARNING: step {step}: 3 samples exceeded max_response_length and were truncated (zoom "
            f"in on response_length/clip_ratio)"
        )
    return lines


def verl_ending(
    kind: str, rng: random.Random, *, driver: str, nodes: int, ansi: bool, worker: str | None = None
) -> list[str]:
    """The last lines of a job that ended with ``kind`` (``worker``: the failing rank's line prefix; default a
    Ray worker's)."""
    node = nodes - 1
    w = worker if worker is not None else ray("WorkerDict", 1600 + 10 * node + 3, f"10.0.0.{node + 1}", ansi=ansi)
    job = rng.randint(100000, 999999)
    tb_driver = [
        f"{driver}Traceback (most recent call last):",
        f'{driver}  File "/opt/verl/verl/trainer/main_ppo.py", line 64, in main',
        f"{driver}    run_ppo(config)",
    ]
    if kind == "ok":
        return [
            f"{driver}Final validation metrics: {{'val-core/openai/gsm8k/reward/mean@1': 0.87}}",
            "",
            "------------------------------------------",
            "Job 'raysubmit_T3JpUGHRiC9U18UE' succeeded",
            "------------------------------------------",
        ]
    if kind == "oom":
        return [
            f"{w}Traceback (most recent call last):",
            f'{w}  File "/opt/verl/verl/workers/actor/dp_actor.py", line 412, in update_policy',
            f"{w}    loss.backward()",
            (
                f"{w}torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.50 GiB. GPU 3 has a total capacity "
                f"of 79.11 GiB of which 2.06 GiB is free. Process 51224 has 77.04 GiB memory in use."
            ),
            *tb_driver,
            (
                "ray.exceptions.RayTaskError(OutOfMemoryError): ray::WorkerDict.actor_rollout_update_actor() "
                f"(pid=1633, ip=10.0.0.{node + 1})"
            ),
            '  File "/opt/verl/verl/single_controller/ray/base.py", line 705, in func',
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.50 GiB.",
            f"srun: error: node-{node}: task {node}: Exited with exit code 1",
        ]
    if kind == "nccl_timeout":
        return [
            (
                f"{w}[rank{8 * node + 3}]:[E522 09:12:44.123456 ProcessGroupNCCL.cpp:632] [Rank {8 * node + 3}] "
                f"Watchdog caught collective operation timeout: WorkNCCL(SeqNum=48211, OpType=ALLREDUCE, NumelIn=1, "
                f"NumelOut=1, Timeout(ms)=600000) ran for 600042 milliseconds before timing out."
            ),
            (
                f"{w}[rank{8 * node + 3}]:[E522 09:12:44.123999 ProcessGroupNCCL.cpp:2168] [PG ID 0 PG GUID 0(default_pg) "
                f"Rank {8 * node + 3}] Process group watchdog thread terminated with exception"
            ),
            f"srun: error: node-{node}: task {node}: Exited with exit code 134",
        ]
    if kind in ("time_limit", "preempted", "cancelled"):
        due = {"time_limit": " DUE TO TIME LIMIT", "preempted": " DUE TO PREEMPTION", "cancelled": ""}[kind]
        return [
            f"slurmstepd: error: *** JOB {job} ON node-0 CANCELLED AT 2025-05-22T09:10:11{due} ***",
            "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.",
            f"slurmstepd: error: *** STEP {job}.0 ON node-0 CANCELLED AT 2025-05-22T09:10:11{due} ***",
        ]
    if kind == "traceback":
        return [
            *tb_driver,
            f'{driver}  File "/opt/verl/verl/trainer/ppo/ray_trainer.py", line 1187, in fit',
            f"{driver}    reward_tensor = self.reward_fn(batch)",
            f"{driver}KeyError: 'ground_truth'",
        ]
    if kind == "exit_code":
        return [f"srun: error: node-{node}: task {node}: Exited with exit code 137"]
    raise ValueError(f"unknown ending {kind!r}")


def megatron_prefix(style: str, rank: int, node: int) -> str:
    """Launcher prefix of Megatron's printing rank."""
    return {"": "", "torchrun": f"[default{rank}]:", "srun": f"{rank}: ", "hostrank": f"[node-{node:04d}:{rank}]:"}[
        style
    ]


def megatron_noise(rng: random.Random, prefix: str, scale: float) -> list[str]:
    """Chatter between Megatron log intervals: NCCL INFO, timers, a memory report, a warning."""
    out = []
    if rng.random() < 0.3 * scale:
        out.append(
            f"{prefix}node-0001:{rng.randint(1000, 9999)}:{rng.randint(1000, 9999)} [0] NCCL INFO Connected all trees"
        )
    if rng.random() < 0.2 * scale:
        out += [
            f"{prefix}(min, max) time across ranks (ms):",
            (
                f"{prefix}    evaluate .......................................: ({rng.uniform(1000, 3000):.2f}, "
                f"{rng.uniform(3000, 4000):.2f})"
            ),
        ]
    if rng.random() < 0.1 * scale:
        out.append(
            f"{prefix}WARNING:megatron.core.rerun_state_machine:Setting RerunStateMachine mode RerunMode.DISABLED"
        )
    return out


# -- metric names of the generated verl logs ------------------------------------------------------------------
GRPO_KEYS = (
    "actor/entropy",
    "actor/pg_loss",
    "actor/pg_clipfrac",
    "actor/ppo_kl",
    "actor/pg_clipfrac_lower",
    "actor/kl_loss",
    "actor/kl_coef",
    "actor/grad_norm",
    "perf/mfu/actor",
    "perf/max_memory_allocated_gb",
    "perf/max_memory_reserved_gb",
    "perf/cpu_memory_used_gb",
    "actor/lr",
    "training/global_step",
    "training/epoch",
    "critic/score/mean",
    "critic/score/max",
    "critic/score/min",
    "critic/rewards/mean",
    "critic/rewards/max",
    "critic/rewards/min",
    "critic/advantages/mean",
    "critic/advantages/max",
    "critic/advantages/min",
    "critic/returns/mean",
    "critic/returns/max",
    "critic/returns/min",
    "response_length/mean",
    "response_length/max",
    "response_length/min",
    "response_length/clip_ratio",
    "prompt_length/mean",
    "prompt_length/max",
    "prompt_length/min",
    "prompt_length/clip_ratio",
    "timing_s/gen",
    "timing_s/reward",
    "timing_s/old_log_prob",
    "timing_s/ref",
    "timing_s/adv",
    "timing_s/update_actor",
    "timing_s/step",
    "timing_per_token_ms/gen",
    "timing_per_token_ms/update_actor",
    "perf/total_num_tokens",
    "perf/time_per_step",
    "perf/throughput",
)
PPO_EXTRA_KEYS = (
    "critic/vf_loss",
    "critic/vf_clipfrac",
    "critic/vpred_mean",
    "critic/grad_norm",
    "critic/lr",
    "critic/values/mean",
    "critic/values/max",
    "critic/values/min",
    "critic/vf_explained_var",
)
INT_KEYS = frozenset(
    {
        "training/global_step",
        "training/epoch",
        "perf/total_num_tokens",
        "train/global_tokens",
        "response_length/max",
        "response_length/min",
        "prompt_length/max",
        "prompt_length/min",
    }
)
NP_KEYS = frozenset(
    k for k in GRPO_KEYS + PPO_EXTRA_KEYS if k.startswith(("actor/", "critic/vf", "critic/grad", "perf/m"))
)
