"""Host update of ``offload_fraction=1.0`` on CPU: the previous implementation next to the current one, same run.

    python3 bench/offload_host_speed.py --numel 33554432 --threads 1
    python3 bench/offload_host_speed.py --numel 150000000          # ~DENSE_SMALL, every core (gpu_speed's offload)
    python3 bench/offload_host_speed.py --numel 33554432 --reps 5 --modes master   # alternating, 5 reps

All walk one state group's flat buffers (bf16 gradient and parameter staging, fp32 master or int16 remainder, fp32
moments) and update in place. ``previous``: the code before the multi-tensor change (a zero count over the whole
staging buffer, work buffers allocated every step, int32 high-half and PAO forms of :mod:`mlite.runtime.optim.master`),
kept here verbatim as the baseline, in chunks of :data:`mlite.runtime.optim.optimizer.CHUNK`. ``current``: the eager
torch-op update :func:`mlite.runtime.optim.host.update_chunk` with cached work buffers, same chunks (the runtime's
path where the C kernel does not build; the zero count runs on the device: not timed here). ``fused``: the one-pass C
kernel of :mod:`mlite.runtime.optim.host_fused` in spans of ``CHUNK`` elements (the runtime's path on a host with a
C compiler). The three run in turn each rep (alternating, so that a change in machine load hits all alike; the
figures are the medians of ``--reps``, with min and max); the results must be bitwise equal. The script prints
seconds per step, ns per element and the ratios.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _previous_chunk(mode, p, grad, state, a, b, sc, work):
    """``ShardedAdamW._chunk`` before this change (verbatim, little-endian branch)."""
    from mlite.runtime.optim.adamw import adamw_inplace
    from mlite.runtime.optim.master import high_half_into_, merged_into_, split_from_pair_

    m, v = state["exp_avg"][a:b], state["exp_avg_sq"][a:b]
    fp = work["fp"]
    if mode == "master":
        master = state["master"][a:b]
        adamw_inplace(master, grad, m, v, sc, fp)
        high_half_into_(master, p, work["i32"])
    else:
        rem = state["remainder"][a:b]
        master = merged_into_(p, rem, work["pair"], work["i16"])
        adamw_inplace(master, grad, m, v, sc, fp)
        split_from_pair_(master, work["pair"], p, rem, work["i32"])


def _previous_work(n):
    import torch

    from mlite.runtime.optim.adamw import scratch

    return {
        "fp": scratch(n, "cpu"),
        "i32": torch.empty(n, dtype=torch.int32),
        "i16": torch.empty(n, dtype=torch.int16),
        "pair": torch.empty(n, 2, dtype=torch.int16),
    }


def previous_update(mode, ps, gs, bufs, sc, chunk) -> int:
    """The previous ``_update_staged`` host part (no device copies)."""
    n = gs.numel()
    zeros = int((gs == 0).sum())
    work = _previous_work(min(chunk, n))
    for a in range(0, n, chunk):
        b = min(a + chunk, n)
        _previous_chunk(mode, ps[a:b], gs[a:b], bufs, a, b, sc, work)
    return zeros


def current_update(mode, ps, gs, bufs, sc, chunk, work) -> None:
    """The current ``_update_staged`` host part (no device copies; its zero count runs on the device)."""
    from mlite.runtime.optim import host

    n = gs.numel()
    for a in range(0, n, chunk):
        b = min(a + chunk, n)
        host.update_chunk(mode, ps[a:b], gs[a:b], bufs, a, b, sc, work)


def fused_update(mode, ps, gs, bufs, sc, chunk) -> None:
    """The runtime's host update with the C kernel (:meth:`ShardedAdamW._update_staged_c`'s spans, one shard)."""
    from mlite.runtime.optim import host_fused

    n = gs.numel()
    for a in range(0, n, chunk):
        b = min(a + chunk, n)
        host_fused.update_range(mode, ps[a:b], gs[a:b], bufs, a, b, sc)


IMPLS = ("previous", "current", "fused")
"""The implementations, in the order each rep runs them."""


def measure(numel: int, reps: int = 3, modes=("master", "remainder"), threads=(1, 4, 8)) -> dict:
    """Seconds per host update (median of ``reps`` alternating reps, with ``min`` / ``max``) of the implementations
    on ``numel`` elements, per mode, and the eager and fused ones at several thread counts."""
    import torch

    from mlite.runtime.optim import host, host_fused
    from mlite.runtime.optim.adamw import AdamWHyper, step_scalars
    from mlite.runtime.optim.master import split_fp32
    from mlite.runtime.optim.optimizer import CHUNK

    g = torch.Generator().manual_seed(0)
    master0 = torch.randn(numel, generator=g) * 0.02
    grad = (torch.randn(numel, generator=g) * 1e-3).bfloat16()
    grad[::97] = 0
    p0, r0 = split_fp32(master0)
    out = {"numel": numel, "threads": torch.get_num_threads(), "chunk": CHUNK, "modes": {}}
    out["host_kernel"] = host_fused.status()
    impls = IMPLS if out["host_kernel"] == "ok" else IMPLS[:2]
    for mode in modes:
        res, finals, times, zs = {}, {}, {}, {}
        for name in impls:
            bufs = {"exp_avg": torch.zeros(numel), "exp_avg_sq": torch.zeros(numel)}
            bufs["master" if mode == "master" else "remainder"] = master0.clone() if mode == "master" else r0.clone()
            finals[name] = (p0.clone(), bufs)
            times[name], zs[name] = [], []
        work = host.work_buffers(min(CHUNK, numel), "cpu")
        for t in range(1, reps + 1):  # interleaved, so that a change in machine load hits both alike
            sc = step_scalars(
                AdamWHyper(lr=1e-4, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1, step=t, clip_coef=0.7)
            )
            for name in impls:
                ps, bufs = finals[name]
                t0 = time.perf_counter()
                if name == "previous":
                    zs[name].append(previous_update(mode, ps, grad, bufs, sc, CHUNK))
                elif name == "current":
                    current_update(mode, ps, grad, bufs, sc, CHUNK, work)
                else:
                    fused_update(mode, ps, grad, bufs, sc, CHUNK)
                times[name].append(time.perf_counter() - t0)
                if name != "previous":  # counted on the device in the runtime (before the gradients are copied)
                    zs[name].append(numel - int(torch.count_nonzero(grad)))
        for name in impls:
            med = statistics.median(times[name])
            res[name] = {
                "s": med,
                "min_s": min(times[name]),
                "max_s": max(times[name]),
                "ns_per_elem": med / numel * 1e9,
            }
            res[name].update(zeros=zs[name], all_s=times[name])
        pa, ba = finals["previous"]
        res["bitwise_equal"] = all(
            torch.equal(pa.view(torch.int16), pb.view(torch.int16))
            and all(torch.equal(ba[k].view(-1).view(torch.int8), bb[k].view(-1).view(torch.int8)) for k in ba)
            and res["previous"]["zeros"] == res[name]["zeros"]
            for name, (pb, bb) in finals.items()
        )
        res["previous/current"] = res["previous"]["s"] / res["current"]["s"]
        if "fused" in res:
            res["current/fused"] = res["current"]["s"] / res["fused"]["s"]
        out["modes"][mode] = res
    fused: dict | None = {} if "fused" in impls else None
    out["current_master_by_threads"] = _thread_sweep(numel, master0, grad, p0, threads, fused)
    if fused is not None:
        out["fused_master_by_threads"] = fused
    return out


def _thread_sweep(numel, master0, grad, p0, threads, fused=None) -> dict:
    """Seconds of one current master-mode update at several torch intra-op thread counts (diagnostic); the fused
    one's go into ``fused`` when given."""
    import torch

    from mlite.runtime.optim import host
    from mlite.runtime.optim.adamw import AdamWHyper, step_scalars
    from mlite.runtime.optim.optimizer import CHUNK

    default = torch.get_num_threads()
    sc = step_scalars(AdamWHyper(lr=1e-4, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1, step=1, clip_coef=0.7))
    bufs = {"exp_avg": torch.zeros(numel), "exp_avg_sq": torch.zeros(numel), "master": master0.clone()}
    work = host.work_buffers(min(CHUNK, numel), "cpu")
    ps = p0.clone()
    out = {}
    try:
        for t in sorted({x for x in threads if x <= default} | {default}):
            torch.set_num_threads(t)
            current_update("master", ps, grad, bufs, sc, CHUNK, work)
            t0 = time.perf_counter()
            current_update("master", ps, grad, bufs, sc, CHUNK, work)
            out[str(t)] = time.perf_counter() - t0
            if fused is not None:
                fused_update("master", ps, grad, bufs, sc, CHUNK)
                t0 = time.perf_counter()
                fused_update("master", ps, grad, bufs, sc, CHUNK)
                fused[str(t)] = time.perf_counter() - t0
    finally:
        torch.set_num_threads(default)
    return out


def main() -> int:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--numel", type=int, default=1 << 25)
    ap.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--modes", default="master,remainder", help="comma-separated: master, remainder")
    ap.add_argument("--sweep", default="1,4,8", help="thread counts of the master-mode sweep")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    r = measure(a.numel, a.reps, tuple(a.modes.split(",")), tuple(int(x) for x in a.sweep.split(",")))
    print(json.dumps(r, indent=1))
    return 0 if all(m["bitwise_equal"] for m in r["modes"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
