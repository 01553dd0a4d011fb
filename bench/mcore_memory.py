"""Megatron-Core's memory on one GPU, measured next to the estimator's ``megatron`` prediction.

Each row builds Megatron-Core's GPTModel (local layer spec, see :mod:`mlite.validation.mcore_oracle`; or the same spec
with the core attention swapped for PyTorch SDPA, the ``flash`` rows), wraps it in Megatron's DDP (fp32 or bf16 grad
buffer), builds torch AdamW through ``get_megatron_optimizer`` (distributed optimizer on or off), runs three
iterations (zero_grad_buffer, zero_grad, forward/backward per micro-batch, finish_grad_sync, step) and records
``memory_allocated`` right after the last step (static) and ``max_memory_allocated`` over the last iteration (peak).
Each row runs in its own process (a failing row is recorded and the next one runs) and is appended to the raw JSON
as it finishes. The prediction is ``mlite.memory.estimate`` for the same model and options (``attention=unfused`` for
the local spec, ``flash`` for SDPA). ``--saved`` also records each row's per-component saved bytes on the GPU (the
oracle of :mod:`mlite.validation.mcore_oracle`) next to the model's. The raw JSON keeps the prediction made at
measurement time; ``report`` recomputes it with the estimator as it is now.

Needs megatron-core (0.19.2 on the H200, carried as a cp312 wheel; no Transformer Engine or Apex there).

    python3 bench/mcore_memory.py measure --out $OUT/mcore_memory_raw.json [--rows dense_s1024_none,...] [--quick]
    python3 bench/mcore_memory.py report bench/results/mcore_memory_raw.json --csv bench/results/mcore_memory.csv
    python3 bench/mcore_memory.py row '{"name": ...}'      # one row, prints its JSON record (used by measure)
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mlite.validation.mcore_oracle import predict_row

DENSE = {
    "hidden": 2048,
    "heads": 16,
    "kv_heads": 8,
    "head_dim": 128,
    "ffn": 6144,
    "layers": 16,
    "vocab": 32000,
    "qk_norm": True,
}
DENSE_MHA = {**DENSE, "kv_heads": 16}
MOE = {
    "hidden": 1024,
    "heads": 16,
    "kv_heads": 4,
    "head_dim": 64,
    "ffn": 2816,
    "layers": 8,
    "vocab": 32000,
    "qk_norm": True,
    "experts": 16,
    "topk": 4,
    "moe_ffn": 512,
}


def _row(name, model, seq, mb, recompute, dist_opt=True, grad="fp32", attention="unfused", layers=None, micro=1):
    m = dict(model)
    if layers:
        m["layers"] = layers
    return {
        "name": name,
        "model": m,
        "seq": seq,
        "micro_batch": mb,
        "recompute": recompute,
        "dist_opt": dist_opt,
        "grad": grad,
        "attention": attention,
        "num_microbatches": micro,
    }


ROWS = [
    _row("dense_s1024_mb1_none", DENSE, 1024, 1, "none"),
    _row("dense_s2048_mb2_none_m2", DENSE, 2048, 2, "none", micro=2),
    _row("dense_s4096_mb1_none_nodist", DENSE, 4096, 1, "none", dist_opt=False),
    _row("dense_s4096_mb1_sel_bf16grad", DENSE, 4096, 1, "selective", grad="bf16"),
    _row("dense_s2048_mb4_sel", DENSE, 2048, 4, "selective"),
    _row("dense_s8192_mb1_sel", DENSE, 8192, 1, "selective"),
    _row("dense_s8192_mb1_full", DENSE, 8192, 1, "full"),
    _row("dense_s4096_mb4_full_nodist_bf16grad", DENSE, 4096, 4, "full", dist_opt=False, grad="bf16"),
    _row("dense8L_s8192_mb1_none", DENSE, 8192, 1, "none", layers=8),
    _row("moe_s1024_mb2_none", MOE, 1024, 2, "none"),
    _row("moe_s4096_mb1_none_bf16grad", MOE, 4096, 1, "none", grad="bf16"),
    _row("moe_s4096_mb1_sel_nodist", MOE, 4096, 1, "selective", dist_opt=False),
    _row("moe_s8192_mb1_full", MOE, 8192, 1, "full"),
    _row("moe_s2048_mb4_full_bf16grad", MOE, 2048, 4, "full", grad="bf16"),
    # core attention swapped for PyTorch SDPA (flash kernels): the closest to TE's flash attention that runs here
    _row("sdpa_dense_mha_s4096_mb1_none", DENSE_MHA, 4096, 1, "none", attention="flash"),
    _row("sdpa_dense_s8192_mb2_none", DENSE, 8192, 2, "none", attention="flash"),
    _row("sdpa_dense_s8192_mb1_sel_bf16grad", DENSE, 8192, 1, "selective", grad="bf16", attention="flash"),
    _row("sdpa_moe_s8192_mb2_none_nodist", MOE, 8192, 2, "none", dist_opt=False, attention="flash"),
]

QUICK = [
    _row("quick_dense_unfused", {**DENSE, "layers": 2, "vocab": 4096}, 1024, 2, "none"),
    _row(
        "quick_moe_sdpa_bf16grad",
        {**MOE, "layers": 2, "vocab": 4096},
        1024,
        1,
        "selective",
        grad="bf16",
        attention="flash",
    ),
]


def run_row(row, iters: int = 3) -> dict:
    """Build, train ``iters`` iterations and measure one row (in this process)."""
    import torch
    from megatron.core.distributed import (
        DistributedDataParallel,
        DistributedDataParallelConfig,
    )
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer

    from mlite.validation.mcore_oracle import (
        OracleCase,
        build_gpt,
        init_single_process,
        saved_bytes,
        sdpa_layer_spec,
    )

    cuda = torch.cuda.is_available()
    init_single_process()
    case = OracleCase(seq=row["seq"], micro_batch=row["micro_batch"], recompute=row["recompute"], **row["model"])
    torch.manual_seed(0)
    base = torch.cuda.memory_allocated() if cuda else 0
    spec = sdpa_layer_spec(case) if row["attention"] == "flash" else None
    model = build_gpt(case, layer_spec=spec)
    ddp_cfg = DistributedDataParallelConfig(
        grad_reduce_in_fp32=row["grad"] == "fp32", overlap_grad_reduce=False, use_distributed_optimizer=row["dist_opt"]
    )
    model = DistributedDataParallel(config=model.config, ddp_config=ddp_cfg, module=model)
    opt = None
    if cuda:  # Megatron's optimizers allocate on CUDA; on a CPU the loop runs without a step (script check only)
        opt = get_megatron_optimizer(
            OptimizerConfig(
                optimizer="adam",
                lr=1e-4,
                weight_decay=0.01,
                bf16=True,
                params_dtype=torch.bfloat16,
                clip_grad=1.0,
                use_distributed_optimizer=row["dist_opt"],
            ),
            [model],
        )
    dev = "cuda" if cuda else "cpu"
    g = torch.Generator(device="cpu").manual_seed(0)
    rec = {"steps": []}
    for it in range(iters):
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        model.zero_grad_buffer()
        if opt is not None:
            opt.zero_grad()
        for _ in range(row["num_microbatches"]):
            ids = torch.randint(0, case.vocab, (case.micro_batch, case.seq), generator=g).to(dev)
            pos = torch.arange(case.seq, device=dev).unsqueeze(0).expand(case.micro_batch, -1)
            loss = model(ids, pos, None, labels=torch.roll(ids, -1, dims=1))
            (loss.float().mean() / row["num_microbatches"]).backward()
            del loss
        if cuda:
            model.finish_grad_sync()
        ok, norm, _ = opt.step() if opt is not None else (True, None, None)
        if cuda:
            torch.cuda.synchronize()
        step = {
            "iter": it,
            "time_s": round(time.perf_counter() - t0, 3),
            "ok": bool(ok),
            "grad_norm": float(norm) if norm is not None else None,
        }
        if cuda:
            step["allocated_after_step"] = torch.cuda.memory_allocated() - base
            step["max_allocated"] = torch.cuda.max_memory_allocated() - base
        rec["steps"].append(step)
    if row.get("saved"):  # per-component saved bytes of one forward (the oracle, on this device)
        from mlite.validation.mcore_oracle import predicted

        rec["saved"] = saved_bytes(model.module, case)
        rec["saved_predicted"] = predicted(case, device="cuda" if cuda else "cpu", attention=row["attention"])
    last = rec["steps"][-1]
    rec["measured_static_bytes"] = last.get("allocated_after_step")
    rec["measured_peak_bytes"] = last.get("max_allocated")
    return rec


def measure(rows, out: Path, timeout: int, parallel: int = 1, budget_gib: float = 115.0) -> None:
    """Run each row in its own process, up to ``parallel`` at once while their predicted peaks add up to less than
    ``budget_gib`` (``memory_allocated`` is per process, so neighbours do not disturb the figures); append each
    record to ``out`` as it finishes."""
    import platform

    out.parent.mkdir(parents=True, exist_ok=True)
    records = json.loads(out.read_text()) if out.exists() else []
    pending = [dict(row, **predict_row(row)) for row in rows]
    running: list[tuple[dict, subprocess.Popen, float]] = []
    while pending or running:
        load = sum(r["predicted_peak_bytes"] for r, _, _ in running) / 2**30
        for rec in list(pending):
            if len(running) >= parallel or (running and load + rec["predicted_peak_bytes"] / 2**30 > budget_gib):
                break
            row = {
                k: rec[k]
                for k in (
                    "name",
                    "model",
                    "seq",
                    "micro_batch",
                    "recompute",
                    "dist_opt",
                    "grad",
                    "attention",
                    "num_microbatches",
                )
                + (("saved",) if "saved" in rec else ())
            }
            proc = subprocess.Popen(
                [sys.executable, __file__, "row", json.dumps(row)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            running.append((rec, proc, time.perf_counter()))
            pending.remove(rec)
            load += rec["predicted_peak_bytes"] / 2**30
        time.sleep(0.5)
        for item in list(running):
            rec, proc, t0 = item
            if proc.poll() is None and time.perf_counter() - t0 < timeout:
                continue
            if proc.poll() is None:
                proc.kill()
                stdout, stderr = proc.communicate()
                rec["error"] = f"timed out after {timeout} s"
            else:
                stdout, stderr = proc.communicate()
                lines = [x for x in stdout.splitlines() if x.startswith("{")]
                if proc.returncode == 0 and lines:
                    rec.update(json.loads(lines[-1]))
                else:
                    rec["error"] = (stderr.strip().splitlines() or [f"rc {proc.returncode}"])[-1][:500]
                    rec["stderr_tail"] = stderr[-4000:]
            running.remove(item)
            rec["wall_s"] = round(time.perf_counter() - t0, 1)
            rec["host"] = platform.node()
            records.append(rec)
            out.write_text(json.dumps(records, indent=1))
            _print(rec)


def _print(rec) -> None:
    ms, mp = rec.get("measured_static_bytes"), rec.get("measured_peak_bytes")
    if rec.get("error"):
        msg = "ERROR " + rec["error"]
    elif ms is None:
        msg = "no CUDA: no measurement"
    else:
        msg = (
            f"static {ms / 2**30:.2f} GiB (pred {rec['predicted_static_bytes'] / 2**30:.2f}, "
            f"{rec['predicted_static_bytes'] / ms - 1:+.1%}) peak {mp / 2**30:.2f} GiB (pred "
            f"{rec['predicted_peak_bytes'] / 2**30:.2f}, {rec['predicted_peak_bytes'] / mp - 1:+.1%})"
        )
    print(f"{rec['name']:40s} {rec['wall_s']:6.1f}s {msg}", flush=True)
    if isinstance(rec.get("saved"), dict):
        print(
            "   saved  ", json.dumps(rec["saved"]), "\n   model  ", json.dumps(rec.get("saved_predicted")), flush=True
        )


def row_main(spec: str) -> int:
    import torch

    row = json.loads(spec)
    rec = run_row(row)
    if torch.cuda.is_available():
        rec["gpu"] = torch.cuda.get_device_name()
    rec["torch_version"] = torch.__version__
    import megatron.core

    rec["megatron_core_version"] = megatron.core.__version__
    print(json.dumps(rec), flush=True)
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()
    return 0


COMMAND = (
    "python3 bench/mcore_memory.py measure --saved --out bench/results/mcore_memory_raw.json --rows {name} && "
    "python3 bench/mcore_memory.py report bench/results/mcore_memory_raw.json --csv bench/results/mcore_memory.csv"
)
FIELDS = [
    "config",
    "attention",
    "validated_against",
    "predicted_static_bytes",
    "measured_static_bytes",
    "predicted_peak_bytes",
    "measured_peak_bytes",
    "static_error",
    "peak_error",
    "seq",
    "micro_batch",
    "num_microbatches",
    "recompute",
    "dist_opt",
    "grad_buffer",
    "gpu",
    "torch_version",
    "megatron_core_version",
    "command",
]


def report(raw: Path, csv_path: Path | None) -> int:
    recs = json.loads(raw.read_text())
    rows = []
    for r in recs:
        r.update(predict_row(r))  # the estimator as it is now, against the measurement
        if r.get("measured_static_bytes") is None:
            print(f"{r['name']}: {r.get('error', 'not measured')}")
            continue
        se = r["predicted_static_bytes"] / r["measured_static_bytes"] - 1
        pe = r["predicted_peak_bytes"] / r["measured_peak_bytes"] - 1
        what = (
            "Megatron-Core local spec (DotProductAttention)"
            if r["attention"] == "unfused"
            else "Megatron-Core with PyTorch SDPA flash core attention (TE absent)"
        )
        rows.append(
            {
                "config": r["name"],
                "attention": r["attention"],
                "validated_against": what,
                "predicted_static_bytes": r["predicted_static_bytes"],
                "measured_static_bytes": r["measured_static_bytes"],
                "predicted_peak_bytes": r["predicted_peak_bytes"],
                "measured_peak_bytes": r["measured_peak_bytes"],
                "static_error": round(se, 6),
                "peak_error": round(pe, 6),
                "seq": r["seq"],
                "micro_batch": r["micro_batch"],
                "num_microbatches": r["num_microbatches"],
                "recompute": r["recompute"],
                "dist_opt": r["dist_opt"],
                "grad_buffer": r["grad"],
                "gpu": r.get("gpu", ""),
                "torch_version": r.get("torch_version", ""),
                "megatron_core_version": r.get("megatron_core_version", ""),
                "command": COMMAND.format(name=r["name"]),
            }
        )
        print(f"{r['name']:40s} static {se:+7.2%}  peak {pe:+7.2%}")
    if csv_path:
        with open(csv_path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=FIELDS)
            w.writeheader()
            w.writerows(rows)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure")
    m.add_argument("--out", required=True)
    m.add_argument("--rows", default=None, help="comma-separated row names (default: all)")
    m.add_argument("--quick", action="store_true", help="the two small check rows instead")
    m.add_argument("--timeout", type=int, default=120, help="seconds per row")
    m.add_argument("--saved", action="store_true", help="also record per-component saved bytes (oracle)")
    m.add_argument("--parallel", type=int, default=1, help="rows at once (their predicted peaks must fit)")
    r = sub.add_parser("report")
    r.add_argument("raw")
    r.add_argument("--csv", default=None)
    o = sub.add_parser("row")
    o.add_argument("spec")
    a = ap.parse_args()
    if a.cmd == "row":
        return row_main(a.spec)
    if a.cmd == "report":
        return report(Path(a.raw), Path(a.csv) if a.csv else None)
    rows = QUICK if a.quick else ROWS
    if a.rows:
        want = a.rows.split(",")
        rows = [x for x in ROWS + QUICK if x["name"] in want]
    if a.saved:
        rows = [dict(x, saved=True) for x in rows]
    measure(rows, Path(a.out), a.timeout, a.parallel)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
