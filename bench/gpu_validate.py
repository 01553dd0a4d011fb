"""Estimated vs measured memory of the lite runtime on a GPU (``bench/results/gpu_memory.csv``).

Two steps, so the estimate can be re-derived on any machine from the committed measurements:

    # on the GPU (one process, world size 1, nccl): writes the raw measurements
    python3 bench/gpu_validate.py measure --out bench/results/gpu_memory_raw.json
    # anywhere: the estimator's predictions next to the measurements
    .venv/bin/python bench/gpu_validate.py report bench/results/gpu_memory_raw.json --csv bench/results/gpu_memory.csv

Per configuration (``bench/gpu_configs.py``), ``measure`` builds the runtime, runs three optimizer steps (the first
allocates the optimizer state lazily) and records, for the steady-state steps: ``memory_allocated()`` right after
``optimizer_step`` (static: parameter shards, gradient shards, optimizer state), ``max_memory_allocated()`` of the
step (peak), and the phase peaks (forward+backward, optimizer step); the runtime's own tally (``memory_stats``); and
the bytes autograd saves per decoder block, probed on a 2-block copy of the model without FSDP
(:func:`mlite.runtime.saved.saved_activation_bytes`). Allocations that outlive a configuration (cuBLAS workspace)
are made before the first one and subtracted.

One new row on the GPU, kept next to the committed ones (``--merge`` replaces only the rows it measures, each row
keeps the GPU and torch it ran on), with a deadline; and the same command as a CPU smoke at tiny shapes::

    timeout 900 python3 bench/gpu_validate.py measure --only dense1b_distopt_pao_bf16grads_s4096 --merge \
        --deadline-s 600 --out bench/results/gpu_memory_raw.json && \
        python3 bench/gpu_validate.py report bench/results/gpu_memory_raw.json --csv bench/results/gpu_memory.csv
    python3 bench/gpu_validate.py measure --device cpu --shrink --only dense1b_distopt_pao_bf16grads_s4096 \
        --out /tmp/gpu_memory_smoke.json && python3 bench/gpu_validate.py report /tmp/gpu_memory_smoke.json
"""

from __future__ import annotations

import argparse
import csv
import gc
import json
import os
import sys
import time
import traceback
from contextlib import nullcontext
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_configs import MEMORY_CONFIGS, MODELS

from mlite.units import GIB

MEASURE_CMD = "python3 bench/gpu_validate.py measure --out bench/results/gpu_memory_raw.json"
REPORT_CMD = "python3 bench/gpu_validate.py report bench/results/gpu_memory_raw.json --csv bench/results/gpu_memory.csv"


def _batch(lengths, vocab, seed):
    import torch

    from mlite.runtime.batch import PackedBatch

    g = torch.Generator().manual_seed(seed)
    return PackedBatch.from_sequences([torch.randint(0, vocab, (n,), generator=g).tolist() for n in lengths])


def _probe_saved(model_cfg, lengths, recompute, device):
    """Saved-tensor bytes per block on a copy of the model cut to its first layers of each kind (no FSDP)."""
    import torch

    from mlite.runtime.models import build_lite_model
    from mlite.runtime.saved import saved_activation_bytes

    cfg = dict(model_cfg)
    n = 4 if "layer_types" in cfg else 2
    cfg["num_hidden_layers"] = n
    if "layer_types" in cfg:
        cfg["layer_types"] = cfg["layer_types"][:n]
    model = build_lite_model(cfg, param_dtype=torch.bfloat16, device=device, recompute=recompute)
    out = saved_activation_bytes(model, _batch(lengths, cfg["vocab_size"], 0).to(device))
    out["kinds"] = [f"{b.attention_kind}+{b.mlp_kind}" for b in model.blocks]
    del model
    return out


def measure_one(name, model, opt, lengths, n_mb, recompute, runtime_offload, device, steps=3):
    import torch

    from mlite.runtime.config import MegatronLiteConfig, OptimizerConfig, RuntimeConfig
    from mlite.runtime.runtime import create_runtime

    cuda = device == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    alloc = (lambda: torch.cuda.memory_allocated()) if cuda else (lambda: 0)
    peak = (lambda: torch.cuda.max_memory_allocated()) if cuda else (lambda: 0)
    reset = torch.cuda.reset_peak_memory_stats if cuda else (lambda: None)
    sync()
    base = alloc()
    cfg = RuntimeConfig(
        hf_path=MODELS[model],
        device=device,
        param_dtype="bf16",
        backend_cfg=MegatronLiteConfig(optimizer=OptimizerConfig(lr=1e-4, **opt), impl_cfg={"recompute": recompute}),
    )
    t0 = time.perf_counter()
    rt = create_runtime(cfg)
    h = rt.build_model()
    sync()
    rec = {
        "config": name,
        "model": model,
        "model_config": MODELS[model],
        "optimizer_options": opt,
        "seq_lens": list(lengths),
        "num_microbatches": n_mb,
        "recompute": recompute,
        "runtime_offload": runtime_offload,
        "build_s": round(time.perf_counter() - t0, 2),
        "allocated_after_build": alloc() - base,
        "steps": [],
    }
    vocab = h.spec.vocab_size
    from mlite.launch.worker import MemoryProbe  # CPU: the tensor peak of step 2 under MemTracker, as mlite run

    probe = None if cuda else MemoryProbe(torch.device("cpu"), steps)
    for k in range(steps):
        mbs = [_batch(lengths, vocab, 100 * k + j) for j in range(n_mb)]
        sync()
        reset()
        t = time.perf_counter()
        with probe.track(k + 1, h) if probe is not None else nullcontext():
            m = rt.forward_backward(h, mbs, num_microbatches=n_mb)
            sync()
            fb_peak, after_fb = peak() - base, alloc() - base
            reset()
            ok, norm, _zeros = rt.optimizer_step(h)
            sync()
        step = {
            "step": k,
            "loss": float(m["loss"]),
            "grad_norm": float(norm),
            "ok": bool(ok),
            "fb_peak": fb_peak,
            "after_fb": after_fb,
            "opt_peak": peak() - base,
            "static": alloc() - base,
            "time_s": round(time.perf_counter() - t, 4),
        }
        step["peak"] = max(step["fb_peak"], step["opt_peak"])
        stats = rt.memory_stats(h)
        step["tally"] = {key: stats[key]["bytes"] for key in ("params", "grads")}
        step["tally"].update(
            {key: stats[key]["bytes"] for key in ("master", "remainder", "exp_avg", "exp_avg_sq") if key in stats}
        )
        step["tally"].update(
            {key: stats[key] for key in ("param_buffer_padding", "grad_buffer_padding") if key in stats}
        )
        if probe is not None:  # CPU smoke: the tally is the static figure, MemTracker's peak (step 2) the peak
            step["static"] = sum(step["tally"].values())
            step["peak"] = step["fb_peak"] = step["opt_peak"] = probe.tracked_peak or step["static"]
        rt.zero_grad(h)
        sync()
        step["after_zero_grad"] = alloc() - base
        if runtime_offload and k == steps - 1:
            t = time.perf_counter()
            rt.to(h, "cpu", model=True, optimizer=True, grad=True)
            sync()
            step["idle_gpu"] = alloc() - base
            step["offload_s"] = round(time.perf_counter() - t, 4)
            t = time.perf_counter()
            rt.to(h, device, model=True, optimizer=True, grad=True)
            sync()
            step["reload_s"] = round(time.perf_counter() - t, 4)
            step["after_reload"] = alloc() - base
        rec["steps"].append(step)
    rec["tokens_per_step"] = sum(lengths) * n_mb
    rec["params_numel"] = sum(p.numel() for p in h.model.parameters())
    del h, rt
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    rec["saved"] = _probe_saved(MODELS[model], lengths, recompute, device)
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    return rec


def cmd_measure(a) -> int:
    import torch

    device = a.device
    t_start = time.perf_counter()
    out = {
        "gpu": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "torch_version": torch.__version__,
        "command": MEASURE_CMD,
        "configs": [],
    }
    torch.set_num_threads(max(1, min(16, os.cpu_count() or 1)))
    if device == "cuda":  # cuBLAS workspace and CUDA context: allocated once, before the first configuration
        x = torch.randn(256, 256, device="cuda", dtype=torch.bfloat16)
        (x @ x).sum().item()
        out["baseline_allocated"] = torch.cuda.memory_allocated()
    wanted = set(a.only.split(",")) if a.only else None
    if a.merge and Path(a.out).exists():  # keep the rows not measured now, with the GPU and torch they ran on
        old = json.loads(Path(a.out).read_text())
        for rec in old.get("configs", []):
            rec.setdefault("gpu", old.get("gpu"))
            rec.setdefault("torch_version", old.get("torch_version"))
        out["configs"] = [r for r in old.get("configs", []) if not wanted or r.get("config") not in wanted]
    for name, model, opt, lengths, n_mb, recompute, roff in MEMORY_CONFIGS:
        if wanted and name not in wanted:
            continue
        if a.shrink:  # CPU dry run of the script itself: tiny shapes
            model_cfg = MODELS[model]
            lengths = tuple(min(n, 256) for n in lengths)
            MODELS[model] = dict(
                model_cfg,
                hidden_size=128,
                intermediate_size=256,
                vocab_size=512,
                num_hidden_layers=min(4, model_cfg["num_hidden_layers"]),
                **({"layer_types": model_cfg["layer_types"][:4]} if "layer_types" in model_cfg else {}),
            )
        if time.perf_counter() - t_start > a.deadline_s:
            out["configs"].append({"config": name, "skipped": "deadline"})
            continue
        t = time.perf_counter()
        try:
            rec = measure_one(name, model, opt, lengths, n_mb, recompute, roff, device)
        except Exception as e:  # noqa: BLE001 - one failing row must not lose the other rows
            traceback.print_exc()
            rec = {"config": name, "error": f"{type(e).__name__}: {e}"[:500]}
        rec["wall_s"] = round(time.perf_counter() - t, 2)
        rec["gpu"], rec["torch_version"] = out["gpu"], out["torch_version"]
        rec["command"] = MEASURE_CMD + (f" --only {a.only}" if a.only else "") + (" --merge" if a.merge else "")
        out["configs"].append(rec)
        last = rec.get("steps", [{}])[-1]
        print(
            f"{name:45s} static {last.get('static', 0) / GIB:7.3f} GiB  peak {last.get('peak', 0) / GIB:7.3f} "
            f"GiB  ({rec['wall_s']} s){'  ERROR ' + rec['error'] if 'error' in rec else ''}",
            flush=True,
        )
        Path(a.out).write_text(json.dumps(out, indent=1))  # flush after every configuration
    return 0


def predict(rec, raw):
    """The estimator's static and peak bytes for one measured configuration."""
    from mlite.memory import TrainingOptions, estimate
    from mlite.mesh import ParallelConfig, resolve
    from mlite.models import from_hf_config

    spec = from_hf_config(rec.get("model_config") or MODELS[rec["model"]], name=rec["model"])
    opt = rec["optimizer_options"]
    o = TrainingOptions(
        optimizer=opt.get("optimizer", "fsdp2"),
        use_distributed_optimizer=bool(opt.get("use_distributed_optimizer", True)),
        main_grads_dtype=opt.get("main_grads_dtype", "fp32"),
        use_precision_aware_optimizer=bool(opt.get("use_precision_aware_optimizer")),
        exp_avg_dtype=opt.get("exp_avg_dtype", "fp32"),
        exp_avg_sq_dtype=opt.get("exp_avg_sq_dtype", "fp32"),
        offload_fraction=float(opt.get("offload_fraction") or 0.0),
        seq_len=max(rec["seq_lens"]),
        micro_batch_size=len(rec["seq_lens"]),
        num_microbatches=rec["num_microbatches"],
        recompute=rec["recompute"],
        activation_model="lite",
        lite_device="cpu" if rec.get("gpu", raw.get("gpu")) == "cpu" else "cuda",
        framework_overhead_gib=0.0,
        param_offload=rec["runtime_offload"],
        optimizer_offload=rec["runtime_offload"],
        gpu_memory_gib=141.0,
    )
    est = estimate(spec, resolve(spec, 1, ParallelConfig(), seq_len=o.seq_len), o)
    w = est.worst
    return w.static, w.peak, est


def cmd_report(a) -> int:
    raw = json.loads(Path(a.raw).read_text())
    rows, worst = [], (0.0, 0.0)
    for rec in raw["configs"]:
        if "steps" not in rec:
            print(f"{rec['config']:45s} not measured: {rec.get('error') or rec.get('skipped')}")
            continue
        steady = rec["steps"][1:] or rec["steps"]
        m_static = steady[-1]["static"]
        m_peak = max(s["peak"] for s in steady)
        p_static, p_peak, _ = predict(rec, raw)
        es, ep = (p_static - m_static) / m_static, (p_peak - m_peak) / m_peak
        worst = (max(worst[0], abs(es)), max(worst[1], abs(ep)))
        rows.append(
            {
                "config": rec["config"],
                "predicted_static_bytes": round(p_static),
                "measured_static_bytes": m_static,
                "predicted_peak_bytes": round(p_peak),
                "measured_peak_bytes": m_peak,
                "gpu": rec.get("gpu", raw["gpu"]),
                "torch_version": rec.get("torch_version", raw["torch_version"]),
                "command": f"{rec.get('command', raw['command'])} && {REPORT_CMD}",
            }
        )
        print(
            f"{rec['config']:45s} static {m_static / GIB:7.3f} GiB (pred {es:+6.1%})  peak "
            f"{m_peak / GIB:7.3f} GiB (pred {ep:+6.1%})"
        )
    print(f"worst error: static {worst[0]:.1%} (bound 3 %), peak {worst[1]:.1%} (bound 10 %)")
    if a.csv:
        with open(a.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure")
    m.add_argument("--out", required=True)
    m.add_argument("--device", default="cuda")
    m.add_argument("--only", default="")
    m.add_argument("--deadline-s", type=float, default=200.0)
    m.add_argument("--shrink", action="store_true", help="tiny shapes (a CPU dry run of this script)")
    m.add_argument("--merge", action="store_true", help="keep the other rows of an existing --out file")
    r = sub.add_parser("report")
    r.add_argument("raw")
    r.add_argument("--csv", default=None)
    a = ap.parse_args()
    rc = cmd_measure(a) if a.cmd == "measure" else cmd_report(a)
    if a.cmd == "measure":
        import torch.distributed as dist

        if dist.is_initialized():
            dist.barrier()
            dist.destroy_process_group()
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
