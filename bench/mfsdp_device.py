"""mfsdp on one GPU: the lite runtime's Megatron-FSDP backend at offload_fraction 0 / 0.5 / 1 against fsdp2 on the
same small model: the three CUDA peaks (steady, full step, optimizer only; allocated and reserved), the host bytes and
the step time (median of alternating fsdp2 / mfsdp pairs), each next to the estimate (``mlite memory`` for the same
options, ``activation_model="lite"``).

    python3 bench/mfsdp_device.py --out DIR --device cuda           # the H200 row (bench/mfsdp_device.sh runs it)
    .venv/bin/python bench/mfsdp_device.py --out /tmp/m --device cpu --tiny   # the same code at tiny size on a CPU
    python3 bench/mfsdp_device.py --report DIR/mfsdp_raw.json --csv bench/results/mfsdp.csv

Peaks, as the design doc defines them (ISEEKYAN/Megatron-LM ``experimental/lite/docs/mfsdp-fsdp2-style-cpu-offload-
design.md`` @ adcd21d0, §Transient phases): steady = ``memory_allocated`` after at least two completed optimizer steps
(before ``zero_grad``); full step = ``max_memory_allocated`` from forward entry through the optimizer's return;
optimizer only = ``max_memory_allocated`` from after the backward (gradients reduced) through the optimizer's return.
On a CPU the allocator figures are absent (None) and only the runtime's tensor tally and the step times are recorded.
The raw JSON is rewritten after every arm, so a timeout loses only the arm it cut.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

ARMS = (
    ("fsdp2", "fsdp2", 0.0),
    ("mfsdp_f0", "mfsdp", 0.0),
    ("mfsdp_f0.5", "mfsdp", 0.5),
    ("mfsdp_f1", "mfsdp", 1.0),
)
"""``(arm, optimizer backend, offload_fraction)``."""

SMALL = {
    # Qwen3-1.7B's layer shape, 4 layers, a 32k vocabulary, tied embeddings: ~0.27 B parameters
    "model_type": "qwen3",
    "architectures": ["Qwen3ForCausalLM"],
    "hidden_size": 2048,
    "num_hidden_layers": 4,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "intermediate_size": 6144,
    "vocab_size": 32768,
    "max_position_embeddings": 40960,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
}
"""The H200 row's model (small enough that four arms run in the time budget, large enough that the state shows)."""


REPORT_CMD = "python3 bench/mfsdp_device.py --report bench/results/mfsdp_raw.json --csv bench/results/mfsdp.csv"
"""The report step named in the CSV's command column."""


def _model(tiny: bool):
    return "tiny-dense" if tiny else SMALL


def _batch(seq: int, vocab: int, seed: int):
    import torch

    from mlite.runtime.batch import PackedBatch

    g = torch.Generator().manual_seed(seed)
    return PackedBatch.from_sequences([torch.randint(0, vocab, (seq,), generator=g).tolist()])


def _runtime(arm: tuple, device: str, tiny: bool):
    from mlite.runtime.config import MegatronLiteConfig, OptimizerConfig, RuntimeConfig
    from mlite.runtime.runtime import create_runtime

    _, backend, f = arm
    cfg = RuntimeConfig(
        hf_path=_model(tiny),
        device=device,
        param_dtype="bf16",
        backend_cfg=MegatronLiteConfig(
            optimizer=OptimizerConfig(optimizer=backend, lr=1e-4, offload_fraction=f or None)
        ),
    )
    return create_runtime(cfg)


def _step(rt, h, seq: int, seed: int, cuda: bool) -> dict:
    """One step, with the full-step and optimizer-only peaks (CUDA) and the times."""
    import torch

    vocab = h.spec.vocab_size
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    rt.forward_backward(h, [_batch(seq, vocab, seed)])
    if cuda:
        torch.cuda.synchronize()
        fb_peak = torch.cuda.max_memory_allocated()
        torch.cuda.reset_peak_memory_stats()
    t1 = time.perf_counter()
    ok, norm, _ = rt.optimizer_step(h)
    if cuda:
        torch.cuda.synchronize()
    t2 = time.perf_counter()
    out = {"time_s": t2 - t0, "optimizer_s": t2 - t1, "ok": ok, "grad_norm": norm}
    if cuda:
        opt_peak = torch.cuda.max_memory_allocated()
        out.update(
            full_step_peak=max(fb_peak, opt_peak),
            optimizer_peak=opt_peak,
            steady=torch.cuda.memory_allocated(),
            reserved=torch.cuda.memory_reserved(),
        )
    rt.zero_grad(h)
    rt.lr_scheduler_step(h)
    return out


def estimate_doc(tiny: bool, seq: int, device: str, **options) -> dict:
    """``mlite memory``'s JSON for one bench arm: the bench model on one GPU, one micro-batch of ``seq`` tokens, bf16
    compute, the lite activation model, no framework allowance; ``options`` are the arm's optimizer fields."""
    from mlite.memory import TrainingOptions, estimate
    from mlite.mesh import ParallelConfig
    from mlite.models import from_hf_config

    o = TrainingOptions(
        param_dtype="bf16",
        activation_model="lite",
        lite_device="cpu" if device == "cpu" else "cuda",
        seq_len=seq,
        micro_batch_size=1,
        num_microbatches=1,
        fused_cross_entropy=True,
        framework_overhead_gib=0.0,
        **options,
    )
    return estimate(from_hf_config(_model(tiny)), ParallelConfig(), o, ngpu=1).to_dict()


def _estimate(arm: tuple, seq: int, tiny: bool, device: str) -> dict:
    _, backend, f = arm
    d = estimate_doc(tiny, seq, device, optimizer=backend, offload_fraction=f)
    pg = d["per_gpu"]
    return {
        "state_gpu": pg["params"] + pg["grads"] + pg["optimizer"],
        "host": d["host"]["per_gpu"],
        **{f"peak_{k}": v for k, v in d["cuda_peaks"].items()},
    }


def _tally(rt, h) -> dict:
    """The runtime's tensors by role (device: params, grads, device state; host: host state and staging)."""
    s = rt.memory_stats(h)
    host_keys = ("host_master", "host_exp_avg", "host_exp_avg_sq", "grad_staging")
    dev = s["params"]["bytes"] + s["grads"]["bytes"]
    dev += sum(s[k]["bytes"] for k in ("master", "remainder", "exp_avg", "exp_avg_sq") if k in s)
    return {"state_device_role": dev, "host_role": sum(s[k]["bytes"] for k in host_keys if k in s)}


def new_raw(script: str, device: str, tiny: bool, seq: int) -> dict[str, Any]:
    """The raw JSON's head: the command that ran, the device, torch's version, the sizes; empty arms and pairs."""
    import torch

    return {
        "command": " ".join(["python3", script, *sys.argv[1:]]),
        "gpu": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "torch_version": torch.__version__,
        "device": device,
        "tiny": tiny,
        "seq": seq,
        "arms": {},
        "pairs": [],
    }


def measure(out: Path, device: str, tiny: bool, seq: int, pairs: int, deadline_s: float) -> dict:
    import torch

    cuda = device == "cuda"
    t_start = time.perf_counter()
    raw: dict[str, Any] = new_raw("bench/mfsdp_device.py", device, tiny, seq)
    path = out / "mfsdp_raw.json"

    def save():
        path.write_text(json.dumps(raw, indent=1))

    # 1. each arm alone: memory after two completed steps, then a third step's peaks
    for arm in ARMS:
        if time.perf_counter() - t_start > deadline_s:
            break
        rt = _runtime(arm, device, tiny)
        if cuda:
            torch.cuda.synchronize()
            base = torch.cuda.memory_allocated()
        h = rt.build_model()
        steps = [_step(rt, h, seq, k, cuda) for k in range(3)]
        rec = {
            "optimizer": arm[1],
            "offload_fraction": arm[2],
            **_tally(rt, h),
            "estimate": _estimate(arm, seq, tiny, device),
        }
        last = steps[-1]
        if cuda:
            rec.update(
                steady=last["steady"] - base,
                full_step_peak=last["full_step_peak"] - base,
                optimizer_peak=last["optimizer_peak"] - base,
                reserved=last["reserved"],
            )
        rec["losses_ok"] = all(s["ok"] for s in steps)
        raw["arms"][arm[0]] = rec
        save()
        del h, rt
        gc.collect()
        if cuda:
            torch.cuda.empty_cache()
    # 2. step time: every arm built, alternating fsdp2 / mfsdp steps, the median of the pairs
    built = {}
    for arm in ARMS:
        rt = _runtime(arm, device, tiny)
        h = rt.build_model()
        _step(rt, h, seq, 0, cuda)  # warm-up (state allocated, kernels compiled)
        built[arm[0]] = (rt, h)
    for k in range(pairs):
        if k >= 3 and time.perf_counter() - t_start > deadline_s:
            break
        row: dict[str, list[float]] = {}
        for name in ("fsdp2", "mfsdp_f0", "fsdp2", "mfsdp_f0.5", "fsdp2", "mfsdp_f1"):
            rt, h = built[name]
            row.setdefault(name, []).append(_step(rt, h, seq, 100 + k, cuda)["time_s"])
        raw["pairs"].append(row)
        save()
    for name, rec in raw["arms"].items():
        times = [statistics.median(r[name]) for r in raw["pairs"] if name in r]  # fsdp2: its 3 steps of the round
        rec["step_time_median_s"] = statistics.median(times) if times else None
    save()
    return raw


def report(raw_path: Path, csv_path: Path) -> list[dict]:
    """The CSV: per arm, measured next to the estimate (the estimate is recomputed with today's code)."""
    from result_csv import write_measurements

    raw = json.loads(raw_path.read_text())
    rows = []
    for name, rec in raw["arms"].items():
        arm = next(a for a in ARMS if a[0] == name)
        est = _estimate(arm, raw["seq"], raw["tiny"], raw["device"])
        fsdp2 = raw["arms"].get("fsdp2", {}).get("step_time_median_s")

        def row(measurement, value, unit, estimate=None, name=name):
            rows.append(
                {
                    "arm": name,
                    "measurement": measurement,
                    "value": value,
                    "unit": unit,
                    "estimate": estimate,
                }
            )

        row("state_device_role", rec["state_device_role"], "bytes", est["state_gpu"])
        row("host", rec["host_role"], "bytes", est["host"])
        for key, ekey in (
            ("steady", "peak_steady"),
            ("full_step_peak", "peak_full_step"),
            ("optimizer_peak", "peak_optimizer_only"),
        ):
            if rec.get(key) is not None:
                row(key, rec[key], "bytes", est[ekey])
        if rec.get("reserved") is not None:
            row("reserved", rec["reserved"], "bytes")
        t = rec.get("step_time_median_s")
        if t is not None:
            row("step_time_median", round(t, 4), "s")
            if fsdp2 and name != "fsdp2":
                row("step_time_vs_fsdp2", round(t / fsdp2, 3), "ratio")
    cmd = REPORT_CMD  # the committed CSV's report step (tests/test_bench_results.py re-runs it into a temp file)
    write_measurements(
        raw,
        rows,
        csv_path,
        cmd,
        columns=("arm", "measurement", "value", "unit", "estimate", "gpu", "torch_version", "command"),
    )
    for r in rows:
        print(f"{r['arm']:11s} {r['measurement']:20s} {r['value']!s:>14s} {r['unit']:6s} estimate {r['estimate']}")
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="folder for mfsdp_raw.json")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--tiny", action="store_true", help="tiny-dense at 64 tokens (the CPU try)")
    ap.add_argument("--seq", type=int, default=None, help="tokens per step (default 2048; 64 with --tiny)")
    ap.add_argument("--pairs", type=int, default=5, help="alternating step-time rounds (at least 3 are run)")
    ap.add_argument("--deadline-s", type=float, default=110.0, help="no arm or round starts after this")
    ap.add_argument("--report", type=Path, help="raw JSON to turn into --csv")
    ap.add_argument("--csv", type=Path, default=ROOT / "bench" / "results" / "mfsdp.csv")
    a = ap.parse_args()
    if a.report and not a.report.is_file():
        ap.error(
            f"--report {a.report}: no such file (the raw JSON a measuring run wrote, e.g. bench/results/mfsdp_raw.json)"
        )
    if a.report:
        report(a.report, a.csv)
        return 0
    if a.out is None:
        ap.error("--out is required to measure")
    a.out.mkdir(parents=True, exist_ok=True)
    seq = a.seq or (64 if a.tiny else 2048)
    raw = measure(a.out, a.device, a.tiny, seq, max(3, a.pairs), a.deadline_s)
    print(
        json.dumps({k: {kk: vv for kk, vv in v.items() if kk != "estimate"} for k, v in raw["arms"].items()}, indent=1)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
