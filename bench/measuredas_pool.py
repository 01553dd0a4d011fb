"""What ``torch.cuda.max_memory_allocated()`` / ``max_memory_reserved()`` count in one process (issue 27): the rule
:func:`mlite.memory.rl_metrics.peak_allocated` held against PyTorch's own allocator statistics.

A toy RL step in one process, the way verl's actor worker sees it when vLLM's model runner lives in it: the actor's
state, the engine's weights and KV cache allocated inside ``torch.cuda.use_mem_pool(torch.cuda.MemPool())`` (what
vLLM's ``CuMemAllocator.use_memory_pool`` does, with a pluggable allocator, ``vllm/device_allocator/cumem.py``
@ ``9ac96588``), a rollout transient, then a training transient; the statistics are never reset in between (as in
verl). Two variants: ``kept`` (the pool's tensors stay alive through training: CuMem's sleep unmaps the memory but
keeps the tensors) and ``freed`` (the engine frees its tensors before training: verl's vLLM 0.6.3 fork). The
prediction is ``peak_allocated`` of the same phases (``in_process_cumem`` / ``in_process_freed``); what it checks:
that MemPool allocations count in ``memory_allocated`` and that the figure is the peak over every phase. (The
unmapping itself needs vLLM's C allocator, not here: in PyTorch's view the kept tensors are just alive.)

    python3 bench/measuredas_pool.py --out DIR [--device cuda|cpu] [--mib 256]   # cpu: the predictions only
    python3 bench/measuredas_pool.py --report DIR/measuredas_raw.json --csv bench/results/measuredas.csv
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.result_csv import write_measurements
from mlite.memory.rl_metrics import peak_allocated

MIB = 1024**2


def phases(unit: int, variant: str) -> tuple[list[dict], float]:
    """The toy step's phases (GPU parts in bytes) and the engine pool, ``unit`` bytes the size unit."""
    actor, weights, kv, roll, train = unit, 2 * unit, 4 * unit, unit // 2, 3 * unit
    engine = {"engine_weights": weights, "kv_cache": kv}
    rollout = {"actor_resident": actor, **engine, "engine_activations": roll}
    update = {"actor_training_peak": actor + train, **(engine if variant == "kept" else {})}
    return [rollout, update], weights + kv


def predicted(unit: int, variant: str) -> int:
    ph, pool = phases(unit, variant)
    return round(peak_allocated(ph, "in_process_cumem" if variant == "kept" else "in_process_freed", pool))


def measure(unit: int, variant: str) -> dict:
    """Run the toy step on the GPU; the allocator's statistics after each phase."""
    import torch

    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    rec = {}

    def snap(name):
        rec[name] = {
            "allocated": torch.cuda.memory_allocated() - base,
            "max_allocated": torch.cuda.max_memory_allocated() - base,
            "max_reserved": torch.cuda.max_memory_reserved(),
        }

    actor = torch.empty(unit, dtype=torch.uint8, device="cuda")
    pool = torch.cuda.MemPool()
    with torch.cuda.use_mem_pool(pool):
        weights = torch.empty(2 * unit, dtype=torch.uint8, device="cuda")
        kv = torch.empty(4 * unit, dtype=torch.uint8, device="cuda")
    snap("engine_started")
    roll = torch.empty(unit // 2, dtype=torch.uint8, device="cuda")
    snap("rollout")
    del roll
    if variant == "freed":
        del weights, kv
    train = torch.empty(3 * unit, dtype=torch.uint8, device="cuda")
    snap("update")
    del train, actor
    torch.cuda.synchronize()
    return rec


def run(out: Path, device: str, mib: int) -> int:
    out.mkdir(parents=True, exist_ok=True)
    raw = {"command": " ".join(["python3", "bench/measuredas_pool.py", *sys.argv[1:]]), "device": device, "rows": []}
    if device == "cuda":
        import torch

        raw["gpu"], raw["torch_version"] = torch.cuda.get_device_name(), torch.__version__
    else:
        raw["gpu"], raw["torch_version"] = "cpu", None
    for variant in ("kept", "freed"):
        row = {"variant": variant, "unit_bytes": mib * MIB, "predicted_max_allocated": predicted(mib * MIB, variant)}
        row["measured"] = measure(mib * MIB, variant) if device == "cuda" else None
        raw["rows"].append(row)
        (out / "measuredas_raw.json").write_text(json.dumps(raw, indent=2))
        print(f"== {variant}: predicted {row['predicted_max_allocated']:,} B; measured {row['measured']}")
    return 0


def report(raw_path: Path, csv_path: Path) -> int:
    raw = json.loads(raw_path.read_text())
    rows = []
    for r in raw["rows"]:
        rows.append({"measurement": f"{r['variant']}_predicted_max_allocated", "value": r["predicted_max_allocated"]})
        if r["measured"]:
            m = r["measured"]["update"]
            rows.append({"measurement": f"{r['variant']}_measured_max_allocated", "value": m["max_allocated"]})
            rows.append({"measurement": f"{r['variant']}_measured_max_reserved", "value": m["max_reserved"]})
    for row in rows:
        row["unit"] = "bytes"
    csv_path.parent.mkdir(parents=True, exist_ok=True)
    write_measurements(raw, rows, csv_path, f"python3 bench/measuredas_pool.py --report {raw_path} --csv {csv_path}")
    print(f"wrote {csv_path}")
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path)
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--mib", type=int, default=256, help="size unit in MiB (actor 1, weights 2, KV 4, update 3 units)")
    p.add_argument("--report", type=Path)
    p.add_argument("--csv", type=Path, default=Path("bench/results/measuredas.csv"))
    a = p.parse_args(argv)
    if a.report:
        return report(a.report, a.csv)
    if a.out is None:
        p.error("--out DIR (or --report RAW)")
    return run(a.out, a.device, a.mib)


if __name__ == "__main__":
    raise SystemExit(main())
