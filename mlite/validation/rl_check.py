"""Hold ``rl_estimate`` against published verl runs: read the launch settings from verl's own start-up config dump
in the log, the logged ``perf/*`` memory metrics from its step lines, and put predicted next to logged.

What the logged metrics are (``update_actor`` in ``verl/workers/fsdp_workers.py`` / ``megatron_workers.py`` at
verl ``14667609``, the workers these runs used, removed in ``044bbba2``; on ``main``
``TrainingWorker._postprocess_output`` in ``verl/workers/engine_workers.py`` logs the same three):
``perf/max_memory_allocated_gb`` and ``perf/max_memory_reserved_gb`` are ``torch.cuda.max_memory_allocated()`` /
``max_memory_reserved()`` of rank 0's worker process, never reset, read right after the update; they see the
PyTorch allocator of that process only (the actor, a reference or critic fused into the same ``WorkerDict``, and a
rollout engine whose model runner lives in that process). ``perf/cpu_memory_used_gb`` is ``psutil.virtual_memory()
.used`` of the whole node (every process on it, page cache excluded).
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

from ..errors import MliteError
from ..memory.estimate import GIB
from ..memory.rl import rl_estimate
from ..memory.rl_keys import rollout_kwargs
from ..memory.rl_options import RolloutOptions
from ..options import TrainingOptions

_PREFIX = re.compile(r"^\((?:TaskRunner|main_task)[^)]*\)\s?")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_STEP = re.compile(r"step:\d+ - ")
ACTOR_PARTS = (
    "actor_params",
    "actor_resident",
    "actor_training_peak",
    "forward_activations",
    "ref_params",
    "sync_bucket",
    "gathered_tensor",
    "gather_copies",
)
"""Phase parts the actor process allocates through PyTorch (framework, NCCL and CUDA-graph memory are outside)."""


def verl_config_from_log(path) -> dict:
    """The config dict verl pretty-prints at start-up (``pprint(OmegaConf.to_container(config))``), read back."""
    lines = Path(path).read_text(errors="replace").splitlines()
    body = [_PREFIX.sub("", _ANSI.sub("", ln)) for ln in lines]
    start = next((i for i, ln in enumerate(body) if ln.lstrip().startswith("{'actor_rollout_ref'")), None)
    if start is None:
        raise MliteError(f"{path}: no verl config dump (a line starting {{'actor_rollout_ref') found")
    end = start + 1
    while end < len(body) and body[end].startswith(" ") and not _STEP.search(body[end]):
        end += 1
    try:
        return ast.literal_eval("\n".join(body[start:end]))
    except (SyntaxError, ValueError) as e:
        raise MliteError(f"{path}:{start + 1}: the config dump does not parse ({e.__class__.__name__})") from None


def training_from_verl(cfg: dict, gpu_memory_gib: float) -> TrainingOptions:
    """The actor's TrainingOptions for a verl FSDP actor: fp32 parameters and Adam state sharded over all GPUs
    (16 B/param), gradient checkpointing as full recompute, one micro-batch of ``ppo_max_token_len_per_gpu`` packed
    tokens with dynamic batch size, else ``ppo_micro_batch_size_per_gpu`` sequences of P + R."""
    actor = cfg["actor_rollout_ref"]["actor"]
    if actor.get("strategy") not in ("fsdp", "fsdp2"):
        raise MliteError(f"actor strategy {actor.get('strategy')!r}: only verl's FSDP actor is read here")
    fsdp = actor.get("fsdp_config", {})
    data = cfg["data"]
    model = cfg["actor_rollout_ref"].get("model", {})
    if actor.get("use_dynamic_bsz"):
        seq, mbs = int(actor["ppo_max_token_len_per_gpu"]), 1
    else:
        seq = int(data["max_prompt_length"]) + int(data["max_response_length"])
        mbs = int(actor.get("ppo_micro_batch_size_per_gpu") or 1)
    dtype = {"bf16": "bf16", "bfloat16": "bf16"}.get(str(fsdp.get("model_dtype", "fp32")), "fp32")
    return TrainingOptions(
        optimizer="fsdp2",
        param_dtype=dtype,
        seq_len=seq,
        micro_batch_size=mbs,
        num_microbatches=2,
        recompute="full" if model.get("enable_gradient_checkpointing") else "none",
        param_offload=bool(fsdp.get("param_offload")),
        optimizer_offload=bool(fsdp.get("optimizer_offload")),
        gpu_memory_gib=gpu_memory_gib,
        gpus_per_node=int(cfg["trainer"]["n_gpus_per_node"]),
    )


def logged_metrics(path) -> dict:
    """The first step's ``perf/*`` memory metrics of the log (mlite's own log reader)."""
    from ..logs import read_log

    wide = read_log(str(path)).wide
    keys = ("perf/max_memory_allocated_gb", "perf/max_memory_reserved_gb", "perf/cpu_memory_used_gb")
    row = wide.iloc[0]
    return {"step": int(wide.index[0]), **{k.split("/")[1]: float(row[k]) for k in keys}}


def predict(run: dict, root: Path):
    """``(RLEstimate, TrainingOptions, RolloutOptions, spec, plan)`` for one entry of ``runs.json``."""
    from ..mesh import ParallelConfig, resolve
    from ..models import from_hf_config

    cfg = verl_config_from_log(root / run["log"])
    o = training_from_verl(cfg, run["gpu_memory_gib"])
    kw = rollout_kwargs(cfg)
    for k in ("sleep_level", "max_model_len"):
        if k in run:
            kw[k] = run[k]
    for k in ("verl_version", "engine_placement"):  # the release / placement the run had (runs.json, sourced)
        if k in run:
            kw[k] = run[k]
    r = RolloutOptions(**kw)
    spec = from_hf_config(str(root / run["model"]))
    ngpu = int(cfg["trainer"]["nnodes"]) * int(cfg["trainer"]["n_gpus_per_node"])
    plan = resolve(spec, ngpu, ParallelConfig(), seq_len=o.seq_len, gpus_per_node=o.gpus_per_node)
    return rl_estimate(spec, plan, o, r), o, r, spec, plan


ENGINE_PARTS = ("engine_weights", "kv_cache", "engine_activations")
"""Engine parts allocated through PyTorch when its model runner lives in the actor's process."""


def torch_peaks(est, critic: float = 0.0) -> dict:
    """The actor process's PyTorch peak under the three ways the engine can show in it (bytes):

    - ``outside``: the engine runs in its own processes; only the actor's parts count.
    - ``torch_frees``: the engine is in the actor's process and frees its KV cache and weights through PyTorch when
      it sleeps: the peak is the largest phase, engine parts included where the engine is awake.
    - ``cumem``: vLLM >= 0.7 sleep mode in the actor's process: ``CuMemAllocator`` allocates through a torch
      ``MemPool`` and ``sleep`` unmaps the memory but keeps the tensors (``vllm/device_allocator/cumem.py``), so
      the engine's weights + KV stay counted through training: the actor's peak plus that pool.

    ``critic``: bytes a critic fused into the same process keeps resident (not modelled by rl_estimate)."""

    def part_sum(p, keys):
        return sum(v for k, v in p.gpu.items() if k in keys)

    actor = max(part_sum(p, ACTOR_PARTS) for n, p in est.phases.items() if n != "rollout") + critic
    frees = max(part_sum(p, ACTOR_PARTS + ENGINE_PARTS) for p in est.phases.values()) + critic
    rollout_actor = part_sum(est.phases["rollout"], ACTOR_PARTS) + critic
    pool = est.engine.weights + max(0.0, est.engine.kv)
    return {"outside": actor, "torch_frees": frees, "cumem": max(actor, rollout_actor) + pool}


def compare_runs(root) -> list[dict]:
    """One row per published run: logged metrics next to the predictions they can be held against (GiB)."""
    root = Path(root)
    runs = json.loads((root / "runs.json").read_text())["runs"]
    rows = []
    for run in runs:
        est, o, _r, spec, plan = predict(run, root)
        critic = 0.0
        if run.get("critic") == "same_as_actor":
            from ..memory.estimate import estimate

            critic = estimate(spec, plan, o, explain=False).worst.idle_gpu
        peaks = {k: v / GIB for k, v in torch_peaks(est, critic).items()}
        rows.append(
            {
                "run": run["id"],
                "logged": logged_metrics(root / run["log"]),
                "accounting": run["engine_accounting"],
                "predicted": {
                    **peaks,
                    "applies": peaks[run["engine_accounting"]],
                    "rollout_gpu": est.phases["rollout"].gpu_total / GIB,
                    "peak_phase": est.peak_phase,
                    "host_per_node": est.host_per_node / GIB,
                    "kv_tokens": est.kv_cache()["tokens"],
                },
                "gpu_memory_gib": run["gpu_memory_gib"],
                "not_modelled": run["not_modelled"],
                "metrics": metrics_row(est, critic),
            }
        )
    return rows


def metrics_row(est, critic: float = 0.0) -> dict:
    """The run's :func:`~mlite.memory.rl_metrics.predicted_metrics` under the verl release and engine placement it
    had (GiB), ``critic`` (a fused critic's resident bytes, not modelled by rl_estimate) added to the two GPU
    metrics, with the release and placement."""
    from ..memory.rl_metrics import ALLOCATED, RESERVED, assumed, predicted_metrics

    a = assumed(est)
    pm = {k: v + (critic if k in (ALLOCATED, RESERVED) else 0.0) for k, v in predicted_metrics(est).items()}
    return {
        "verl_version": a["verl_version"],
        "placement": a["placement"],
        "predicted": {k.split("/")[1]: v / GIB for k, v in pm.items()},
    }


def metrics_table(rows: list[dict]) -> str:
    """The README table of logged ``perf/*`` metrics next to ``predicted_metrics`` (GiB) under each run's release and
    placement (:func:`compare_runs` rows)."""
    out = [
        (
            "| run | verl | engine placement | logged max_allocated | predicted_metrics max_allocated | error | "
            "logged max_reserved | predicted max_reserved | logged cpu_used (node) | predicted cpu_used |"
        ),
        "|" + "---|" * 10,
    ]
    for row in rows:
        lg, m = row["logged"], row["metrics"]
        pr = m["predicted"]
        err = (pr["max_memory_allocated_gb"] - lg["max_memory_allocated_gb"]) / lg["max_memory_allocated_gb"]
        out.append(
            f"| {row['run']} | {m['verl_version']} | {m['placement']} | {lg['max_memory_allocated_gb']:.1f} | "
            f"{pr['max_memory_allocated_gb']:.1f} | {err:+.0%} | {lg['max_memory_reserved_gb']:.1f} | "
            f"{pr['max_memory_reserved_gb']:.1f} | {lg['cpu_memory_used_gb']:.1f} | {pr['cpu_memory_used_gb']:.1f} |"
        )
    return "\n".join(out)


def markdown_table(rows: list[dict]) -> str:
    """The README table of :func:`compare_runs` rows (GiB; the logged figures are verl's "GB", i.e. GiB)."""
    out = [
        (
            "| run | device (GiB) | logged max_allocated | predicted: engine outside torch | engine frees via torch "
            "| CuMem pool kept | which applies | error | logged max_reserved | predicted rollout phase (device) | "
            "logged cpu_used (node) | predicted host per node |"
        ),
        "|" + "---|" * 12,
    ]
    for row in rows:
        lg, pr = row["logged"], row["predicted"]
        err = (pr["applies"] - lg["max_memory_allocated_gb"]) / lg["max_memory_allocated_gb"]
        out.append(
            f"| {row['run']} | {row['gpu_memory_gib']:g} | {lg['max_memory_allocated_gb']:.1f} | "
            f"{pr['outside']:.1f} | {pr['torch_frees']:.1f} | {pr['cumem']:.1f} | {row['accounting']} | "
            f"{err:+.0%} | {lg['max_memory_reserved_gb']:.1f} | {pr['rollout_gpu']:.1f} | "
            f"{lg['cpu_memory_used_gb']:.1f} | {pr['host_per_node']:.1f} |"
        )
    return "\n".join(out)
