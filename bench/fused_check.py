"""The multi-tensor fused AdamW kernel against the host torch-op update, bitwise, on many shards at once.

    PYTHONPATH=$PWD:/path/to/triton TRITON_INTERPRET=1 python3 bench/fused_check.py --device cpu   # CPU (interpreter)
    python3 bench/fused_check.py --device cuda                                                     # the GPU

Every storage mode (fp32 params, fp32 master, PAO remainder), fp32 and bf16 moments, AdamW and Adam + L2, clip scale
1 and < 1, and a skipped step (``finite = 0``: nothing may change, the zero count still comes out). Each case is one
launch over a list of shards of awkward sizes -- empty, 1 element, smaller than a block, a block +- 1, several blocks
with a ragged tail -- one of them without a gradient, gradients with exact zeros, and (in one case) gradients of two
dtypes in the same launch. The reference is :func:`mlite.runtime.optim.adamw.adamw_inplace` per shard on the CPU
followed by :func:`~mlite.runtime.optim.master.split_fp32` (the host update of ``offload_fraction=1.0`` and of CPU
runs). ``bench/gpu_speed.py``'s ``check`` section runs :func:`check` on CUDA.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _sizes(block: int, large: bool) -> list[int]:
    out = [0, 1, 5, block - 1, block, block + 1, 3 * block + 77, 97, 2 * block - 3, 13]
    return out + ([(1 << 20) + 77, 4099 * 257] if large else [])


def _bits(t):
    import torch

    return t.contiguous().view({2: torch.int16, 4: torch.int32}[t.element_size()]).cpu()


def check(device: str, large: bool | None = None) -> dict:
    """Run every case on ``device``; returns ``{"cases": {name: {field: equal}}, "all_equal": bool}``."""
    import torch

    from mlite.runtime.optim import fused
    from mlite.runtime.optim.adamw import AdamWHyper, adamw_inplace, scratch, step_scalars
    from mlite.runtime.optim.master import split_fp32

    large = device != "cpu" if large is None else large
    sizes = _sizes(fused.BLOCK, large)
    offsets, acc = [], 0
    for n in sizes:
        offsets.append(acc)
        acc += n
    total = acc
    g = torch.Generator().manual_seed(0)
    master0 = torch.randn(total, generator=g)
    master0[::89] = torch.randn(len(master0[::89]), generator=g) * 1e-39  # subnormal masters
    m0 = torch.randn(total, generator=g) * 0.1
    v0 = torch.rand(total, generator=g) * 0.01
    grads32 = torch.randn(total, generator=g) * 0.05
    grads32[::101] = 0.0
    grads32[7::211] = 1e-41  # subnormal gradients (bf16 keeps them)
    no_grad = 2  # shard index without a gradient
    cases = {
        "master fp32-moments adamw clip=0.37": (fused.MODE_MASTER, torch.float32, True, 0.37, True, False),
        "remainder fp32-moments adamw clip=0.37": (fused.MODE_REMAINDER, torch.float32, True, 0.37, True, False),
        "param fp32-moments adamw clip=0.37": (fused.MODE_PARAM, torch.float32, True, 0.37, True, False),
        "master fp32-moments l2 clip=0.5": (fused.MODE_MASTER, torch.float32, False, 0.5, True, False),
        "remainder bf16-moments adamw clip=1": (fused.MODE_REMAINDER, torch.bfloat16, True, 1.0, True, False),
        "master bf16-moments l2 clip=1": (fused.MODE_MASTER, torch.bfloat16, False, 1.0, True, False),
        "master mixed-grad-dtypes adamw clip=0.37": (fused.MODE_MASTER, torch.float32, True, 0.37, True, True),
        "remainder skipped-step (finite=0)": (fused.MODE_REMAINDER, torch.float32, True, 0.37, False, False),
    }
    out: dict = {"cases": {}, "device": device, "shards": len(sizes), "elements": total}
    for name, (mode, mdt, decoupled, clip, apply, mixed) in cases.items():
        h = AdamWHyper(
            lr=1e-2, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1, step=3, decoupled=decoupled, clip_coef=clip
        )
        gdt = torch.float32 if mode == fused.MODE_PARAM else torch.bfloat16
        grads_h = [grads32[a : a + n].to(gdt) for a, n in zip(offsets, sizes)]
        if mixed:  # odd shards get fp32 gradients (values bf16-exact, so the reference is the same)
            grads_h = [x.float() if i % 2 else x for i, x in enumerate(grads_h)]
        grads_h[no_grad] = None
        # ---- two steps: the reference on the host shard by shard, the kernel in one launch over every shard, the
        # second step with new gradient tensors (new addresses: the launch must rebuild its table)
        ref = master0.clone()
        mr, vr = m0.to(mdt, copy=True), v0.to(mdt, copy=True)
        p16, rem0 = split_fp32(master0)
        if mode == fused.MODE_PARAM:
            p_all, w = master0.clone().to(device), None
        else:
            p_all = p16.clone().to(device)
            w = (master0.clone() if mode == fused.MODE_MASTER else rem0.clone()).to(device)
        params = [p_all[a : a + n] for a, n in zip(offsets, sizes)]
        mt, vt = m0.to(mdt, copy=True).to(device), v0.to(mdt, copy=True).to(device)
        launch = fused.MultiTensorLaunch(sizes, offsets, device)
        scale = fused.scale_tensor(clip, device, apply=apply)
        zeros_ok, keys = [], []
        for step in (1, 2):
            sc = step_scalars(dataclasses.replace(h, step=step))
            if apply:
                for i, (a, n) in enumerate(zip(offsets, sizes)):
                    if n:
                        adamw_inplace(ref[a : a + n], grads_h[i], mr[a : a + n], vr[a : a + n], sc, scratch(n, "cpu"))
            # separate tensors (not views of one buffer) for the gradients, as FSDP2 hands them over
            grads_d = [None if x is None else x.clone().to(device) for x in grads_h]
            z = launch(params, grads_d, w, mt, vt, mode, sc, scale)
            zeros_ok.append(int(z) == sum(int((x == 0).sum()) for x in grads_h if x is not None))
            keys.append(launch._key)
            launch.table(params, grads_d)
            keys.append(launch._key)
        hi_ref, rem_ref = split_fp32(ref)
        res = {
            "m": torch.equal(_bits(mt), _bits(mr)),
            "v": torch.equal(_bits(vt), _bits(vr)),
            "zeros": all(zeros_ok),
            "p": torch.equal(_bits(p_all), _bits(ref if mode == fused.MODE_PARAM else hi_ref)),
        }
        if w is not None:
            res["w"] = torch.equal(_bits(w), _bits(ref if mode == fused.MODE_MASTER else rem_ref))
        res["table_cached_then_rebuilt"] = keys[0] == keys[1] and keys[1] != keys[2] and keys[2] == keys[3]
        res["changed"] = apply != torch.equal(_bits(p_all), _bits(p16 if mode != fused.MODE_PARAM else master0))
        out["cases"][name] = res
    out["all_equal"] = all(all(r.values()) for r in out["cases"].values())
    return out


TIE_HIGHS = (0x3F80, 0x3F81, 0xBF80, 0xBF81, 0x0000, 0x0001, 0x8000, 0x8001, 0x4B7E, 0x4B7F, 0xC2FE, 0xC2FF, 0x7F7E)
"""High halves of the tie masters: even and odd, both signs, the smallest subnormals, large and near-largest finite."""


def ties(device: str) -> dict:
    """Masters whose low 16 bits are exactly 0x8000 (the tie), a zero update (zero gradient and moments), through the
    kernel in every storage mode: the bf16 param must be the high half rounded away from zero (+1 on the bit pattern,
    odd and even alike), the fp32 master / fp32 param unchanged, the remainder -0x8000. Returns ``{mode: {check:
    holds}}`` (a random master is a tie with probability 2^-16, so :func:`check` never meets one)."""
    import torch

    from mlite.runtime.optim import fused
    from mlite.runtime.optim.adamw import AdamWHyper, step_scalars
    from mlite.runtime.optim.master import split_fp32

    n = fused.BLOCK + 37  # a whole block and a partial one
    high = torch.tensor(TIE_HIGHS, dtype=torch.int32).repeat(n // len(TIE_HIGHS) + 1)[:n]
    master = ((high << 16) | 0x8000).view(torch.float32).to(device)
    grad = torch.zeros(n, dtype=torch.bfloat16, device=device)
    sc = step_scalars(AdamWHyper(lr=1e-2, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.0, step=1))
    away = ((high + 1) & 0xFFFF).to(torch.int16)  # the high half + 1 (ties away from zero, in magnitude)
    out: dict = {}
    for mode in (fused.MODE_MASTER, fused.MODE_REMAINDER, fused.MODE_PARAM):
        m, v = torch.zeros(n, device=device), torch.zeros(n, device=device)
        zeros = torch.zeros(fused.blocks(n), dtype=torch.int32, device=device)
        p16, rem = split_fp32(master)
        if mode == fused.MODE_PARAM:
            p, w = master.clone(), None
        else:
            p, w = p16.clone(), (master.clone() if mode == fused.MODE_MASTER else rem.clone())
        fused.launch(p, grad, w, m, v, zeros, mode, sc)
        if mode == fused.MODE_PARAM:
            ok = {"fp32 param unchanged": torch.equal(_bits(p), _bits(master))}
        else:
            got = _bits(p)
            ok = {
                "param rounded away from zero": torch.equal(got, away),
                "param differs from nearest-even on even highs": bool(
                    (got != _bits(master.to(torch.bfloat16)))[(high & 1) == 0].all()
                ),
            }
            if mode == fused.MODE_MASTER:
                ok["master unchanged"] = torch.equal(_bits(w), _bits(master))
            else:
                ok["remainder -0x8000"] = bool((w.cpu() == -0x8000).all())
        out[mode] = ok
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--large", action="store_true", help="add shards of ~1 M elements (default on CUDA)")
    ap.add_argument("--ties", action="store_true", help="the exact-tie masters in every storage mode instead")
    a = ap.parse_args()
    if a.ties:
        t = ties(a.device)
        print(json.dumps(t, indent=1))
        return 0 if all(all(ok.values()) for ok in t.values()) else 1
    r = check(a.device, large=True if a.large else None)
    print(json.dumps(r, indent=1))
    return 0 if r["all_equal"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
