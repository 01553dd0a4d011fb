"""The lite runtime's speed paths, on CPU: the fused AdamW kernel (Triton, interpreted) against the torch-op update
and PAO vs fp32 master through it over 50 steps; the bf16 rounding of the kit's fp32-master mode against a
conventional round-to-nearest-even master; recompute (selective, full) on packed batches of unequal lengths; the MoE
expert paths (grouped GEMM, padded fallback) against a per-expert reference loop; the build-time path choices; and
the ``compile`` option."""

from __future__ import annotations

import importlib.util

import pytest
import torch
import torch.nn.functional as F
from runtime_workers import bits, runtime_config, same_bits, shared_group_worker, worker_name

from mlite.errors import MliteError
from mlite.runtime.batch import PackedBatch
from mlite.runtime.config import OptimizerConfig, RuntimeConfig
from mlite.runtime.dist import run_local
from mlite.runtime.models import attention as attention_mod
from mlite.runtime.models import build_lite_model
from mlite.runtime.models.moe import (
    expert_path,
    grouped_mm_supported,
    grouped_swiglu,
    loop_swiglu,
    padded_swiglu,
)
from mlite.runtime.optim import fused
from mlite.runtime.optim.adamw import AdamWHyper, adamw_inplace, scratch, step_scalars
from mlite.runtime.optim.master import split_fp32
from mlite.runtime.optim.optimizer import ShardedAdamW

GROUP_WORKERS: list = []
"""The module's workers, run one after the other in one spawned process (the :func:`group` fixture)."""


def _in_group(fn):
    GROUP_WORKERS.append(fn)
    return fn


@pytest.fixture(scope="module")
def group() -> dict:
    """``{worker name: result}`` of every worker of :data:`GROUP_WORKERS`, all in one fresh process with
    ``TRITON_INTERPRET=1`` (Triton reads it when ``triton.language`` is imported and a kernel is defined: its kernels
    then run on CPU tensors through numpy; the recompute run's CPU path has no Triton kernel)."""
    assert importlib.util.find_spec("triton"), "triton (the fla extra) is part of the test environment"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRITON_INTERPRET", "1")
        return run_local(shared_group_worker, 1, args=(tuple(GROUP_WORKERS),), timeout_s=900)[0]


def _interpreted(group: dict, worker):
    return group[worker_name(worker)]


# ---------------------------------------------------------------------------------------------- fused AdamW kernel
@_in_group
def _kernel_vs_torch_worker(rank, world):
    """Every storage mode of the kernel against :func:`adamw_inplace` (fp32 moments: the interpreter's bf16
    conversion is not round-to-nearest-even, the GPU's is), over several blocks with a ragged tail, zero count too."""
    out = []
    g = torch.Generator().manual_seed(0)
    n = 2 * fused.BLOCK + 77
    master = torch.randn(n, generator=g)
    p16, rem = split_fp32(master)
    grad = torch.randn(n, generator=g).bfloat16()
    grad[::97] = 0
    m, v = torch.randn(n, generator=g) * 0.1, torch.rand(n, generator=g) * 0.01
    for decoupled, clip in ((True, 1.0), (True, 0.37), (False, 0.5)):
        sc = step_scalars(
            AdamWHyper(
                lr=1e-2, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1, step=3, decoupled=decoupled, clip_coef=clip
            )
        )
        ref, mr, vr = master.clone(), m.clone(), v.clone()
        adamw_inplace(ref, grad, mr, vr, sc, scratch(n, "cpu"))
        hi, rr = split_fp32(ref)
        for mode in (fused.MODE_MASTER, fused.MODE_REMAINDER, fused.MODE_PARAM):
            mt, vt = m.clone(), v.clone()
            zeros = torch.zeros(fused.blocks(n), dtype=torch.int32)
            if mode == fused.MODE_PARAM:
                p, w = master.clone(), None
            else:
                p, w = p16.clone(), (master.clone() if mode == fused.MODE_MASTER else rem.clone())
            fused.launch(p, grad, w, mt, vt, zeros, mode, sc)
            ok = [torch.equal(mt, mr), torch.equal(vt, vr), int(zeros.sum()) == int((grad == 0).sum())]
            if mode == fused.MODE_PARAM:
                ok.append(torch.equal(bits(p), bits(ref)))
            else:
                ok += [
                    torch.equal(bits(p), bits(hi)),
                    torch.equal(bits(w), bits(ref) if mode == fused.MODE_MASTER else rr),
                ]
            out.append(((decoupled, clip, mode), ok))
    return out


def test_fused_kernel_equals_torch_update_bitwise(group):
    for case, ok in _interpreted(group, _kernel_vs_torch_worker):
        assert all(ok), (case, ok)


@_in_group
def _tie_worker(rank, world):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    from fused_check import ties

    return ties("cpu")


def test_fused_kernel_rounds_exact_ties_away_from_zero_not_to_nearest_even(group):
    """The tie (low half 0x8000) occurs with probability 2^-16 per random master, so the bitwise tests above never hit
    it: here every element is one, in every storage mode (a kernel switched to round-to-nearest-even fails)."""
    r = _interpreted(group, _tie_worker)
    assert set(r) == {fused.MODE_MASTER, fused.MODE_REMAINDER, fused.MODE_PARAM}
    for mode, ok in r.items():
        assert all(ok.values()), (mode, ok)


@_in_group
def _multi_tensor_worker(rank, world):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    from fused_check import check

    return check("cpu")


def test_multi_tensor_kernel_equals_torch_update_bitwise_on_many_awkward_shards(group):
    """One launch over shards of sizes 0, 1, < a block, a block +- 1, ragged multi-block, a shard without a gradient,
    mixed gradient dtypes, bf16 moments, a skipped step; two steps, the second with new gradient addresses."""
    r = _interpreted(group, _multi_tensor_worker)
    assert r["all_equal"], r["cases"]
    assert len(r["cases"]) == 8 and r["shards"] >= 10


def _plain_params(seed=3):
    g = torch.Generator().manual_seed(seed)
    shapes = {"w1.weight": (67, 41), "w1.bias": (67,), "norm.weight": (41,), "w2.weight": (5, 67)}
    return [(n, torch.nn.Parameter(torch.randn(*s, generator=g).bfloat16())) for n, s in shapes.items()]


def _train_plain(cfg: OptimizerConfig, kernel: str, steps: int):
    params = _plain_params()
    opt = ShardedAdamW(params, cfg, expert_names=set(), device="cpu", kernel=kernel)
    g = torch.Generator().manual_seed(4)
    zeros = []
    for t in range(steps):
        for i, (_, p) in enumerate(params):
            p.grad = (torch.randn(p.shape, generator=g) * (10.0 ** (t % 5 - 2))).bfloat16()
            if i == 0:
                p.grad.view(-1)[: t % 7] = 0
        zeros.append(opt.step(lr=3e-2 * (1 + t % 3), clip_coef=0.5 if t % 4 == 0 else 1.0))
    return opt, {n: p.detach().clone() for n, p in params}, zeros


@_in_group
def _fused_50_steps_worker(rank, world):
    fp32, w32, z32 = _train_plain(OptimizerConfig(), "triton", 50)
    pao, wpao, zpao = _train_plain(OptimizerConfig(use_precision_aware_optimizer=True), "triton", 50)
    _, wtorch, _ = _train_plain(OptimizerConfig(use_precision_aware_optimizer=True), "torch", 50)
    masters = [
        torch.equal(bits(fp32.master_weight(a)), bits(pao.master_weight(b))) for a, b in zip(fp32.slots, pao.slots)
    ]
    return {
        "params": same_bits(w32, wpao),
        "masters": masters,
        "zeros": (z32, zpao),
        "remainders_used": any(bool((s.state["remainder"] != 0).any()) for s in pao.slots),
        "vs_torch": same_bits(wpao, wtorch),
        "moved": same_bits(w32, dict(_plain_params())),
    }


def test_pao_equals_fp32_master_bitwise_over_50_steps_through_the_fused_kernel(group):
    r = _interpreted(group, _fused_50_steps_worker)
    assert r["params"] == [] and all(r["masters"]) and r["remainders_used"]
    assert r["zeros"][0] == r["zeros"][1] == [(t % 7, 0) for t in range(50)]
    assert len(r["moved"]) == 4  # every parameter changed
    # and the kernel writes what the torch-op path writes (the host update of offload_fraction=1.0)
    assert r["vs_torch"] == []


@_in_group
def _dist_opt_kernel_worker(rank, world):
    """A dist_opt run (PAO + bf16 main grads: the optimizer reads the DDP gradient buffer, not ``param.grad``)
    through the multi-tensor kernel and through the torch-op path, 3 steps each."""
    from runtime_workers import runtime_config, snapshot, synthetic_microbatches

    from mlite.runtime.runtime import create_runtime

    out = {}
    for kernel in ("torch", "triton"):
        cfg = runtime_config(
            "tiny-moe", optimizer="dist_opt", use_precision_aware_optimizer=True, main_grads_dtype="bf16"
        )
        rt = create_runtime(cfg)
        h = rt.build_model()
        h.optimizer.kernel = kernel
        before = snapshot(h)["params"]
        losses = [rt.train_step(h, synthetic_microbatches(k, 0, num_microbatches=2))["loss"] for k in range(3)]
        out[kernel] = (losses, snapshot(h)["params"], before)
    return {
        "losses": (out["torch"][0], out["triton"][0]),
        "params": same_bits(out["torch"][1], out["triton"][1]),
        "moved": len(same_bits(out["triton"][1], out["triton"][2])),
        "n": len(out["triton"][1]),
    }


def test_dist_opt_updates_through_the_fused_kernel_as_through_torch_ops(group):
    r = _interpreted(group, _dist_opt_kernel_worker)
    assert r["losses"][0] == r["losses"][1]
    assert r["params"] == [] and r["moved"] == r["n"]  # every parameter moved, to the same bits


class _PaddedAdamW(ShardedAdamW):
    """The GPU layout on the host: every shard's state starts on a multiple of STATE_ALIGN elements."""

    @staticmethod
    def _state_align(device):
        from mlite.runtime.optim.optimizer import STATE_ALIGN

        return STATE_ALIGN


@_in_group
def _padded_worker(rank, world):
    out = {}
    for name, cls in (("plain", ShardedAdamW), ("padded", _PaddedAdamW)):
        params = _plain_params()
        opt = cls(params, OptimizerConfig(use_precision_aware_optimizer=True), expert_names=set(), device="cpu")
        opt.kernel = "triton"
        g = torch.Generator().manual_seed(4)
        for t in range(5):
            for _, p in params:
                p.grad = (torch.randn(p.shape, generator=g) * 0.1).bfloat16()
            opt.step(lr=3e-2, clip_coef=0.5 if t % 2 else 1.0)
        out[name] = (
            {n: p.detach().clone() for n, p in params},
            opt.padding_numel,
            {k: v["bytes"] for k, v in opt.memory().items()},
            [a for g_ in opt.groups for a in g_.offsets],
        )
    (pw, pad0, mem0, _), (qw, pad1, mem1, offs) = out["plain"], out["padded"]
    return {"params": same_bits(pw, qw), "pad": (pad0, pad1), "mem_equal": mem0 == mem1, "offsets": offs}


def test_padded_state_layout_updates_the_same_bits(group):
    """The GPU's state layout (shard starts aligned for vector accesses) through the kernel equals the packed one;
    memory() counts the shards' state only (the padding is reported by padding_numel)."""
    r = _interpreted(group, _padded_worker)
    assert r["params"] == [] and r["mem_equal"]
    assert r["pad"][0] == 0 and r["pad"][1] > 0 and all(a % 8 == 0 for a in r["offsets"])


def test_state_lives_in_flat_group_buffers():
    params = _plain_params()
    opt = ShardedAdamW(
        params, OptimizerConfig(use_precision_aware_optimizer=True), expert_names={"w2.weight"}, device="cpu"
    )
    for _, p in params:
        p.grad = torch.ones_like(p)
    opt.step(lr=1e-3)
    # groups: (decay, dense) = w1.weight; (no decay) = w1.bias + norm.weight; (decay, expert) = w2.weight
    assert sorted([s.name for s in g.slots] for g in opt.groups) == [
        ["w1.bias", "norm.weight"],
        ["w1.weight"],
        ["w2.weight"],
    ]
    for g in opt.groups:
        for s, a in zip(g.slots, g.offsets):
            for k, t in s.state.items():
                assert t.untyped_storage().data_ptr() == g.bufs[k].untyped_storage().data_ptr()
                assert t.data_ptr() == g.bufs[k][a:].data_ptr()


# ---------------------------------------------------------------------------------------------- rounding claim
def test_kit_master_rounding_differs_from_round_to_nearest_even_only_at_exact_ties():
    """The kit's fp32-master mode writes the bf16 param ties-away-from-zero (like PAO); a conventional fp32 master
    writes ``master.to(bfloat16)`` (nearest even). Same masters, 262,144 parameters, 50 AdamW steps: the params differ
    exactly where the master's low half is 0x8000 and its high half is even, and nowhere else."""
    n = 1 << 18
    g = torch.Generator().manual_seed(11)
    master = (torch.randn(n, generator=g) * 0.02).bfloat16().float()
    m, v = torch.zeros(n), torch.zeros(n)
    work = scratch(n, "cpu")
    diffs = []
    for t in range(1, 51):
        grad = (torch.randn(n, generator=g) * 1e-3).bfloat16()
        adamw_inplace(
            master,
            grad,
            m,
            v,
            step_scalars(AdamWHyper(lr=1e-4, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1, step=t)),
            work,
        )
        kit, rne = split_fp32(master)[0], master.to(torch.bfloat16)
        differ = bits(kit) != bits(rne)
        b = bits(master)
        tie_even = ((b & 0xFFFF) == 0x8000) & (((b >> 16) & 1) == 0)
        assert torch.equal(differ, tie_even)
        diffs.append(int(differ.sum()))
        # where they differ, it is one bf16 ulp, away from zero
        assert torch.equal(kit.float()[differ].abs() > rne.float()[differ].abs(), torch.ones_like(differ[differ]))
    print(
        f"\nkit vs round-to-nearest-even bf16 params: {diffs[-1]} of {n} differ after 50 steps; "
        f"per step min {min(diffs)} max {max(diffs)} mean {sum(diffs) / len(diffs):.1f}"
    )
    assert 0 < max(diffs) < n * 1e-3


# ---------------------------------------------------------------------------------------------- recompute, packed
def _packed(lens, vocab=512, seed=0):
    g = torch.Generator().manual_seed(seed)
    return PackedBatch.from_sequences([torch.randint(0, vocab, (n,), generator=g).tolist() for n in lens])


@pytest.mark.parametrize("model,mask_max", [("tiny-dense", 4096), ("tiny-dense", 0), ("tiny-moe", 4096)])
def test_recompute_on_packed_unequal_batches_gives_the_same_numbers(monkeypatch, model, mask_max):
    """Selective and full recompute on a packed batch of unequal lengths: same loss and gradients as without, for
    the CPU block-mask path and the one-call-per-sequence path (mask_max=0)."""
    monkeypatch.setattr(attention_mod, "MASK_MAX_TOKENS", mask_max)
    batch = _packed((23, 5, 41, 12))
    assert not batch.lengths or len(set(batch.lengths)) > 1
    out = {}
    for mode in ("none", "selective", "full"):
        m = build_lite_model(model, seed=2, recompute=mode)
        loss, _ = m.loss(batch)
        loss.backward()
        out[mode] = (loss.detach(), {n: p.grad.clone() for n, p in m.named_parameters()})
    for mode in ("selective", "full"):
        assert torch.equal(out[mode][0], out["none"][0])
        assert same_bits(out[mode][1], out["none"][1]) == []


@_in_group
def _recompute_worker(rank, world):
    from mlite.runtime.config import MegatronLiteConfig
    from mlite.runtime.runtime import create_runtime

    res = {}
    for mode in ("none", "selective", "full"):
        base = runtime_config("tiny-moe", param_dtype="fp32")
        cfg = RuntimeConfig(
            hf_path="tiny-moe",
            device="cpu",
            param_dtype="fp32",
            backend_cfg=MegatronLiteConfig(optimizer=base.optimizer, impl_cfg={"recompute": mode}),
        )
        rt = create_runtime(cfg)
        h = rt.build_model()
        losses = []
        for k in range(6):
            batch = _packed((17 + k, 9, 30 - k), seed=k)
            losses.append(rt.train_step(h, [batch])["loss"])
        res[mode] = losses
    return res


@pytest.mark.slow
def test_runtime_trains_with_selective_and_full_recompute_on_packed_batches(group):
    res = _interpreted(group, _recompute_worker)
    assert res["selective"] == res["none"] and res["full"] == res["none"]
    assert res["none"][-1] < res["none"][0]


def test_attention_errors_propagate(monkeypatch):
    """No exception raised inside the attention core is swallowed (checkpointing's control-flow exceptions must reach
    torch.utils.checkpoint)."""

    class Marker(Exception):
        pass

    def boom(*a, **k):
        raise Marker("from inside the kernel")

    monkeypatch.setattr(attention_mod, "_sdpa", boom)
    m = build_lite_model("tiny-dense", seed=0, recompute="selective")
    with pytest.raises(Marker):
        m.loss(_packed((7, 9)))


def test_paths_are_chosen_at_build():
    m = build_lite_model("tiny-moe", seed=0)
    attn = [b.self_attn for b in m.blocks]
    assert {a.packed for a in attn} == {"sdpa"}  # CPU: no flash varlen
    assert attention_mod.packed_path("cpu", torch.bfloat16) == "sdpa"
    assert {b.mlp.experts.path for b in m.blocks if b.mlp_kind == "moe"} == {"loop"}  # CPU: the reference
    assert expert_path("cpu", torch.bfloat16) == "loop"


# ---------------------------------------------------------------------------------------------- MoE experts
def _reference_loop(xs, counts, w1, w2):
    """Written out here (not the module's loop_swiglu) so the oracle is independent of the code under test."""
    outs, start = [], 0
    for e, n in enumerate(counts.tolist()):
        xe = xs[start : start + n]
        gate, up = F.linear(xe, w1[e]).chunk(2, dim=-1)
        outs.append(F.linear(F.silu(gate) * up, w2[e]))
        start += n
    return torch.cat(outs)


@pytest.mark.parametrize("fn", ["grouped", "padded", "loop"])
def test_expert_paths_equal_the_reference_loop_fp32(fn):
    if fn == "grouped" and not grouped_mm_supported("cpu", torch.float32):
        # a build without a CPU grouped_mm (the pinned torch 2.13 has one): models here never pick it, and the
        # grouped path's CUDA rows are bench/gpu_speed.py's; the padded fallback takes its place in this check
        assert expert_path("cpu", torch.float32) != "grouped"
        fn = "padded"
    impl = {"grouped": grouped_swiglu, "padded": padded_swiglu, "loop": loop_swiglu}[fn]
    g = torch.Generator().manual_seed(0)
    E, H, ffn = 6, 16, 24
    counts = torch.tensor([5, 0, 19, 1, 0, 8])
    xs = torch.randn(int(counts.sum()), H, generator=g, requires_grad=True)
    w1 = (torch.randn(E, 2 * ffn, H, generator=g) * 0.2).requires_grad_()
    w2 = (torch.randn(E, H, ffn, generator=g) * 0.2).requires_grad_()
    dy = torch.randn(int(counts.sum()), H, generator=g)
    got = impl(xs, counts, w1, w2)
    grads = torch.autograd.grad(got, (xs, w1, w2), dy)
    ref = _reference_loop(xs, counts, w1, w2)
    ref_grads = torch.autograd.grad(ref, (xs, w1, w2), dy)
    torch.testing.assert_close(got, ref, atol=1e-6, rtol=1e-6)
    for a, b in zip(grads, ref_grads):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("path", ["grouped", "padded"])
def test_moe_model_paths_agree(path):
    """A whole MoE model with the grouped / padded path gives the loop path's logits."""
    if path == "grouped" and not grouped_mm_supported("cpu", torch.float32):
        assert expert_path("cpu", torch.float32) != "grouped"  # see test_expert_paths_equal_the_reference_loop_fp32
        path = "padded"
    batch = _packed((11, 20))
    m = build_lite_model("tiny-moe", seed=1)
    with torch.no_grad():
        a = m.forward_batch(batch)
        for b in m.blocks:
            if b.mlp_kind == "moe":
                b.mlp.experts.path = path
        p = m.forward_batch(batch)
    torch.testing.assert_close(a, p, atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------------------------------------- compile option
def test_compile_option_is_a_validated_runtime_field():
    assert RuntimeConfig(hf_path="tiny-dense").compile is False
    assert RuntimeConfig(hf_path="tiny-dense", compile=True).to_dict()["compile"] is True
    assert RuntimeConfig.from_dict(RuntimeConfig(hf_path="tiny-dense", compile=True).to_dict()).compile is True
    with pytest.raises(MliteError, match="compile"):
        RuntimeConfig(hf_path="tiny-dense", compile="yes")


@pytest.mark.slow
def test_compile_blocks_runs_the_compiled_forward_and_backward():
    """``RuntimeConfig.compile`` replaces each block's forward by its torch.compile'd version (names unchanged);
    loss and gradients stay those of the eager model (inductor may reorder float sums: a tolerance, not bits)."""
    from mlite.runtime.runtime import compile_blocks

    batch = _packed((19, 25))
    eager = build_lite_model("tiny-dense", seed=0)
    compiled = build_lite_model("tiny-dense", seed=0)
    names = [n for n, _ in compiled.named_parameters()]
    compile_blocks(compiled)
    assert [n for n, _ in compiled.named_parameters()] == names
    assert all(hasattr(b.forward, "_torchdynamo_orig_callable") for b in compiled.blocks)
    out = {}
    for key, m in (("eager", eager), ("compiled", compiled)):
        loss, _ = m.loss(batch)
        loss.backward()
        out[key] = (loss.detach(), {n: p.grad for n, p in m.named_parameters()})
    torch.testing.assert_close(out["compiled"][0], out["eager"][0], rtol=1e-5, atol=1e-4)
    for n, g in out["eager"][1].items():
        torch.testing.assert_close(out["compiled"][1][n], g, rtol=1e-3, atol=1e-5)
