"""Shared helpers of the lite-runtime tests: synthetic packed batches, configs, a short training loop, and state
snapshots. Imported by the test modules and, by name, inside the worker processes that ``run_local`` spawns."""

from __future__ import annotations

import torch

from mlite.runtime.batch import PackedBatch
from mlite.runtime.config import MegatronLiteConfig, OptimizerConfig, RuntimeConfig
from mlite.runtime.optim.optimizer import local

VOCAB = 64
"""Tokens the synthetic sequences use (a slice of the tiny models' 512), so a few dozen steps visibly learn."""


def synthetic_microbatches(
    step: int,
    rank: int,
    *,
    num_microbatches: int = 1,
    seqs: int = 2,
    seq_len: int = 24,
    seed: int = 0,
    vocab: int = VOCAB,
) -> list[PackedBatch]:
    """Learnable arithmetic sequences (token i+1 = token i + stride mod vocab), different per step and rank,
    with varying lengths and some prompt tokens masked, deterministic in (seed, step, rank)."""
    g = torch.Generator().manual_seed(1_000_003 * seed + 7919 * step + rank)
    out = []
    for _ in range(num_microbatches):
        seqs_ids, masks = [], []
        for _ in range(seqs):
            n = int(torch.randint(seq_len // 2, seq_len + 1, (1,), generator=g))
            start = int(torch.randint(0, vocab, (1,), generator=g))
            stride = int(torch.randint(1, 4, (1,), generator=g))
            seqs_ids.append([(start + i * stride) % vocab for i in range(n)])
            masks.append([i >= 2 for i in range(n)])
        out.append(PackedBatch.from_sequences(seqs_ids, masks))
    return out


def runtime_config(
    model: str = "tiny-moe", *, param_dtype: str = "bf16", seed: int = 0, device: str = "cpu", **opt
) -> RuntimeConfig:
    opt.setdefault("lr", 3e-3)
    opt.setdefault("lr_warmup_steps", 2)
    opt.setdefault("lr_decay_style", "cosine")
    opt.setdefault("lr_decay_steps", 100)
    opt.setdefault("min_lr", 3e-4)
    return RuntimeConfig(
        hf_path=model,
        device=device,
        param_dtype=param_dtype,
        seed=seed,
        backend_cfg=MegatronLiteConfig(optimizer=OptimizerConfig(**opt)),
    )


def train(
    handle, steps: int, *, rank: int, start: int = 0, num_microbatches: int = 1, data_seed: int = 0, seqs: int = 2
) -> list[dict]:
    """``steps`` train steps on synthetic data; returns the per-step metrics."""
    rt = handle.runtime
    out = []
    for k in range(start, start + steps):
        mbs = synthetic_microbatches(k, rank, num_microbatches=num_microbatches, seed=data_seed, seqs=seqs)
        out.append(rt.train_step(handle, mbs))
    return out


def snapshot(handle) -> dict:
    """CPU copies of every local parameter shard and every optimizer state tensor (for bitwise comparisons)."""
    params = {n: local(p).detach().cpu().clone() for n, p in handle.model.named_parameters()}
    state = {s.name: {k: t.detach().cpu().clone() for k, t in s.state.items()} for s in handle.optimizer.slots}
    masters = {s.name: handle.optimizer.master_weight(s).detach().cpu().clone() for s in handle.optimizer.slots}
    return {"params": params, "state": state, "masters": masters}


def bits(t: torch.Tensor) -> torch.Tensor:
    """Integer view of a tensor's bits (so NaNs and -0.0 compare exactly)."""
    view = {torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float64: torch.int64}.get(t.dtype)
    return t.contiguous().view(view) if view is not None else t


def same_bits(a: dict, b: dict) -> list[str]:
    """Names whose tensors differ bitwise between two ``{name: tensor}`` dicts (or differ in keys)."""
    bad = sorted(set(a) ^ set(b))
    for k in sorted(set(a) & set(b)):
        x, y = a[k], b[k]
        if x.dtype != y.dtype or x.shape != y.shape or not torch.equal(bits(x), bits(y)):
            bad.append(k)
    return bad


def lockstep(rank: int, device: str, base_opts: dict, variant_opts: dict, steps: int, model: str = "tiny-moe") -> dict:
    """Train a base and a variant run side by side, feeding the variant the base's gradients every step.

    On CUDA the backward pass uses atomics (not bitwise reproducible run to run); giving both runs the same gradient
    bits isolates what the variant changes (the optimizer's storage / where the update runs). Forward passes are
    deterministic, so equal weights still give equal losses."""
    from mlite.runtime.runtime import create_runtime

    rt_a = create_runtime(runtime_config(model, device=device, **base_opts))
    a = rt_a.build_model()
    rt_b = create_runtime(runtime_config(model, device=device, **variant_opts))
    b = rt_b.build_model()
    la, lb = [], []
    for k in range(steps):
        mbs = synthetic_microbatches(k, rank)
        la.append(rt_a.forward_backward(a, mbs)["loss"])
        lb.append(rt_b.forward_backward(b, mbs)["loss"])
        with torch.no_grad():
            for pa, pb in zip(a.model.parameters(), b.model.parameters()):
                local(pb.grad).copy_(local(pa.grad))
        for rt, h in ((rt_a, a), (rt_b, b)):
            ok, _, _ = rt.optimizer_step(h)
            rt.zero_grad(h)
            if ok:
                rt.lr_scheduler_step(h)
    sa, sb = snapshot(a), snapshot(b)
    return {
        "losses": (la, lb),
        "params": same_bits(sa["params"], sb["params"]),
        "masters": same_bits(sa["masters"], sb["masters"]),
        "state_devices": sorted({str(t.device) for s in b.optimizer.slots for t in s.state.values()}),
        "param_devices": sorted({str(p.device) for p in b.model.parameters()}),
    }


# ---------------------------------------------------------------------------------------------- shared groups
SHARED_WORKERS: list = []
"""``fn(rank, world) -> result`` of the test modules whose runs share the session's spawned groups of 1, 2 and 4
processes (the ``shared_groups`` fixture of ``tests/conftest.py``), in registration (collection) order."""

_CURVES: dict = {}


def shares_group(fn):
    """Register a module-level worker to run in the shared groups (decorator); its result is ``shared_groups[world]
    [rank][worker_name(fn)]``."""
    if worker_name(fn) not in {worker_name(f) for f in SHARED_WORKERS}:
        SHARED_WORKERS.append(fn)
    return fn


def worker_name(fn) -> str:
    return f"{fn.__module__}.{fn.__qualname__}"


def shared_group_worker(rank: int, world: int, fns: tuple) -> dict:
    """Every registered worker in the same processes (one process group), one after the other."""
    return {worker_name(fn): fn(rank, world) for fn in fns}


def mesh_config(model: str, par: dict, **kw) -> RuntimeConfig:
    """:func:`runtime_config` on the mesh ``par`` (``ParallelConfig`` fields)."""
    from mlite.mesh import ParallelConfig

    cfg = runtime_config(model, **kw)
    cfg.backend_cfg.parallel = ParallelConfig(**par)
    return cfg


def train_curve(model: str, par: dict, steps: int, **opt) -> list[dict]:
    """``steps`` train steps (2 micro-batches per DP rank) of a fresh fp32 runtime of ``model`` on the mesh ``par``:
    each step's ``loss``, ``grad_norm``, ``num_zeros``, ``num_tokens``. Memoised per process (a run is deterministic
    on the CPU), so the workers of one shared group train a reference they have in common once."""
    from mlite.runtime.runtime import create_runtime

    opt.setdefault("optimizer", "fsdp2")
    key = (model, tuple(sorted(par.items())), steps, tuple(sorted(opt.items())))
    if key not in _CURVES:
        rt = create_runtime(mesh_config(model, par, param_dtype="fp32", **opt))
        h = rt.build_model()
        curve = []
        for k in range(steps):
            m = rt.train_step(h, synthetic_microbatches(k, rt.pstate.dp_rank, num_microbatches=2))
            curve.append({n: m[n] for n in ("loss", "grad_norm", "num_zeros", "num_tokens")})
        _CURVES[key] = curve
    return _CURVES[key]
