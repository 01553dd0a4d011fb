"""Speed of the memory estimator: one estimate (goal < 1 ms) and the whole valid-mesh table for Kimi-K2 on
1024 GPUs (goal < 2 s), against a straightforward per-tensor baseline that must agree on the static bytes.

    .venv/bin/python bench/memory_speed.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mlite.memory import TrainingOptions, estimate, mesh_table
from mlite.mesh import ParallelConfig, pad_vocab, resolve
from mlite.models import from_hf_config


def baseline_static(spec, plan, o):
    """Per-tensor loop: the obvious way (dist_opt, bf16, fp32 grads and state) for the most loaded stage."""
    p = plan.parallel
    scale = pad_vocab(spec.vocab_size, p.tp) / spec.vocab_size
    best = 0.0
    for r in range(p.pp):
        dense = expert = 0.0
        for st in plan.stage_of_rank(r):
            groups = []
            if st.embedding:
                groups += list(spec.pre)
            for i in st.layers:
                groups += list(spec.main_layers[i].groups)
            for j in st.mtp:
                groups += [g for g in spec.mtp_layers[j].groups if not g.checkpoint_only]
            if st.head:
                groups += list(spec.post)
            for g in groups:
                if g.parallel == "expert":
                    expert += g.numel / (p.ep * p.etp_size)
                elif g.parallel == "tp":
                    dense += g.numel / p.tp
                elif g.parallel == "vocab":
                    dense += g.numel * scale / p.tp
                else:
                    dense += g.numel
        if p.pp > 1 and r == p.pp - 1 and spec.num_mtp_layers:
            dense += spec.vocab_size * spec.hidden_size * scale / p.tp
        local = dense + expert
        shard = dense / (plan.dp * p.cp) + expert / plan.edp
        best = max(best, 6 * local + 12 * shard)
    return best


def main():
    spec = from_hf_config("Kimi-K2-Instruct")
    o = TrainingOptions(gpu_memory_gib=141)
    plan = resolve(spec, 1024, ParallelConfig(pp=8, ep=64), auto_uneven=True)
    n = 2000
    t0 = time.perf_counter()
    for _ in range(n):
        est = estimate(spec, plan, o, explain=False)
    one = (time.perf_counter() - t0) / n
    t0 = time.perf_counter()
    for _ in range(50):
        base = baseline_static(spec, plan, o)
    one_base = (time.perf_counter() - t0) / 50
    agree = abs(max(r.static for r in est.ranks) - base) / base
    print(
        f"one estimate (Kimi-K2, 1024 GPUs, PP8 EP64): {one * 1e3:.3f} ms (goal < 1 ms: "
        f"{'met' if one < 1e-3 else 'missed'}); per-tensor baseline {one_base * 1e3:.3f} ms; ratio "
        f"{one_base / one:.1f}x; static bytes agree to {agree:.1e}"
    )
    t0 = time.perf_counter()
    table = mesh_table(spec, 1024, o)
    whole = time.perf_counter() - t0
    fit = sum(bool(m.fits) for m in table)
    print(
        f"whole table: {len(table)} valid meshes with estimates in {whole:.2f} s (goal < 2 s: "
        f"{'met' if whole < 2 else 'missed'}); {fit} fit on 141 GiB; best: {table[0].to_dict()['pp_layout']} "
        f"tp={table[0].plan.parallel.tp} pp={table[0].plan.parallel.pp} ep={table[0].plan.parallel.ep}; "
        f"baseline would take ~{one_base * len(table):.1f} s"
    )


if __name__ == "__main__":
    main()
