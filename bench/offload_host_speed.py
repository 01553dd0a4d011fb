"""Host update of ``offload_fraction=1.0`` on CPU: the previous implementation next to the current one, same run.

    python3 bench/offload_host_speed.py --numel 33554432 --threads 1
    python3 bench/offload_host_speed.py --numel 150000000          # ~DENSE_SMALL, every core (gpu_speed's offload)

Both walk one state group's flat buffers (bf16 gradient and parameter staging, fp32 master or int16 remainder, fp32
moments) in chunks of :data:`mlite.runtime.optim.optimizer.CHUNK`, count the zero gradients and update in place.
``previous``: the code before the multi-tensor change (a zero count over the whole staging buffer, work buffers
allocated every step, int32 high-half and PAO forms of :mod:`mlite.runtime.optim.master`), kept here verbatim as the
baseline. ``current``: :func:`mlite.runtime.optim.host.update_chunk` with cached work buffers (the zero count now
runs on the device, before the copy: not timed here). The results must be bitwise equal; the script prints seconds per step, ns per element and the
ratio.
"""

from __future__ import annotations

import argparse
import json
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


def measure(numel: int, reps: int = 3, modes=("master", "remainder"), threads=(1, 4, 8)) -> dict:
    """Seconds per host update (best of ``reps``) of both implementations on ``numel`` elements, per mode, and the
    current one at several thread counts."""
    import torch

    from mlite.runtime.optim import host
    from mlite.runtime.optim.adamw import AdamWHyper, step_scalars
    from mlite.runtime.optim.master import split_fp32
    from mlite.runtime.optim.optimizer import CHUNK

    g = torch.Generator().manual_seed(0)
    master0 = torch.randn(numel, generator=g) * 0.02
    grad = (torch.randn(numel, generator=g) * 1e-3).bfloat16()
    grad[::97] = 0
    p0, r0 = split_fp32(master0)
    out = {"numel": numel, "threads": torch.get_num_threads(), "chunk": CHUNK, "modes": {}}
    for mode in modes:
        res, finals, times, zs = {}, {}, {}, {}
        for name in ("previous", "current"):
            bufs = {"exp_avg": torch.zeros(numel), "exp_avg_sq": torch.zeros(numel)}
            bufs["master" if mode == "master" else "remainder"] = master0.clone() if mode == "master" else r0.clone()
            finals[name] = (p0.clone(), bufs)
            times[name], zs[name] = [], []
        work = host.work_buffers(min(CHUNK, numel), "cpu")
        for t in range(1, reps + 1):  # interleaved, so that a change in machine load hits both alike
            sc = step_scalars(
                AdamWHyper(lr=1e-4, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1, step=t, clip_coef=0.7)
            )
            for name in ("previous", "current"):
                ps, bufs = finals[name]
                t0 = time.perf_counter()
                if name == "previous":
                    zs[name].append(previous_update(mode, ps, grad, bufs, sc, CHUNK))
                else:
                    current_update(mode, ps, grad, bufs, sc, CHUNK, work)
                times[name].append(time.perf_counter() - t0)
                if name == "current":  # counted on the device in the runtime (before the gradients are copied)
                    zs[name].append(numel - int(torch.count_nonzero(grad)))
        for name in ("previous", "current"):
            best = min(times[name])
            res[name] = {"s": best, "ns_per_elem": best / numel * 1e9, "zeros": zs[name], "all_s": times[name]}
        (pa, ba), (pb, bb) = finals["previous"], finals["current"]
        res["bitwise_equal"] = bool(
            torch.equal(pa.view(torch.int16), pb.view(torch.int16))
            and all(torch.equal(ba[k].view(-1).view(torch.int8), bb[k].view(-1).view(torch.int8)) for k in ba)
            and res["previous"]["zeros"] == res["current"]["zeros"]
        )
        res["previous/current"] = res["previous"]["s"] / res["current"]["s"]
        out["modes"][mode] = res
    out["current_master_by_threads"] = _thread_sweep(numel, master0, grad, p0, threads)
    return out


def _thread_sweep(numel, master0, grad, p0, threads) -> dict:
    """Seconds of one current master-mode update at several torch intra-op thread counts (diagnostic)."""
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
    finally:
        torch.set_num_threads(default)
    return out


def main() -> int:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--numel", type=int, default=1 << 25)
    ap.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)")
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    r = measure(a.numel, a.reps)
    print(json.dumps(r, indent=1))
    return 0 if all(m["bitwise_equal"] for m in r["modes"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
