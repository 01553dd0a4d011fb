"""Predicted vs measured step time of the lite runtime on one GPU (issue 25), after calibrating on the same machine.

    python3 bench/step_time.py --out DIR                     # on the GPU: DIR/step_time_raw.json (after every row)
    python3 bench/step_time.py --report bench/results/step_time_raw.json --csv bench/results/step_time.csv
    python3 bench/step_time.py --out /tmp/x --device cpu --tiny   # the same code paths on CPU, tiny models
    bash bench/step_time_device.sh                           # the device call (calibrate, measure, report)

Measuring: first ``mlite.time.calibrate.calibrate(device, spec=...)`` (what ``mlite calibrate`` runs) once with the
dense model's spec and once with the MoE's; the profiles and the calibration's wall time go into the raw JSON. Then
each configuration of :data:`CONFIGS` (the ~1.1 B dense ``DENSE_1B`` and the ~0.7 B MoE ``MOE_SMALL`` of
bench/gpu_configs.py, 4096 tokens per micro-batch, one GPU): the runtime is built once from the configuration's
``RunConfig`` (``mlite run``'s config: :meth:`~mlite.launch.RunConfig.runtime_config` is what ran), 2 warm-up steps,
then :data:`TIMED_STEPS` optimizer steps (``forward_backward`` over the micro-batches + ``optimizer_step`` +
``zero_grad``, synchronised after each), each step's time and its phase split (CUDA events between the phases, no
extra sync), ``torch.cuda.max_memory_allocated``, what the built runtime reports (optimizer class, backend, state
modes, offloaded share, recompute mode, gradient dtype), then ONE more step under ``torch.profiler`` summarised into
kernel-time categories (:data:`CATEGORIES`) and the top kernels. GPU memory is freed between configurations; a
failing configuration is recorded and the next one runs; configurations that would start after ``--deadline-s`` are
recorded as skipped.

Reporting (no GPU): :func:`plan_of` maps a measured row to the estimator's inputs from the same ``RunConfig``
(:meth:`~mlite.launch.RunConfig.training_options`: the lite activation model, fused cross entropy, one GPU per node)
and ``mlite.time.predict`` gives the step time with the calibrated profile of the row's model; the CSV
(:data:`COLUMNS`) holds measured median / min / max, predicted, their ratio, whether it is within 15 %, and the
three largest predicted parts. Rows outside 15 % are reported, not failed: the ratio is the target.

Configurations the runtime refuses are not measured under another name: update-state offload runs with ``fsdp2`` only
(``mlite.options.rules.state_on_device``), so the offload rows are fsdp2; PAO rows are ``dist_opt`` (Megatron-Core's
precision-aware optimizer is the distributed optimizer's) with bf16 main grads.
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import statistics
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_configs import DENSE_1B, MOE_SMALL
from gpu_speed import TINY_DENSE, TINY_MOE, Env, _batches, _paths
from result_csv import write_measurements

RAW = "step_time_raw.json"
"""The raw JSON's file name in ``--out``."""
REPORT_CMD = "python3 bench/step_time.py --report bench/results/step_time_raw.json --csv bench/results/step_time.csv"
"""The step that turns the raw JSON into the CSV (tests/test_bench_results.py re-runs it)."""
COLUMNS = (
    "configuration",
    "measured_step_s",
    "measured_min_s",
    "measured_max_s",
    "predicted_step_s",
    "ratio",
    "within_15pct",
    "predicted_part_1",
    "predicted_part_2",
    "predicted_part_3",
    "gpu",
    "torch_version",
    "command",
)
"""The CSV contract of bench/results/step_time.csv (``ratio`` = predicted / measured median; a part is
``NAME SECONDS``)."""
TOLERANCE = 0.15
"""The acceptance band of the ratio (issue 25)."""
TIMED_STEPS = 5
"""Timed optimizer steps per configuration (fewer only when they would take more than :data:`TIMED_BUDGET_S`)."""
MIN_TIMED_STEPS = 3
"""The fewest timed steps of a slow configuration (the update-offload rows)."""
TIMED_BUDGET_S = 20.0
"""Seconds the timed steps of one configuration may take (read from the last warm-up step)."""
TOP_KERNELS = 15
"""Kernels listed by total time in each profile summary."""


@dataclass(frozen=True)
class StepConfig:
    """One measured configuration: the model and the ``mlite run`` options (RunConfig's flat names) it runs with."""

    model: str
    """``dense`` (DENSE_1B) or ``moe`` (MOE_SMALL); with ``--tiny`` their CPU-sized layouts."""
    options: dict = field(default_factory=dict)
    """RunConfig flat options beyond :func:`common_options`: ``num_microbatches``, ``optimizer``, ``pao``,
    ``grad_dtype``, ``offload_fraction``, ``recompute``."""


PAO = {"optimizer": "dist_opt", "pao": True, "grad_dtype": "bf16"}
"""Megatron-Core's distributed optimizer with the precision-aware optimizer and bf16 main grads."""
CONFIGS: dict[str, StepConfig] = {
    "dense_mb1": StepConfig("dense", {"num_microbatches": 1}),
    "moe_mb1": StepConfig("moe", {"num_microbatches": 1}),
    "dense_mb4": StepConfig("dense", {"num_microbatches": 4}),
    "moe_mb4": StepConfig("moe", {"num_microbatches": 4}),
    "dense_mb1_full": StepConfig("dense", {"num_microbatches": 1, "recompute": "full"}),
    "moe_mb1_full": StepConfig("moe", {"num_microbatches": 1, "recompute": "full"}),
    "dense_mb1_pao": StepConfig("dense", {"num_microbatches": 1, **PAO}),
    "moe_mb1_pao": StepConfig("moe", {"num_microbatches": 1, **PAO}),
    "dense_mb1_selective": StepConfig("dense", {"num_microbatches": 1, "recompute": "selective"}),
    "dense_mb4_dist_opt": StepConfig("dense", {"num_microbatches": 4, "optimizer": "dist_opt"}),
    "dense_mb1_offload0.5": StepConfig("dense", {"num_microbatches": 1, "offload_fraction": 0.5}),
    "dense_mb1_offload1.0": StepConfig("dense", {"num_microbatches": 1, "offload_fraction": 1.0}),
}
"""The measured configurations by CSV row key (keep the names stable); fsdp2, fp32 master, no recompute unless
named. They run (and are listed) in this order: both models early, the slow update-offload rows last, so that a
deadline cuts the least."""

CATEGORIES = (
    ("optimizer", r"adam|multi_tensor|foreach|lpnorm|clip_scale"),
    ("communication", r"nccl|all_?reduce|all_?gather|reduce_?scatter|c10d"),
    ("attention", r"flash|fmha|attention|sdpa|scaled_dot_product|mha|cudnn::fusion"),
    ("grouped_gemm", r"group|_grouped_mm"),
    ("gemm", r"gemm|cutlass|cublas|xmma|nvjet|matmul|aten::(mm|addmm|bmm|linear)$"),
    ("loss_softmax", r"cross_entropy|softmax|nll_loss|logsumexp"),
    ("copy_memcpy", r"memcpy|memset|copy|chunk_cat|aten::(to|_to_copy|cat|clone|contiguous)$"),
    (
        "elementwise_norm",
        r"elementwise|vectorized|unrolled|rms|norm|GammaBeta|reduce|silu|triton|index|gather|scatter|aten::",
    ),
)
"""Kernel-time categories, first match wins (case-insensitive search in the kernel or, on CPU, the op name);
anything else is ``other``. Names seen on the H200 (torch 2.11): cuBLAS ``nvjet_sm90_*`` GEMMs, cuDNN
``*_sdpa_sm90_flash_*prop*`` and ``cudnn::fusion::*`` attention, cutlass ``GroupProblemShape`` grouped GEMMs,
``adamw_multi_kernel`` (the runtime's fused update), ``multi_tensor_apply_kernel`` (the gradient norm), FSDP2's
``chunk_cat`` and ``Memcpy DtoD`` copies, ``GammaBetaBackward`` (norm weight gradients)."""


def common_options(tiny: bool) -> dict:
    """The RunConfig options every configuration shares: one process, bf16 parameters, 4096-token micro-batches (256
    with ``tiny``), Megatron's AdamW settings of the runtime without warmup."""
    return {
        "nproc": 1,
        "tokens_per_microbatch": 256 if tiny else 4096,
        "param_dtype": "bf16",
        "lr": 1e-4,
        "lr_warmup_steps": 0,
        "clip_grad": 1.0,
        "steps": 1000,
    }


def hf_config(model: str, tiny: bool) -> dict:
    """The Hugging Face config dict of ``model`` (``dense`` / ``moe``)."""
    return {"dense": (TINY_DENSE, DENSE_1B), "moe": (TINY_MOE, MOE_SMALL)}[model][0 if tiny else 1]


def config_row(name: str, device: str, tiny: bool) -> dict:
    """The raw JSON's description of configuration ``name``: what :func:`run_config` and :func:`plan_of` read."""
    c = CONFIGS[name]
    return {
        "configuration": name,
        "model": c.model,
        "hf_config": hf_config(c.model, tiny),
        "run": {**common_options(tiny), "device": device, **c.options},
    }


def model_spec(cfg: dict, name: str):
    """The ModelSpec of a Hugging Face config dict (what the runtime builds from the same dict)."""
    from mlite.models import from_hf_config

    return from_hf_config(cfg, name=name)


def run_config(row: dict, folder: Path):
    """The ``RunConfig`` of a configuration row (its model config written to ``folder/<model>.json``, which the
    runtime reads when it builds the model)."""
    from mlite.launch import RunConfig

    path = Path(folder) / f"{row['model']}.json"
    path.write_text(json.dumps(row["hf_config"]))
    return RunConfig(model=str(path), **row["run"])


def plan_of(row: dict):
    """``(spec, plan, training)``: the estimator's inputs for a configuration row exactly as the runtime ran it (the
    row's RunConfig: :meth:`~mlite.launch.RunConfig.training_options`, its mesh on one GPU)."""
    from mlite.mesh import resolve

    with tempfile.TemporaryDirectory() as d:
        run = run_config(row, Path(d))
        training = run.training_options()
    spec = model_spec(row["hf_config"], row["model"])
    plan = resolve(spec, 1, run.parallel_config(), seq_len=training.seq_len, gpus_per_node=training.gpus_per_node)
    return spec, plan, training


# ---------------------------------------------------------------------------------------------------- measuring
def runtime_facts(rt, h) -> dict:
    """What the built runtime runs: its optimizer class and backend, the options its optimizer read, the state modes
    and the share of parameters whose state is offloaded (whole tensors), the model's recompute mode and the
    gradient buffer's dtype (dist_opt; None where gradients stay in the parameter dtype), the attention and expert
    paths the build chose."""
    from mlite.runtime.optim.optimizer import local

    o = h.optimizer
    n = sum(local(s.param).numel() for s in o.slots)
    off = sum(local(s.param).numel() for s in o.slots if s.offload)
    grads = str(rt.ddp.buffers[0].grad_data.dtype).removeprefix("torch.") if rt.ddp is not None else None
    return {
        "optimizer_class": type(o).__name__,
        "backend": rt.backend.name,
        "pao": o.cfg.pao,
        "offload_fraction": o.cfg.fraction,
        "offloaded_share": off / n if n else 0.0,
        "state_modes": sorted({s.mode for s in o.slots}),
        "exp_avg_dtype": o.cfg.exp_avg_dtype,
        "exp_avg_sq_dtype": o.cfg.exp_avg_sq_dtype,
        "main_grads_dtype": {"bfloat16": "bf16", "float32": "fp32"}.get(grads, grads) if grads else None,
        "recompute": h.model.config.recompute,
        "param_dtype": str(rt.param_dtype).removeprefix("torch."),
        "params": n,
        "paths": _paths(h),
    }


class StepClock:
    """Per-step wall time (synchronised at each step's end) and the phase split: CUDA events between the phases on a
    GPU (no sync in the middle of a step), host clock on CPU."""

    def __init__(self, env):
        self.env = env
        self.cuda = env.device == "cuda"

    def step(self, fb, opt) -> tuple[float, float, float]:
        """Run ``fb(); opt()`` once: ``(step_s, forward_backward_s, optimizer_s)``."""
        import torch

        t0 = time.perf_counter()
        if self.cuda:
            ev = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
            ev[0].record()
            fb()
            ev[1].record()
            opt()
            ev[2].record()
            torch.cuda.synchronize()
            return time.perf_counter() - t0, ev[0].elapsed_time(ev[1]) / 1e3, ev[1].elapsed_time(ev[2]) / 1e3
        fb()
        t1 = time.perf_counter()
        opt()
        t2 = time.perf_counter()
        return t2 - t0, t1 - t0, t2 - t1


def timed_steps(env, fb, opt, warm: int, iters: int) -> dict:
    """``warm`` warm-up steps, then ``iters`` timed steps (fewer, at least :data:`MIN_TIMED_STEPS`, when the last
    warm-up step says they would take more than :data:`TIMED_BUDGET_S`)."""
    clock = StepClock(env)
    last = 0.0
    for _ in range(warm):
        last = clock.step(fb, opt)[0]
    if last * iters > TIMED_BUDGET_S:
        iters = max(MIN_TIMED_STEPS, int(TIMED_BUDGET_S // last))
    env.reset_peak()
    steps = [clock.step(fb, opt) for _ in range(iters)]
    wall = [s[0] for s in steps]
    phases = {"forward_backward": [s[1] for s in steps], "optimizer": [s[2] for s in steps]}
    return {
        "warmup_steps": warm,
        "timed_steps": iters,
        "steps_s": wall,
        "median_s": statistics.median(wall),
        "min_s": min(wall),
        "max_s": max(wall),
        "phase_s": phases,
        "phase_median_s": {k: statistics.median(v) for k, v in phases.items()},
        "peak_bytes": env.peak(),
    }


def category(name: str) -> str:
    """The :data:`CATEGORIES` entry a kernel (or CPU op) name falls into."""
    for cat, pattern in CATEGORIES:
        if re.search(pattern, name, re.IGNORECASE):
            return cat
    return "other"


def profile_step(env, fb, opt) -> dict:
    """One step under ``torch.profiler`` (CUDA activity on a GPU, CPU activity on CPU): total kernel time by
    :data:`CATEGORIES` and the :data:`TOP_KERNELS` kernels with their total time and count (seconds)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    cuda = env.device == "cuda"
    t = time.perf_counter()
    with profile(activities=[ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU]) as prof:
        fb()
        opt()
        env.sync()
    wall = time.perf_counter() - t
    kernels = []
    for e in prof.key_averages():
        if cuda and e.device_type == DeviceType.CUDA:
            kernels.append((e.key, e.device_time_total / 1e6, e.count))
        elif not cuda and e.device_type == DeviceType.CPU:
            kernels.append((e.key, e.self_cpu_time_total / 1e6, e.count))
    cats: dict[str, float] = {}
    for name, s, _ in kernels:
        cats[category(name)] = cats.get(category(name), 0.0) + s
    kernels.sort(key=lambda k: -k[1])
    return {
        "activity": "cuda" if cuda else "cpu",
        "step_wall_s": wall,
        "kernel_total_s": sum(k[1] for k in kernels),
        "categories_s": dict(sorted(cats.items(), key=lambda kv: -kv[1])),
        "top": [{"name": n[:240], "s": s, "count": c, "category": category(n)} for n, s, c in kernels[:TOP_KERNELS]],
        "distinct_kernels": len(kernels),
        "kernel_launches": sum(k[2] for k in kernels),
    }


def measure_one(env, row: dict, folder: Path) -> None:
    """Build the row's runtime, time it, record what it runs, profile one step (results into ``row``)."""
    from mlite.runtime.runtime import create_runtime

    run = run_config(row, folder)
    rt = create_runtime(run.runtime_config())
    h = rt.build_model()
    n_mb = run.num_microbatches
    mbs = _batches(env, n_mb, row["hf_config"]["vocab_size"])
    row["tokens_per_step"] = sum(int(b.input_ids.numel()) for b in mbs)

    def fb():
        rt.forward_backward(h, mbs, num_microbatches=n_mb)

    def opt():
        rt.optimizer_step(h)
        rt.zero_grad(h)

    row.update(timed_steps(env, fb, opt, env.warm, env.iters))
    row["runtime"] = runtime_facts(rt, h)
    _save(env, env.res)  # the timing is kept even if the profiled step fails
    try:
        row["profile"] = profile_step(env, fb, opt)
    except RuntimeError as e:  # a profiler without CUPTI: the timing above stands
        row["profile"] = {"error": f"{type(e).__name__}: {e}"[:500]}
    # the runtime and its batches go with this frame; the caller frees the device cache


def _attempt(rec: dict, fn, *args) -> None:
    """Run ``fn(*args)``; a failure of the configuration itself (a CUDA error or out-of-memory, a refused option) is
    recorded in ``rec['error']`` (with the traceback printed) and the run goes on: one failing configuration must not
    lose the others in a single device call. Programming errors (TypeError, KeyError, ...) still stop the bench."""
    from mlite.errors import MliteError

    try:
        fn(*args)
    except (RuntimeError, MliteError, ValueError) as e:  # torch.OutOfMemoryError is a RuntimeError
        traceback.print_exc()
        rec["error"] = f"{type(e).__name__}: {e}"[:800]


def calibrate_profiles(env, models: list[str], quick: bool) -> None:
    """``calibrate(device, spec=<model's spec>)`` for each model; profiles and wall times into the raw JSON."""
    from mlite.time.calibrate import calibrate  # alone: ruff sorts a module not yet on this branch elsewhere

    cal = env.res["calibration"]
    for m in models:
        t = time.perf_counter()
        prof = calibrate(env.device, spec=model_spec(hf_config(m, env.tiny), m), quick=quick)
        cal["profiles"][m] = prof.to_dict()
        cal["wall_s"][m] = time.perf_counter() - t
        print(f"== calibrate {m} ({cal['wall_s'][m]:.1f} s): {prof.name}", flush=True)
        _save(env, env.res)


def _save(env, res: dict) -> None:
    out = Path(env.out)
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / (RAW + ".tmp")
    tmp.write_text(json.dumps(res, indent=1, default=str))
    tmp.replace(out / RAW)


def measure(a) -> int:
    import torch

    names = [n.strip() for n in a.only.split(",") if n.strip()] if a.only else list(CONFIGS)
    unknown = [n for n in names if n not in CONFIGS]
    if unknown:
        print(f"--only: unknown configuration {unknown[0]!r}; choose from {', '.join(CONFIGS)}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    env = Env(a.device, a.tiny)
    env.out = a.out
    env.warm, env.iters = (1, 2) if a.tiny else (2, TIMED_STEPS)
    env.res = res = {
        "gpu": torch.cuda.get_device_name() if a.device == "cuda" else "cpu",
        "torch_version": torch.__version__,
        "command": "python3 bench/step_time.py " + " ".join(sys.argv[1:]),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": a.device,
        "tiny": a.tiny,
        "calibration": {"profiles": {}, "wall_s": {}, "quick": a.tiny},
        "configurations": [],
    }
    models = sorted({CONFIGS[n].model for n in names})
    _attempt(res["calibration"], calibrate_profiles, env, models, a.tiny)
    env.free()
    with tempfile.TemporaryDirectory() as folder:
        for name in names:
            row = config_row(name, a.device, a.tiny)
            res["configurations"].append(row)
            if time.perf_counter() - t0 > a.deadline_s:
                row["skipped"] = f"deadline: {a.deadline_s} s passed before it started"
                continue
            t = time.perf_counter()
            _attempt(row, measure_one, env, row, Path(folder))
            env.free()
            row["wall_s"] = time.perf_counter() - t
            _save(env, res)
            got = f"median {row['median_s'] * 1e3:.1f} ms" if "median_s" in row else row.get("error", "")
            print(f"== {name} ({row['wall_s']:.1f} s): {got}", flush=True)
    res["wall_s"] = time.perf_counter() - t0
    _save(env, res)
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()
    return 0


# ---------------------------------------------------------------------------------------------------- reporting
def hardware_of(raw: dict, model: str, where: str):
    """The calibrated profile of ``model`` in the raw JSON (checked by ``profile_from_dict``)."""
    from mlite.errors import MliteError
    from mlite.time.hardware import profile_from_dict

    profiles = raw.get("calibration", {}).get("profiles", {})
    if model not in profiles:
        why = raw.get("calibration", {}).get("error", "not in the raw JSON")
        raise MliteError(f"{where}: no calibrated profile for {model} ({why}); measure again with bench/step_time.py")
    return profile_from_dict(profiles[model], f"{where} calibration.profiles.{model}")


def _sig(seconds: float) -> float:
    """Seconds to 5 significant digits (the CSV's precision)."""
    return float(f"{seconds:.5g}")


def rows(raw: dict, where: str = "raw JSON") -> list[dict]:
    """One CSV row (:data:`COLUMNS` without gpu, torch_version, command) per measured configuration."""
    from mlite.time import predict

    out = []
    for row in raw["configurations"]:
        if "median_s" not in row:
            continue
        spec, plan, training = plan_of(row)
        st = predict(spec, plan, training, hardware=hardware_of(raw, row["model"], where))
        ratio = st.step_s / row["median_s"]
        parts = sorted(st.parts.items(), key=lambda kv: -kv[1])[:3]
        r = {
            "configuration": row["configuration"],
            "measured_step_s": _sig(row["median_s"]),
            "measured_min_s": _sig(row["min_s"]),
            "measured_max_s": _sig(row["max_s"]),
            "predicted_step_s": _sig(st.step_s),
            "ratio": float(f"{ratio:.4g}"),
            "within_15pct": "yes" if abs(ratio - 1) <= TOLERANCE else "no",
        }
        for i in range(3):
            r[f"predicted_part_{i + 1}"] = f"{parts[i][0]} {_sig(parts[i][1])}" if i < len(parts) else ""
        out.append(r)
    return out


def report(a) -> int:
    raw = json.loads(Path(a.report).read_text())
    rs = rows(raw, a.report)
    if a.csv:
        write_measurements(raw, rs, Path(a.csv), REPORT_CMD, columns=COLUMNS)
    print(f"{'configuration':24s} {'measured':>9s} {'predicted':>9s} {'ratio':>6s}  within 15 %  largest parts")
    for r in rs:
        parts = ", ".join(r[f"predicted_part_{i}"] for i in (1, 2, 3) if r[f"predicted_part_{i}"])
        print(
            f"{r['configuration']:24s} {r['measured_step_s']:9.4f} {r['predicted_step_s']:9.4f} {r['ratio']:6.3f}"
            f"  {r['within_15pct']:11s}  {parts}"
        )
    missing = [c["configuration"] for c in raw["configurations"] if "median_s" not in c]
    if missing:
        print(f"not measured: {', '.join(missing)}")
    n = sum(r["within_15pct"] == "yes" for r in rs)
    print(f"{n} of {len(rs)} configurations within {TOLERANCE:.0%}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help=f"measure and write {RAW} into this folder")
    ap.add_argument("--report", default=None, help="write the CSV from a raw JSON (no GPU needed)")
    ap.add_argument("--csv", default=None, help="the CSV --report writes")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--tiny", action="store_true", help="tiny models, 1 warm-up and 2 timed steps (CPU smoke)")
    ap.add_argument("--only", default="", help=f"comma-separated configurations, in this order ({', '.join(CONFIGS)})")
    ap.add_argument("--deadline-s", type=float, default=400.0, help="skip configurations that would start after this")
    a = ap.parse_args()
    if bool(a.out) == bool(a.report):
        ap.error("give --out DIR (measure) or --report RAW.json (write the CSV)")
    from mlite.errors import MliteError

    try:
        return report(a) if a.report else measure(a)
    except MliteError as e:
        print(f"step_time: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
