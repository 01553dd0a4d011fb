"""Time of the whole mesh table with memory estimates (issue #31: Kimi-K2 on 1024 GPUs, every valid mesh with its
estimate, goal < 0.3 s), against the same table built by a baseline commit's code, in one process, alternating.

    PYTHONPATH=$PWD .venv/bin/python bench/mesh_table_speed.py [--baseline ea08d4a] [--pairs 5]

The baseline is ``git archive BASELINE mlite`` unpacked under a temporary folder as the package ``mlite_base`` (mlite
imports itself relatively, so both live in one process); both build :func:`mlite.memory.mesh_table` with
``TrainingOptions(gpu_memory_gib=141)`` (what ``mlite mesh --list --gpu-mem 141`` ranks) from the same config file.
Each pair runs ours and the baseline once, the order alternating between pairs; the figures are process CPU time
(the machine is shared) with wall time beside. Every pair also checks that the two tables are identical: the same
meshes in the same order with the same ``to_dict()`` (every estimate figure, exactly).
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CASES = [("Kimi-K2-Instruct", 1024, 0.3), ("Qwen3-235B-A22B", 256, None)]


def load_baseline(ref: str, where: Path):
    """The package of commit ``ref`` imported as ``mlite_base``."""
    blob = subprocess.run(["git", "-C", str(ROOT), "archive", ref, "mlite"], check=True, capture_output=True).stdout
    tar = where / "base.tar"
    tar.write_bytes(blob)
    with tarfile.open(tar) as t:
        t.extractall(where, filter="data")
    (where / "mlite").rename(where / "mlite_base")
    sys.path.insert(0, str(where))
    return importlib.import_module("mlite_base")


def table(pkg, config: Path, ngpu: int):
    """(cpu s, wall s, the table's rows as JSON text) of one build of the mesh table."""
    memory = importlib.import_module(pkg.__name__ + ".memory")
    models = importlib.import_module(pkg.__name__ + ".models")
    spec = models.from_hf_config(str(config))
    o = memory.TrainingOptions(gpu_memory_gib=141)
    c0, w0 = time.process_time(), time.perf_counter()
    rows = memory.mesh_table(spec, ngpu, o)
    c1, w1 = time.process_time(), time.perf_counter()
    return c1 - c0, w1 - w0, json.dumps([m.to_dict() for m in rows])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--baseline", default="ea08d4a", help="commit whose mlite is the baseline")
    ap.add_argument("--pairs", type=int, default=5, help="alternating (ours, baseline) pairs per case")
    args = ap.parse_args()
    import mlite

    with tempfile.TemporaryDirectory() as tmp:
        base = load_baseline(args.baseline, Path(tmp))
        for name, ngpu, goal in CASES:
            config = ROOT / "data" / "models" / f"{name}.json"
            ours_cpu, base_cpu, ours_wall, base_wall, ratios = [], [], [], [], []
            same = True
            n_rows = 0
            for i in range(args.pairs):
                order = [(mlite, "ours"), (base, "base")] if i % 2 == 0 else [(base, "base"), (mlite, "ours")]
                got = {}
                for pkg, who in order:
                    got[who] = table(pkg, config, ngpu)
                ours_cpu.append(got["ours"][0])
                ours_wall.append(got["ours"][1])
                base_cpu.append(got["base"][0])
                base_wall.append(got["base"][1])
                ratios.append(got["base"][0] / got["ours"][0])
                same = same and got["ours"][2] == got["base"][2]
                n_rows = len(json.loads(got["ours"][2]))
            med = statistics.median(ours_cpu)
            verdict = "" if goal is None else f" (goal < {goal} s: {'met' if med < goal else 'NOT met'})"
            print(
                f"{name} on {ngpu} GPUs, {n_rows} valid meshes with estimates, {args.pairs} alternating pairs: "
                f"ours median {med:.3f} s cpu (min {min(ours_cpu):.3f}, max {max(ours_cpu):.3f}; wall median "
                f"{statistics.median(ours_wall):.3f}){verdict}; baseline {args.baseline} median "
                f"{statistics.median(base_cpu):.3f} s cpu (min {min(base_cpu):.3f}, max {max(base_cpu):.3f}; wall "
                f"median {statistics.median(base_wall):.3f}); ratio baseline/ours median {statistics.median(ratios):.2f}x "
                f"(min {min(ratios):.2f}, max {max(ratios):.2f}); tables {'identical' if same else 'DIFFERENT'}",
                flush=True,
            )


if __name__ == "__main__":
    main()
