"""Speed of the lite runtime on one GPU next to Hugging Face transformers + plain FSDP2, in the same process.

    python3 bench/gpu_speed.py --out bench/results                 # on the GPU: gpu_speed_raw.json + gpu_speed.csv
    python3 bench/gpu_speed.py --report bench/results/gpu_speed_raw.json --csv bench/results/gpu_speed.csv
    python3 bench/gpu_speed.py --out /tmp/x --device cpu --tiny    # the same code paths on CPU, tiny models
    TRITON_INTERPRET=1 python3 bench/gpu_speed.py --out /tmp/x --device cpu --tiny --kernel triton   # + the kernel
    python3 bench/gpu_speed.py --out DIR --only dense,moe --merge EARLIER/gpu_speed_raw.json   # add sections

Sections (each timed; each row written to the CSV as soon as its section ends; a failing section is recorded and the
next one runs):
  check        the multi-tensor fused AdamW kernel against the host torch-op update (bench/fused_check.py: every
               storage mode, fp32 and bf16 moments, awkward shard sizes, a skipped step): bitwise equal or not; the
               device clip scale vs the host coefficient; the kernel alone on 268 M elements in 200 shards against
               a plain copy's rate; which attention / expert paths the build chose.
  pao_bitwise  tiny-moe in bf16 on CUDA, PAO vs fp32 master, 50 steps in lockstep (same gradient bits): weights equal.
  recompute    tiny-moe bf16, packed SFT data (sequences of unequal lengths): 4 steps with recompute none / selective /
               full; 1 = completed; first losses compared.
  dense, moe   in --pairs alternating pairs (default 3; lite then transformers, each built afresh; the CSV ratio: the
               median pair's, with its min and max rows): the ~1.1 B dense (bench/gpu_configs.py DENSE_1B) and the ~0.7 B MoE (MOE_SMALL, 32 experts top-4), bf16,
               4096-token micro-batches, 1 and 4 per step: lite runtime (fsdp2, fp32 master) vs transformers
               (sdpa; the MoE with its default grouped_mm experts) under fully_shard per decoder layer + root
               (MixedPrecisionPolicy bf16 compute, fp32 reduce; fp32 parameters; torch AdamW fused): tokens/s of whole
               optimizer steps, phase split (forward+backward, optimizer), MFU = model FLOPs/token x tokens/s /
               989 TFLOP/s. Optimizer phase alone (grads present, norm + clip + update, repeated): lite fp32 master,
               lite PAO, and torch (clip_grad_norm_ foreach + AdamW(fused=True)) on fp32 tensors of the same shapes;
               the lite phase against the memory-traffic floor (30 bytes/param at the card's measured copy rate).
  offload      DENSE_SMALL (~0.15 B), one micro-batch: offload_fraction 1.0 vs resident step time in --pairs
               alternating pairs (the CSV: the median pair's ratio, with its min and max rows); one offload run with
               the eager host update (host_kernel=torch) against the median resident step; then the host update
               alone, previous / eager / fused C kernel, same element count (bench/offload_host_speed.py).
  aligned      the kernel variant with alignment hints (vector accesses; not used by the runtime yet): bitwise equal
               to the plain one, and its bandwidth.
  compile      RuntimeConfig.compile=True on the dense model, 1 and 4 micro-batches (the CSV: its MFU at 4).
"""

from __future__ import annotations

import argparse
import csv
import gc
import json
import math
import statistics
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_configs import DENSE_1B, DENSE_SMALL, MOE_SMALL, cpu_sized
from result_csv import COLUMNS  # the CSV contract of the GPU rows (issue 13), one definition for every bench

PEAK_BF16 = 989e12
"""H100/H200 SXM dense bf16 peak (vendor datasheet), the MFU denominator."""
REPORT_CMD = "python3 bench/gpu_speed.py --report bench/results/gpu_speed_raw.json --csv bench/results/gpu_speed.csv"
"""The step that turns the raw JSON into the CSV (tests/test_bench_results.py re-runs it)."""

TINY_DENSE = cpu_sized(DENSE_SMALL, intermediate_size=256)
TINY_MOE = cpu_sized(MOE_SMALL, moe_intermediate_size=64, num_experts=8, num_experts_per_tok=2)


class Env:
    """Device, sizes and timing helpers of one benchmark process."""

    def __init__(self, device: str, tiny: bool):
        self.device, self.tiny = device, tiny
        self.seq = 256 if tiny else 4096
        self.dense, self.moe = (TINY_DENSE, TINY_MOE) if tiny else (DENSE_1B, MOE_SMALL)
        self.small = TINY_DENSE if tiny else DENSE_SMALL
        self.warm, self.iters = (1, 2) if tiny else (2, 4)
        self.copy_rate = None
        """Device copy rate (bytes/s), measured once (the optimizer floor's denominator)."""
        self.pairs = 3
        """Alternating lite / transformers pairs of the dense and moe sections."""
        self.kernel = "auto"
        """ShardedAdamW update path of the lite runs (``triton`` on CPU under TRITON_INTERPRET=1: the smoke)."""

    def sync(self):
        import torch

        if self.device == "cuda":
            torch.cuda.synchronize()

    def free(self):
        import torch

        gc.collect()
        if self.device == "cuda":
            torch.cuda.empty_cache()

    def peak(self):
        import torch

        return torch.cuda.max_memory_allocated() if self.device == "cuda" else None

    def reset_peak(self):
        import torch

        if self.device == "cuda":
            torch.cuda.reset_peak_memory_stats()


def _runtime(env, cfg, opt=None, **kw):
    from mlite.runtime.config import MegatronLiteConfig, OptimizerConfig, RuntimeConfig
    from mlite.runtime.runtime import create_runtime

    impl = kw.pop("impl_cfg", {})
    return create_runtime(
        RuntimeConfig(
            hf_path=cfg,
            device=env.device,
            param_dtype="bf16",
            backend_cfg=(MegatronLiteConfig(optimizer=OptimizerConfig(lr=1e-4, **(opt or {})), impl_cfg=impl)),
            **kw,
        )
    )


def _batches(env, n, vocab, seed=0):
    import torch

    from mlite.runtime.batch import PackedBatch

    g = torch.Generator().manual_seed(seed)
    return [
        PackedBatch.from_sequences([torch.randint(0, vocab, (env.seq,), generator=g).tolist()]).to(env.device)
        for _ in range(n)
    ]


def _timed(env, fb, opt, warm, iters):
    """Mean step time of ``fb(); opt()`` over ``iters`` steps, then two more steps timed phase by phase."""
    for _ in range(warm):
        fb()
        opt()
    env.sync()
    t = time.perf_counter()
    for _ in range(iters):
        fb()
        opt()
    env.sync()
    step = (time.perf_counter() - t) / iters
    ph = {"forward_backward": 0.0, "optimizer": 0.0}
    for _ in range(2):
        t = time.perf_counter()
        fb()
        env.sync()
        ph["forward_backward"] += (time.perf_counter() - t) / 2
        t = time.perf_counter()
        opt()
        env.sync()
        ph["optimizer"] += (time.perf_counter() - t) / 2
    return step, ph


def mfu(cfg: dict, seq: int, tokens_per_s: float) -> float:
    """Model FLOPs utilisation: today's FLOPs/token of ``cfg`` at ``seq`` x tokens/s / :data:`PEAK_BF16` (the report
    recomputes it from the raw tokens/s, so a change to ``mlite.models.flops`` reaches the CSV)."""
    from mlite.models import from_hf_config

    return from_hf_config(cfg).flops_per_token(seq) * tokens_per_s / PEAK_BF16


def _rates(env, cfg, n_mb, step, ph):
    from mlite.models import from_hf_config

    fpt = from_hf_config(cfg).flops_per_token(env.seq)
    tokens = env.seq * n_mb
    return {
        "step_s": step,
        "tokens_per_s": tokens / step,
        "flops_per_token": fpt,
        "mfu": mfu(cfg, env.seq, tokens / step),
        "phase_s": ph,
        "peak_bytes": env.peak(),
    }


def lite_run(env, cfg, mbs_list, opt=None, host_kernel="auto", **kw):
    """Throughput of the lite runtime at each micro-batch count; returns (results, runtime, handle)."""
    rt = _runtime(env, cfg, opt, **kw)
    h = rt.build_model()
    h.optimizer.kernel = env.kernel
    h.optimizer.host_kernel = host_kernel
    out = {}
    for n_mb in mbs_list:
        mbs = _batches(env, n_mb, cfg["vocab_size"])
        env.reset_peak()

        def fb(mbs=mbs, n_mb=n_mb):
            rt.forward_backward(h, mbs, num_microbatches=n_mb)

        def opt_():
            rt.optimizer_step(h)
            rt.zero_grad(h)

        step, ph = _timed(env, fb, opt_, env.warm, env.iters)
        out[f"mb{n_mb}"] = _rates(env, cfg, n_mb, step, ph)
    return out, rt, h


def lite_optimizer_phase(env, rt, h, reps=5):
    """Optimizer phase alone: grads of one micro-batch present, ``optimizer_step`` repeated."""
    rt.zero_grad(h)
    rt.forward_backward(h, _batches(env, 1, h.spec.vocab_size if h.spec else 512, seed=1))
    rt.optimizer_step(h)
    env.sync()
    t = time.perf_counter()
    for _ in range(reps):
        rt.optimizer_step(h)
    env.sync()
    dt = (time.perf_counter() - t) / reps
    n = sum(s.param.numel() for s in h.optimizer.slots)
    rt.zero_grad(h)
    out = {"s": dt, "params": n, "bytes_per_s_at_30B": 30 * n / dt}
    if env.copy_rate:  # the memory-traffic floor: 30 bytes per parameter at the card's measured copy rate
        out["floor_s"] = 30 * n / env.copy_rate
        out["vs_floor"] = dt / out["floor_s"]
    return out


def torch_fused_phase(env, shapes, reps=5):
    """torch's fused AdamW (and clip_grad_norm_ foreach) on fp32 tensors of the given shapes (fp32 grads)."""
    import torch

    g = torch.Generator(device=env.device).manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(s, device=env.device, generator=g) * 0.02) for s in shapes]
    for p in params:
        p.grad = torch.randn(p.shape, device=env.device, generator=g) * 1e-3
    opt = torch.optim.AdamW(params, lr=1e-4, fused=True)

    def step(clip):
        if clip:
            torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=True)
        opt.step()

    out = {}
    for clip in (False, True):
        step(clip)
        env.sync()
        t = time.perf_counter()
        for _ in range(reps):
            step(clip)
        env.sync()
        out["with_clip_s" if clip else "step_only_s"] = (time.perf_counter() - t) / reps
    out["params"] = sum(p.numel() for p in params)
    return out


def hf_run(env, cfg, mbs_list):
    """transformers model + fully_shard per layer + root, fused AdamW, at each micro-batch count."""
    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from transformers import AutoConfig, AutoModelForCausalLM

    c = {k: v for k, v in cfg.items() if k not in ("architectures", "model_type")}
    hc = AutoConfig.for_model(cfg["model_type"], **c)
    with torch.device(env.device):
        model = AutoModelForCausalLM.from_config(hc, dtype=torch.float32, attn_implementation="sdpa")
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in model.model.layers:
        fully_shard(layer, mp_policy=mp)
    fully_shard(model, mp_policy=mp)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=env.device == "cuda")
    out = {
        "experts_implementation": getattr(model.config, "_experts_implementation", None),
        "attn_implementation": getattr(model.config, "_attn_implementation", None),
    }
    g = torch.Generator().manual_seed(0)
    for n_mb in mbs_list:
        ids = [torch.randint(0, cfg["vocab_size"], (1, env.seq), generator=g).to(env.device) for _ in range(n_mb)]
        env.reset_peak()

        def fb(ids=ids, n_mb=n_mb):
            for x in ids:
                (model(input_ids=x, labels=x).loss / n_mb).backward()

        def opt_():
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)

        step, ph = _timed(env, fb, opt_, env.warm, env.iters)
        out[f"mb{n_mb}"] = _rates(env, cfg, n_mb, step, ph)
    return out


def _median_run(runs: list[dict]) -> dict:
    """The run of median tokens/s (the lower middle one of an even count)."""
    return sorted(runs, key=lambda m: m["tokens_per_s"])[(len(runs) - 1) // 2]


def _model_section(env, res, key, cfg):
    """Lite vs transformers in ``env.pairs`` alternating pairs (lite, then transformers, each built afresh): the
    ratios are per pair, ``ratio_mbN`` their median and ``ratio_spread_mbN`` [min, max]; ``lite`` / ``hf_fsdp2``
    hold the median-tokens/s run of each side. The optimizer phases run once, after the first lite run."""
    out = res.setdefault(key, {})
    if env.device == "cuda" and not env.copy_rate:
        env.copy_rate = copy_bandwidth(env)
    out["copy_bytes_per_s"] = env.copy_rate
    pairs: list[dict] = []
    out["pairs"] = pairs
    shapes = []
    for i in range(env.pairs):
        lite, rt, h = lite_run(env, cfg, (1, 4))
        if i == 0:
            out["lite_optimizer"] = lite_optimizer_phase(env, rt, h)
            shapes = [
                tuple(s.param.to_local().shape) if hasattr(s.param, "to_local") else tuple(s.param.shape)
                for s in h.optimizer.slots
            ]
            out["paths"] = _paths(h)
        del rt, h
        env.free()
        hf = hf_run(env, cfg, (1, 4))
        env.free()
        pair = {"lite": lite, "hf_fsdp2": hf}
        for mb in ("mb1", "mb4"):
            pair[f"ratio_{mb}"] = lite[mb]["tokens_per_s"] / hf[mb]["tokens_per_s"]
        pairs.append(pair)
        print(
            f"   {key} pair {i + 1}: " + ", ".join(f"{mb} {pair[f'ratio_{mb}']:.3f}" for mb in ("mb1", "mb4")),
            flush=True,
        )
        _save(env, res)
    for side in ("lite", "hf_fsdp2"):
        out[side] = {mb: _median_run([p[side][mb] for p in pairs]) for mb in ("mb1", "mb4")}
    out["hf_fsdp2"].update({k: v for k, v in pairs[0]["hf_fsdp2"].items() if not k.startswith("mb")})
    for mb in ("mb1", "mb4"):
        ratios = sorted(p[f"ratio_{mb}"] for p in pairs)
        out[f"ratio_{mb}"] = statistics.median(ratios)
        out[f"ratio_spread_{mb}"] = [ratios[0], ratios[-1]]
    _save(env, res)
    out["torch_fused"] = torch_fused_phase(env, shapes)
    env.free()
    rt = _runtime(env, cfg, {"use_precision_aware_optimizer": True})
    h = rt.build_model()
    h.optimizer.kernel = env.kernel
    out["lite_pao_optimizer"] = lite_optimizer_phase(env, rt, h)
    del rt, h
    env.free()
    _print_optimizer(key, out)


def _print_optimizer(key, out):
    """The optimizer phase next to torch's fused AdamW and the 30 bytes/param floor."""
    tf = out.get("torch_fused", {}).get("with_clip_s")
    for name in ("lite_optimizer", "lite_pao_optimizer"):
        r = out.get(name)
        if not r:
            continue
        line = f"   {key} {name}: {r['s'] * 1e3:.2f} ms for {r['params'] / 1e9:.3f} B params"
        if tf:
            line += f" = {r['s'] / tf:.2f} x torch clip+fused AdamW ({tf * 1e3:.2f} ms)"
        if "floor_s" in r:
            line += f" = {r['vs_floor']:.2f} x the 30 B/param floor ({r['floor_s'] * 1e3:.2f} ms at the copy rate)"
        print(line, flush=True)


def _paths(h) -> dict:
    blocks = list(getattr(h.model, "blocks", []))
    attn = sorted({b.self_attn.packed for b in blocks if hasattr(b, "self_attn")})
    experts = sorted({b.mlp.experts.path for b in blocks if getattr(b, "mlp_kind", "") == "moe"})
    return {"packed_attention": attn, "experts": experts}


def sec_check(env, res):
    """The multi-tensor kernel vs the host torch-op update, bitwise (bench/fused_check.py: every storage mode, fp32
    and bf16 moments, awkward shard sizes, a skipped step), the device clip scale vs the host coefficient, the
    kernel's bandwidth against a plain copy, and which attention / expert paths the build chose. On CPU the kernel
    part runs only under ``TRITON_INTERPRET=1``."""
    import os

    import torch

    from mlite.runtime.models.attention import packed_path
    from mlite.runtime.models.moe import expert_path
    from mlite.runtime.optim import fused

    out = {
        "packed_path": packed_path(env.device, torch.bfloat16),
        "expert_path": expert_path(env.device, torch.bfloat16),
        "have_triton": fused.HAVE_TRITON,
    }
    res["check"] = out
    out["clip_scale_equals_host"] = _check_clip_scale(env.device)
    if not fused.HAVE_TRITON or (env.device == "cpu" and os.environ.get("TRITON_INTERPRET") != "1"):
        return
    import triton
    from fused_check import check

    out["triton"] = triton.__version__
    r = check(env.device)
    out["cases"] = r["cases"]
    out["shards"], out["elements"] = r["shards"], r["elements"]
    out["kernel_equals_host_update"] = r["all_equal"]
    if env.device == "cuda":
        out["bandwidth"] = kernel_bandwidth(env)


def _check_clip_scale(device) -> bool:
    """``clip_scale`` on ``device`` == ``clip_coefficient`` on the host rounded to fp32, for 4000 norms."""
    import torch

    from mlite.runtime.optim.clip import clip_coefficient, clip_scale

    g = torch.Generator().manual_seed(3)
    norms = torch.cat([torch.rand(2000, generator=g) * 3, torch.rand(2000, generator=g) * 1e4]).double()
    got = clip_scale(norms.to(device), 1.0).cpu()  # elementwise: the same float64 ops as on one norm
    want = torch.tensor([clip_coefficient(x, 1.0) for x in norms.tolist()], dtype=torch.float32)
    ok = bool(torch.equal(got[0], want) and bool((got[1] == 1).all()))
    if torch.device(device).type == "cuda":  # the device norm's sqrt is math.sqrt's (CPU runs use math.sqrt)
        sq = norms * 1e3
        ok &= torch.equal(
            sq.to(device).sqrt().cpu(), torch.tensor([math.sqrt(x) for x in sq.tolist()], dtype=torch.float64)
        )
    return ok


def copy_bandwidth(env, nbytes: int = 1 << 31) -> float:
    """Device-to-device copy rate (bytes read + written per second) of a ``nbytes`` buffer."""
    import torch

    a = torch.empty(nbytes, dtype=torch.uint8, device=env.device)
    b = torch.empty_like(a)
    b.copy_(a)
    env.sync()
    t = time.perf_counter()
    for _ in range(5):
        b.copy_(a)
    env.sync()
    dt = (time.perf_counter() - t) / 5
    del a, b
    env.free()
    return 2 * nbytes / dt


def kernel_bandwidth(env, numel: int = 1 << 28, shards: int = 200, aligned: bool = False) -> dict:
    """The fused kernel alone on ``numel`` elements in ``shards`` shards (fp32 master and PAO): time per launch and
    the rate at 28 / 26 bytes per element, next to a plain copy's rate (``aligned``: the variant with alignment
    hints; shard sizes are multiples of 8 either way)."""
    import torch

    from mlite.runtime.optim import fused
    from mlite.runtime.optim.adamw import AdamWHyper, step_scalars

    sizes = [numel // shards // 8 * 8] * (shards - 1)
    sizes.append(numel - sum(sizes))
    offsets = [sum(sizes[:i]) for i in range(shards)]
    dev = env.device
    out = {
        "numel": numel,
        "shards": shards,
        "aligned": aligned,
        "copy_bytes_per_s": env.copy_rate or copy_bandwidth(env),
    }
    env.copy_rate = out["copy_bytes_per_s"]
    sc = step_scalars(AdamWHyper(lr=1e-4, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1, step=2, clip_coef=0.5))
    for mode, key, bpe in ((fused.MODE_MASTER, "master", 28), (fused.MODE_REMAINDER, "remainder", 26)):
        params = [torch.randn(n, device=dev).bfloat16() for n in sizes]
        grads = [torch.randn(n, device=dev).bfloat16() * 1e-3 for n in sizes]
        w = (
            torch.randn(numel, device=dev)
            if mode == fused.MODE_MASTER
            else torch.zeros(numel, dtype=torch.int16, device=dev)
        )
        m, v = torch.zeros(numel, device=dev), torch.zeros(numel, device=dev)
        launch = fused.MultiTensorLaunch(sizes, offsets, dev, aligned=aligned)
        scale = fused.scale_tensor(1.0, dev)
        launch(params, grads, w, m, v, mode, sc, scale)
        env.sync()
        t = time.perf_counter()
        for _ in range(5):
            launch(params, grads, w, m, v, mode, sc, scale)
        env.sync()
        dt = (time.perf_counter() - t) / 5
        out[key] = {"s": dt, "bytes_per_elem": bpe, "bytes_per_s": bpe * numel / dt}
        out[key]["of_copy_rate"] = out[key]["bytes_per_s"] / out["copy_bytes_per_s"]
        del params, grads, w, m, v, launch
        env.free()
    return out


def sec_pao(env, res):
    """PAO vs fp32 master in lockstep on the device (same gradient bits each step)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from runtime_workers import lockstep

    r = lockstep(0, env.device, {}, {"use_precision_aware_optimizer": True}, 50)
    res["pao_bitwise"] = {
        "params_differ": r["params"],
        "masters_differ": r["masters"],
        "losses_equal": r["losses"][0] == r["losses"][1],
        "first_loss": r["losses"][0][0],
        "last_loss": r["losses"][0][-1],
        "steps": 50,
        "equal": not r["params"] and not r["masters"] and r["losses"][0] == r["losses"][1],
    }


def sec_recompute(env, res):
    """Recompute modes with packed data of unequal lengths (the default SFT dataset)."""
    from mlite.runtime.data import sft_iterator

    out = {}
    for mode in ("none", "selective", "full"):
        rt = _runtime(env, "tiny-moe", impl_cfg={"recompute": mode})
        h = rt.build_model()
        it = sft_iterator(tokens_per_microbatch=1024, seed=0)
        losses, lens = [], []
        for _ in range(4):
            mbs = [b.to(env.device) for b in next(it)]
            lens.append([list(b.lengths) for b in mbs])
            losses.append(rt.train_step(h, mbs)["loss"])
        out[mode] = {
            "losses": losses,
            "completed": True,
            "paths": _paths(h),
            "unequal_lengths": any(len(set(x)) > 1 for step in lens for x in step),
        }
        del rt, h
        env.free()
        res["recompute"] = out
    out["first_loss_abs_diff"] = {m: abs(out[m]["losses"][0] - out["none"]["losses"][0]) for m in ("selective", "full")}


def sec_offload(env, res):
    """offload_fraction 1.0 vs resident step time on DENSE_SMALL in ``env.pairs`` alternating pairs (resident, then
    offload, each built afresh; ``ratio``: the median pair's, ``ratio_spread`` [min, max]; ``resident`` /
    ``offload_1.0`` hold the median-step-time run of each side), one offload run with the eager host update
    (``host_kernel="torch"``, the previous path) against the median resident step, then the host update alone
    (previous, eager and fused implementations, bench/offload_host_speed.py) on the same element count."""
    from mlite.runtime.optim import host_fused

    out = res["offload"] = {}
    out["host_kernel"] = host_fused.status()
    pairs: list[dict] = []
    out["pairs"] = pairs
    n = 0
    for i in range(env.pairs):
        pair = {}
        for name, opt in (("resident", {}), ("offload_1.0", {"offload_fraction": 1.0})):
            r, rt, h = lite_run(env, env.small, (1,), opt)
            pair[name] = r["mb1"]
            n = sum(s.param.numel() for s in h.optimizer.slots)
            del rt, h
            env.free()
        pair["ratio"] = pair["offload_1.0"]["step_s"] / pair["resident"]["step_s"]
        pairs.append(pair)
        print(f"   offload pair {i + 1}: {pair['ratio']:.3f}", flush=True)
        _save(env, res)
    for side in ("resident", "offload_1.0"):
        out[side] = sorted((p[side] for p in pairs), key=lambda m: m["step_s"])[(len(pairs) - 1) // 2]
    ratios = sorted(p["ratio"] for p in pairs)
    out["ratio"] = statistics.median(ratios)
    out["ratio_spread"] = [ratios[0], ratios[-1]]
    _save(env, res)
    r, rt, h = lite_run(env, env.small, (1,), {"offload_fraction": 1.0}, host_kernel="torch")
    out["offload_1.0_eager_host"] = r["mb1"]
    out["eager_host_ratio"] = r["mb1"]["step_s"] / out["resident"]["step_s"]
    del rt, h
    env.free()
    _save(env, res)
    from offload_host_speed import measure as host_measure

    out["host_update"] = host_measure(n, reps=3)
    for mode, m in out["host_update"]["modes"].items():
        fused = f", fused {m['fused']['s'] * 1e3:.1f} ms" if "fused" in m else ""
        print(
            f"   host update {mode}: previous {m['previous']['s'] * 1e3:.1f} ms, current {m['current']['s'] * 1e3:.1f}"
            f" ms{fused} (bitwise equal {m['bitwise_equal']}), {n / 1e6:.0f} M elements,"
            f" {out['host_update']['threads']} threads, host kernel {out['host_kernel']}",
            flush=True,
        )


def sec_aligned(env, res):
    """The kernel variant with alignment hints (not used by the runtime yet): bitwise equal to the plain one over two
    steps on shards of multiple-of-8 sizes (fp32 master and PAO), and its bandwidth."""
    import torch

    from mlite.runtime.optim import fused
    from mlite.runtime.optim.adamw import AdamWHyper, step_scalars

    out = {}
    res["aligned"] = out
    sizes = [8, 2048 * 8, 8 * 1001, 1 << 20, 2048 * 3 + 8]
    offsets = [sum(sizes[:i]) for i in range(len(sizes))]
    n = sum(sizes)
    for mode in (fused.MODE_MASTER, fused.MODE_REMAINDER):
        finals = []
        for aligned in (False, True):
            g = torch.Generator(device=env.device).manual_seed(1)
            params = [torch.randn(k, device=env.device, generator=g).bfloat16() for k in sizes]
            if mode == fused.MODE_MASTER:
                w = torch.randn(n, device=env.device, generator=g)
            else:
                w = (torch.randn(n, device=env.device, generator=g) * 1000).to(torch.int16)
            m, v = torch.zeros(n, device=env.device), torch.zeros(n, device=env.device)
            launch = fused.MultiTensorLaunch(sizes, offsets, env.device, aligned=aligned)
            for step in (1, 2):
                grads = [torch.randn(k, device=env.device, generator=g).bfloat16() for k in sizes]
                sc = step_scalars(
                    AdamWHyper(lr=1e-2, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1, step=step, clip_coef=0.5)
                )
                launch(params, grads, w, m, v, mode, sc, fused.scale_tensor(0.5, env.device))
            finals.append([torch.cat(params).view(torch.int16), w.view(-1), m, v])
        out[f"mode={mode} equal"] = all(torch.equal(a.cpu(), b.cpu()) for a, b in zip(*finals))
    if env.device == "cuda":
        out["bandwidth"] = kernel_bandwidth(env, aligned=True)


def sec_compile(env, res):
    t = time.perf_counter()
    r, rt, h = lite_run(env, env.dense, (1, 4), compile=True)
    r["wall_s_including_compile"] = time.perf_counter() - t
    del rt, h
    env.free()
    res["compile"] = r


SECTIONS = {
    "check": sec_check,
    "pao_bitwise": sec_pao,
    "recompute": sec_recompute,
    "dense": lambda env, res: _model_section(env, res, "dense", env.dense),
    "moe": lambda env, res: _model_section(env, res, "moe", env.moe),
    "offload": sec_offload,
    "aligned": sec_aligned,
    "compile": sec_compile,
}


def rows(r: dict) -> list[dict]:
    """The CSV contract rows that the raw results hold (a row is left out when its section failed), each with the
    command of the run that measured its section."""
    out = []
    cmds = r.get("section_command", {})

    def add(name, value, unit, section):
        out.append(
            {
                "measurement": name,
                "value": value,
                "unit": unit,
                "gpu": r.get("gpu"),
                "torch_version": r.get("torch_version"),
                "command": f"{cmds.get(section, r.get('command'))} && {REPORT_CMD}",
            }
        )

    for key in ("dense", "moe"):
        d = r.get(key, {})
        for mb in ("mb1", "mb4"):
            if f"ratio_{mb}" in d:
                add(f"ratio {key} {mb}", round(d[f"ratio_{mb}"], 3), "lite tokens/s / transformers+FSDP2 tokens/s", key)
            if len(d.get("pairs", ())) > 1:  # the spread over alternating pairs (the ratio row: their median)
                n = len(d["pairs"])
                spread = sorted(p[f"ratio_{mb}"] for p in d["pairs"])
                for end, v in zip(("min", "max"), (spread[0], spread[-1])):
                    add(
                        f"ratio {key} {mb} {end}",
                        round(v, 3),
                        f"{end} of {n} alternating pairs, lite / transformers",
                        key,
                    )
        if key == "moe" and len(d.get("pairs", ())) > 1 and "mb4" in d.get("hf_fsdp2", {}):
            for side, name in (("lite", "mfu moe mb4"), ("hf_fsdp2", "mfu moe mb4 transformers")):
                add(name, round(_mfu_of(r, "moe", d[side]["mb4"]), 4), "fraction of 989 TFLOP/s (median pair)", key)
        tf = d.get("torch_fused", {}).get("with_clip_s")
        if tf and "lite_optimizer" in d:
            add(
                f"optimizer/torch_fused {key}",
                round(d["lite_optimizer"]["s"] / tf, 3),
                "lite optimizer phase / torch clip_grad_norm_+AdamW(fused) time",
                key,
            )
        if key == "dense" and tf and "lite_pao_optimizer" in d:
            add(
                "optimizer/torch_fused dense pao",
                round(d["lite_pao_optimizer"]["s"] / tf, 3),
                "lite PAO optimizer phase / torch clip_grad_norm_+AdamW(fused) time",
                key,
            )
        for side, name in (("lite", "mfu dense mb4"), ("hf_fsdp2", "mfu dense mb4 transformers")):
            if key == "dense" and "mb4" in d.get(side, {}):
                add(name, round(_mfu_of(r, "dense", d[side]["mb4"]), 4), "fraction of 989 TFLOP/s", key)
    if "mb4" in r.get("compile", {}):
        add("mfu dense mb4 compile", round(_mfu_of(r, "dense", r["compile"]["mb4"]), 4), "fraction of 989 TFLOP/s",
            "compile")  # fmt: skip
    off = r.get("offload", {})
    if "ratio" in off:  # with pairs: the median pair's, recomputed from their step times
        pr = sorted(p["offload_1.0"]["step_s"] / p["resident"]["step_s"] for p in off.get("pairs", ()))
        add("offload1.0/resident dense-small", round(statistics.median(pr) if pr else off["ratio"], 3),
            "step time ratio", "offload")  # fmt: skip
        if len(pr) > 1:
            for end, v in zip(("min", "max"), (pr[0], pr[-1])):
                add(f"offload1.0/resident dense-small {end}", round(v, 3), f"{end} of {len(pr)} alternating pairs",
                    "offload")  # fmt: skip
    if "eager_host_ratio" in off:
        add(
            "offload1.0 eager host/resident dense-small",
            round(off["eager_host_ratio"], 3),
            "step time ratio, host_kernel=torch (the eager host update) / median resident",
            "offload",
        )
    rc = r.get("recompute", {})
    if "selective" in rc:
        add(
            "selective recompute packed cuda", int(bool(rc["selective"].get("completed"))), "1 = completed", "recompute"
        )
    if "equal" in r.get("pao_bitwise", {}):
        add("pao bitwise cuda", int(bool(r["pao_bitwise"]["equal"])), "1 = equal", "pao_bitwise")
    return out


def _mfu_of(r: dict, model: str, m: dict) -> float:
    """MFU of one raw measurement, recomputed from its tokens/s with today's FLOPs/token (the raw ``mfu`` is kept
    as measured, with the FLOPs/token of its day)."""
    cfg = {"dense": (TINY_DENSE, DENSE_1B), "moe": (TINY_MOE, MOE_SMALL)}[model][0 if r.get("tiny") else 1]
    return mfu(cfg, 256 if r.get("tiny") else 4096, m["tokens_per_s"])


def write_csv(r: dict, path) -> list[dict]:
    rs = rows(r)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(COLUMNS))
        w.writeheader()
        w.writerows(rs)
    return rs


def _save(env, res):
    out = Path(env.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_speed_raw.json").write_text(json.dumps(res, indent=1, default=str))
    write_csv(res, out / "gpu_speed.csv")


def measure(a) -> int:
    import torch

    env = Env(a.device, a.tiny)
    env.out = a.out
    env.kernel = a.kernel
    env.pairs = a.pairs
    res = {
        "gpu": torch.cuda.get_device_name() if a.device == "cuda" else "cpu",
        "torch_version": torch.__version__,
        "command": "python3 bench/gpu_speed.py " + " ".join(sys.argv[1:]),
        "tiny": a.tiny,
        "errors": {},
        "section_s": {},
    }
    if a.merge:
        earlier = json.loads(Path(a.merge).read_text())
        for k, v in earlier.items():
            if k in ("errors", "section_s", "section_command"):
                res[k] = dict(v)
            elif k not in ("command", "tiny"):
                res.setdefault(k, v)
    res.setdefault("section_command", {})
    t0 = time.perf_counter()
    wanted = a.only.split(",") if a.only else list(SECTIONS)
    for name in wanted:
        if time.perf_counter() - t0 > a.deadline_s:
            res["errors"][name] = "skipped: deadline"
            continue
        t = time.perf_counter()
        res["errors"].pop(name, None)
        res["section_command"][name] = res["command"]
        try:
            SECTIONS[name](env, res)
        except Exception as e:  # noqa: BLE001 -- a failing section is recorded and the next one runs
            traceback.print_exc()
            res["errors"][name] = f"{type(e).__name__}: {e}"[:800]
        env.free()
        res["section_s"][name] = time.perf_counter() - t
        print(
            f"== {name} ({res['section_s'][name]:.1f} s): {json.dumps(res.get(name), default=str)[:1500]}", flush=True
        )
        _save(env, res)
    for row in rows(res):
        print(f"{row['measurement']:40s} {row['value']} {row['unit']}")
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()
    return 0


def report(a) -> int:
    r = json.loads(Path(a.report).read_text())
    rs = write_csv(r, a.csv) if a.csv else rows(r)
    for row in rs:
        print(f"{row['measurement']:40s} {row['value']} {row['unit']}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="measure and write gpu_speed_raw.json + gpu_speed.csv in this folder")
    ap.add_argument("--report", default=None, help="rewrite the CSV from a raw JSON")
    ap.add_argument("--csv", default=None)
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--tiny", action="store_true", help="tiny models (debugging the script on CPU)")
    ap.add_argument(
        "--kernel",
        default="auto",
        choices=("auto", "triton", "torch"),
        help="update path of the lite runs (triton on CPU: with TRITON_INTERPRET=1)",
    )
    ap.add_argument(
        "--pairs",
        type=int,
        default=3,
        help="alternating pairs: lite / transformers (dense, moe), resident / offload (offload)",
    )
    ap.add_argument("--deadline-s", type=float, default=420.0, help="skip sections that would start after this")
    ap.add_argument("--only", default="", help="comma-separated sections, in this order")
    ap.add_argument("--merge", default=None, help="start from an earlier raw JSON (sections run now replace its)")
    a = ap.parse_args()
    if a.pairs < 1:
        ap.error(f"--pairs must be >= 1, got {a.pairs}")
    return report(a) if a.report else measure(a)


if __name__ == "__main__":
    raise SystemExit(main())
