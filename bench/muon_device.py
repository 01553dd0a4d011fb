"""Muon vs Adam on one GPU: the lite runtime's ``dist_opt`` with ``--optimizer-algorithm muon`` against ``adam`` on
the small dense model of the other one-GPU benches (Qwen3-1.7B's layer shape, 4 layers, 32k vocabulary): the
optimizer-state bytes, the CUDA peaks (steady, full step, optimizer only; ``max_memory_allocated`` after
``reset_peak_memory_stats``) and the step time (median of >= 3 alternating adam / muon pairs), each next to the
estimate (``mlite memory`` with the same options, ``activation_model="lite"``).

    python3 bench/muon_device.py --out DIR --device cuda            # the H200 row (bench/muon_device.sh runs it)
    .venv/bin/python bench/muon_device.py --out /tmp/m --device cpu --tiny   # the same code at tiny size on a CPU
    python3 bench/muon_device.py --report DIR/muon_raw.json --csv bench/results/muon.csv

The optimizer-only peak is where Muon's Newton-Schulz workspace shows (the estimate's
``transients["optimizer_step"]``: :func:`mlite.memory.muon.ns_workspace_bytes` of the largest matrix). On a CPU
the allocator figures are absent (None). The raw JSON is rewritten after every arm and round.
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

from mfsdp_device import SMALL, _step, estimate_doc, new_raw  # noqa: E402  (the same model, batches and step as the mfsdp row)

ARMS = ("adam", "muon")
"""The optimizer algorithms compared (both on ``dist_opt``)."""
STATE_KEYS = ("master", "exp_avg", "exp_avg_sq")
"""The optimizer-state kinds the runtime tallies (Muon's momentum is its ``exp_avg``)."""


REPORT_CMD = "python3 bench/muon_device.py --report bench/results/muon_raw.json --csv bench/results/muon.csv"
"""The report step named in the CSV's command column."""


def _model(tiny: bool):
    return "tiny-dense" if tiny else SMALL


def _runtime(algorithm: str, device: str, tiny: bool):
    from mlite.runtime.config import MegatronLiteConfig, OptimizerConfig, RuntimeConfig
    from mlite.runtime.runtime import create_runtime

    oc = OptimizerConfig(optimizer="dist_opt", optimizer_algorithm=algorithm, lr=1e-4)
    cfg = RuntimeConfig(
        hf_path=_model(tiny), device=device, param_dtype="bf16", backend_cfg=MegatronLiteConfig(optimizer=oc)
    )
    return create_runtime(cfg)


def estimate_for(algorithm: str, seq: int, tiny: bool, device: str) -> dict:
    """The estimate of the arm: optimizer state, parameters + grads + state, the three CUDA peaks, NS workspace."""
    d = estimate_doc(tiny, seq, device, optimizer="dist_opt", optimizer_algorithm=algorithm)
    pg = d["per_gpu"]
    return {
        "optimizer_state": pg["optimizer"],
        "state_gpu": pg["params"] + pg["grads"] + pg["optimizer"],
        "newton_schulz": (d["muon"] or {}).get("newton_schulz_bytes", 0),
        **{f"peak_{k}": v for k, v in d["cuda_peaks"].items()},
    }


def measure(out: Path, device: str, tiny: bool, seq: int, pairs: int, deadline_s: float) -> dict:
    import torch

    cuda = device == "cuda"
    t_start = time.perf_counter()
    raw: dict[str, Any] = new_raw("bench/muon_device.py", device, tiny, seq)
    path = out / "muon_raw.json"

    def save():
        path.write_text(json.dumps(raw, indent=1))

    for arm in ARMS:  # 1. each arm alone: bytes and peaks of the third step
        rt = _runtime(arm, device, tiny)
        if cuda:
            torch.cuda.synchronize()
            base = torch.cuda.memory_allocated()
        h = rt.build_model()
        steps = [_step(rt, h, seq, k, cuda) for k in range(3)]
        s = rt.memory_stats(h)
        rec: dict[str, Any] = {
            "optimizer_state": sum(s[k]["bytes"] for k in STATE_KEYS),
            "state_gpu": s["params"]["bytes"] + s["grads"]["bytes"] + sum(s[k]["bytes"] for k in STATE_KEYS),
            "ok": all(x["ok"] for x in steps),
            "estimate": estimate_for(arm, seq, tiny, device),
        }
        if cuda:
            last = steps[-1]
            rec.update({k: last[k] - base for k in ("steady", "full_step_peak", "optimizer_peak")})
        raw["arms"][arm] = rec
        save()
        del h, rt
        gc.collect()
        if cuda:
            torch.cuda.empty_cache()
    built = {}  # 2. step time: both built, alternating adam / muon steps
    for arm in ARMS:
        rt = _runtime(arm, device, tiny)
        h = rt.build_model()
        _step(rt, h, seq, 0, cuda)
        built[arm] = (rt, h)
    for k in range(pairs):
        if k >= 3 and time.perf_counter() - t_start > deadline_s:
            break
        row: dict[str, dict] = {}
        for arm in ARMS:
            rt, h = built[arm]
            r = _step(rt, h, seq, 100 + k, cuda)
            row[arm] = {"time_s": r["time_s"], "optimizer_s": r["optimizer_s"]}
        raw["pairs"].append(row)
        save()
    for arm, rec in raw["arms"].items():
        rec["step_time_median_s"] = statistics.median(r[arm]["time_s"] for r in raw["pairs"])
        rec["optimizer_time_median_s"] = statistics.median(r[arm]["optimizer_s"] for r in raw["pairs"])
    save()
    return raw


def report(raw_path: Path, csv_path: Path) -> list[dict]:
    """The CSV: per arm, measured next to the estimate (recomputed with today's code)."""
    from result_csv import write_measurements

    raw = json.loads(raw_path.read_text())
    rows: list[dict] = []
    adam_t = raw["arms"].get("adam", {}).get("step_time_median_s")
    for arm, rec in raw["arms"].items():
        est = estimate_for(arm, raw["seq"], raw["tiny"], raw["device"])

        def row(measurement, value, unit, estimate=None, arm=arm):
            rows.append({"arm": arm, "measurement": measurement, "value": value, "unit": unit, "estimate": estimate})

        row("optimizer_state", rec["optimizer_state"], "bytes", est["optimizer_state"])
        row("state_gpu", rec["state_gpu"], "bytes", est["state_gpu"])
        for key, ekey in (("steady", "peak_steady"), ("full_step_peak", "peak_full_step")):
            if rec.get(key) is not None:
                row(key, rec[key], "bytes", est[ekey])
        if rec.get("optimizer_peak") is not None:
            row("optimizer_peak", rec["optimizer_peak"], "bytes", est["peak_optimizer_only"])
        if arm == "muon":
            row("newton_schulz_workspace", None, "bytes", est["newton_schulz"])
        for key in ("step_time_median_s", "optimizer_time_median_s"):
            if rec.get(key) is not None:
                row(key.removesuffix("_s"), round(rec[key], 4), "s")
        if adam_t and arm != "adam" and rec.get("step_time_median_s"):
            row("step_time_vs_adam", round(rec["step_time_median_s"] / adam_t, 3), "ratio")
    cmd = REPORT_CMD  # the committed CSV's report step (tests/test_bench_results.py re-runs it into a temp file)
    write_measurements(
        raw,
        rows,
        csv_path,
        cmd,
        columns=("arm", "measurement", "value", "unit", "estimate", "gpu", "torch_version", "command"),
    )
    for r in rows:
        print(f"{r['arm']:5s} {r['measurement']:24s} {r['value']!s:>14s} {r['unit']:6s} estimate {r['estimate']}")
    return rows


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="folder for muon_raw.json")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--tiny", action="store_true", help="tiny-dense at 64 tokens (the CPU try)")
    ap.add_argument("--seq", type=int, default=None, help="tokens per step (default 2048; 64 with --tiny)")
    ap.add_argument("--pairs", type=int, default=5, help="alternating step-time rounds (at least 3 are run)")
    ap.add_argument("--deadline-s", type=float, default=150.0, help="no round after the third starts after this")
    ap.add_argument("--report", type=Path, help="raw JSON to turn into --csv")
    ap.add_argument("--csv", type=Path, default=ROOT / "bench" / "results" / "muon.csv")
    a = ap.parse_args(argv)
    if a.report and not a.report.is_file():
        ap.error(
            f"--report {a.report}: no such file (the raw JSON a measuring run wrote, e.g. bench/results/muon_raw.json)"
        )
    if not a.report and a.out is None:
        ap.error("--out is required to measure")
    a.pairs = max(3, a.pairs)
    a.seq = a.seq or (64 if a.tiny else 2048)
    return a


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    if a.report:
        report(a.report, a.csv)
        return 0
    a.out.mkdir(parents=True, exist_ok=True)
    raw = measure(a.out, a.device, a.tiny, a.seq, a.pairs, a.deadline_s)
    print(
        json.dumps({k: {kk: vv for kk, vv in v.items() if kk != "estimate"} for k, v in raw["arms"].items()}, indent=1)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
