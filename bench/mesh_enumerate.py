"""Time to enumerate and validate every mesh (goal: under 1 s each), against a brute-force baseline.

    .venv/bin/python bench/mesh_enumerate.py

Baseline: every (TP, PP, VPP, CP, EP, ETP) in the divisor box through the full validator, with no pruning.
Both must find the same valid meshes; the ratio is baseline time / ours.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mlite.mesh import ParallelConfig, divisors, enumerate_meshes, resolve
from mlite.models import from_hf_config

CASES = [("Kimi-K2-Instruct", 1024), ("Qwen3-235B-A22B", 256)]


def brute_force(spec, ngpu, max_vpp=8):
    found = set()
    ds = divisors(ngpu)
    for pp in ds:
        if pp > spec.num_layers:
            continue
        for vpp in range(1, max_vpp + 1):
            for tp in ds:
                for cp in ds:
                    for ep in ds:
                        for etp in ds:
                            if ngpu % (tp * cp * pp) or ngpu % (etp * ep * pp):
                                continue
                            cfg = ParallelConfig(tp=tp, pp=pp, vpp=vpp, cp=cp, ep=ep, etp=etp)
                            if resolve(spec, ngpu, cfg, auto_uneven=vpp == 1).valid:
                                found.add((tp, pp, vpp, cp, ep, etp))
    return found


def main():
    for name, ngpu in CASES:
        spec = from_hf_config(name)
        t0 = time.perf_counter()
        meshes = enumerate_meshes(spec, ngpu)
        ours = time.perf_counter() - t0
        t0 = time.perf_counter()
        brute = brute_force(spec, ngpu)
        base = time.perf_counter() - t0
        got = {
            (
                m.plan.parallel.tp,
                m.plan.parallel.pp,
                m.plan.parallel.vpp,
                m.plan.parallel.cp,
                m.plan.parallel.ep,
                m.plan.parallel.etp_size,
            )
            for m in meshes
        }
        same = "same meshes" if got == brute else f"DIFFERENT ({len(got ^ brute)} differ)"
        print(
            f"{name:18s} on {ngpu:5d} GPUs: {len(meshes):6d} valid meshes in {ours:6.3f} s "
            f"(goal < 1 s: {'met' if ours < 1 else 'missed'}); brute force {base:6.2f} s; ratio {base / ours:5.1f}x; "
            f"{same}"
        )


if __name__ == "__main__":
    main()
