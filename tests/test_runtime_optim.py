"""Optimizer primitives of the lite runtime: PAO remainder arithmetic (exhaustive on the edge classes), AdamW math
against torch.optim, the lr schedule against Megatron-Core's scheduler, clipping, and THE key property: a PAO run and
an fp32-master run (bf16 params, 2 processes, gloo, FSDP2) give bitwise-identical losses and weights over 50 steps."""

from __future__ import annotations

import math

import pytest
import torch
from runtime_workers import bits, lockstep, same_bits, snapshot, train

from mlite.errors import MliteError
from mlite.runtime.config import OptimizerConfig
from mlite.runtime.dist import run_local
from mlite.runtime.optim import optimizer as optimizer_mod
from mlite.runtime.optim.adamw import AdamWHyper, adamw_chunk
from mlite.runtime.optim.clip import clip_coefficient, global_norm_and_zeros
from mlite.runtime.optim.master import merge_fp32, round_bf16, split_fp32
from mlite.runtime.optim.offload import offload_split
from mlite.runtime.optim.optimizer import ShardedAdamW
from mlite.runtime.optim.schedule import LRScheduler

# ---------------------------------------------------------------------------------------------- remainder arithmetic
EDGE_HIGH = [
    0x0000,
    0x0001,
    0x007F,
    0x0080,
    0x0081,
    0x3F7F,
    0x3F80,
    0x3F81,
    0x7F7E,
    0x7F7F,
    0x7F80,
    0x7F81,
    0x7FC0,
    0x7FFE,
    0x7FFF,
    0x8000,
    0x8001,
    0x807F,
    0x8080,
    0xBF80,
    0xBF81,
    0xFF7F,
    0xFF80,
    0xFFC0,
    0xFFFF,
]
"""High halves: +-0 / subnormals / smallest normals / 1.0 / largest finite / inf / NaNs (bf16 bit patterns)."""
EDGE_LOW = [0x0000, 0x0001, 0x3FFF, 0x7FFE, 0x7FFF, 0x8000, 0x8001, 0xBFFF, 0xFFFE, 0xFFFF]
"""Low halves around the rounding boundary 0x8000 and the ends."""


def from_halves(high: torch.Tensor, low: torch.Tensor) -> torch.Tensor:
    b = high.to(torch.int64) * 65536 + low.to(torch.int64)
    b = torch.where(b >= 2**31, b - 2**32, b).to(torch.int32)
    return b.view(torch.float32)


def halves(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    b = x.view(torch.int32).to(torch.int64) % 2**32
    return b // 65536, b % 65536


@pytest.fixture(scope="module")
def patterns() -> torch.Tensor:
    """Every high half x the edge lows, and every low half x the edge highs (~2.3 M fp32 bit patterns)."""
    all16 = torch.arange(65536, dtype=torch.int64)
    a = from_halves(all16.repeat_interleave(len(EDGE_LOW)), torch.tensor(EDGE_LOW).repeat(65536))
    b = from_halves(torch.tensor(EDGE_HIGH).repeat_interleave(65536), all16.repeat(len(EDGE_HIGH)))
    return torch.cat([a, b])


def test_split_merge_roundtrip_is_exact_on_every_edge_class(patterns):
    hi, rem = split_fp32(patterns)
    assert hi.dtype == torch.bfloat16 and rem.dtype == torch.int16
    back = merge_fp32(hi, rem)
    assert torch.equal(bits(back), bits(patterns))  # NaN payloads, -0.0, inf, subnormals included


def test_in_place_host_forms_equal_split_and_merge_on_every_edge_class(patterns):
    """The chunked host update's buffer forms (int16 wrap, int32 -> int16 truncation) give split/merge's bits."""
    from mlite.runtime.optim.master import (
        high_half_into_,
        merged_into_,
        split_from_pair_,
    )

    n = patterns.numel()
    hi, rem = split_fp32(patterns)
    i32, i16 = torch.empty(n, dtype=torch.int32), torch.empty(n, dtype=torch.int16)
    pair = torch.empty(n, 2, dtype=torch.int16)
    out = torch.empty(n, dtype=torch.bfloat16)
    high_half_into_(patterns, out, i32)
    assert torch.equal(bits(out), bits(hi))
    master = merged_into_(hi, rem, pair, i16)
    assert torch.equal(bits(master), bits(patterns))
    p2, r2 = torch.empty_like(out), torch.empty_like(rem)
    split_from_pair_(master, pair, p2, r2, i32)
    assert torch.equal(bits(p2), bits(hi)) and torch.equal(r2, rem)


def test_half_word_host_forms_equal_split_and_merge_on_every_edge_class(patterns):
    """The host update's int16 half-word forms (``high - (low >> 15)``, ``param + (remainder >> 15)``) give
    split/merge's bits, and a whole PAO chunk update through them equals merge -> AdamW -> split."""
    from mlite.runtime.optim.adamw import adamw_inplace, scratch, step_scalars
    from mlite.runtime.optim.host import bf16_of_master_, halves, master_of_pair_, update_chunk, work_buffers

    n = patterns.numel()
    hi, rem = split_fp32(patterns)
    out = torch.empty(n, dtype=torch.bfloat16)
    bf16_of_master_(patterns, out, torch.empty(n, dtype=torch.int16))
    assert torch.equal(bits(out), bits(hi))
    master = master_of_pair_(hi, rem, torch.empty(n, 2, dtype=torch.int16))
    assert torch.equal(bits(master), bits(patterns))
    assert torch.equal(halves(master)[0], rem)
    # one update of finite masters: remainder mode and master mode write what split_fp32 of the reference writes
    fin = patterns[torch.isfinite(patterns) & (patterns.abs() < 1e30)][:50_000].contiguous()
    k = fin.numel()
    g = torch.Generator().manual_seed(2)
    grad = torch.randn(k, generator=g).bfloat16()
    sc = step_scalars(_hyper(2, clip_coef=0.3))
    m0, v0 = torch.randn(k, generator=g) * 0.01, torch.rand(k, generator=g) * 1e-4
    ref, mr, vr = fin.clone(), m0.clone(), v0.clone()
    adamw_inplace(ref, grad, mr, vr, sc, scratch(k, "cpu"))
    ref_hi, ref_rem = split_fp32(ref)
    p16, r16 = split_fp32(fin)
    st = {"remainder": r16.clone(), "exp_avg": m0.clone(), "exp_avg_sq": v0.clone()}
    p = p16.clone()
    update_chunk("remainder", p, grad, st, 0, k, sc, work_buffers(k, "cpu"))
    assert torch.equal(bits(p), bits(ref_hi)) and torch.equal(st["remainder"], ref_rem)
    assert torch.equal(st["exp_avg"], mr) and torch.equal(st["exp_avg_sq"], vr)
    st = {"master": fin.clone(), "exp_avg": m0.clone(), "exp_avg_sq": v0.clone()}
    p = p16.clone()
    update_chunk("master", p, grad, st, 0, k, sc, work_buffers(k, "cpu"))
    assert torch.equal(bits(p), bits(ref_hi)) and torch.equal(bits(st["master"]), bits(ref))


def test_remainder_is_the_signed_bit_distance_to_the_param(patterns):
    hi, rem = split_fp32(patterns)
    high, low = halves(patterns)
    assert torch.equal(rem < 0, low >= 0x8000)
    assert int(rem.min()) == -0x8000 and int(rem.max()) == 0x7FFF
    # param bits (as a float32 with zero low half) + remainder == master bits, away from the 0x7FFF/0xFFFF wrap
    wrap = ((high == 0x7FFF) | (high == 0xFFFF)) & (low >= 0x8000)
    pbits = hi.float().view(torch.int32).to(torch.int64)
    mbits = patterns.view(torch.int32).to(torch.int64)
    assert torch.equal((mbits - pbits)[~wrap], rem.to(torch.int64)[~wrap])


def test_param_is_torch_round_to_nearest_even_except_at_exact_ties(patterns):
    hi, _ = split_fp32(patterns)
    _, low = halves(patterns)
    nan = torch.isnan(patterns)
    rne = patterns.to(torch.bfloat16)
    off_tie = ~nan & (low != 0x8000)
    assert torch.equal(bits(hi)[off_tie], bits(rne)[off_tie])
    # exact ties: away from zero; so equal to round-half-even exactly when the high half is odd
    tie = ~nan & (low == 0x8000)
    high, _ = halves(patterns)
    odd = high % 2 == 1
    assert torch.equal(bits(hi)[tie & odd], bits(rne)[tie & odd])
    assert not torch.equal(bits(hi)[tie & ~odd], bits(rne)[tie & ~odd])
    x64 = patterns[tie].double()
    h64 = hi[tie].double()
    assert bool((h64.abs() > x64.abs()).all())


def test_param_is_a_nearest_bf16(patterns):
    hi, _ = split_fp32(patterns)
    rne = patterns.to(torch.bfloat16)
    ok = torch.isfinite(hi.float()) & torch.isfinite(rne.float())
    x = patterns[ok].double()
    assert bool(((x - hi[ok].double()).abs() <= (x - rne[ok].double()).abs()).all())


def test_special_values_documented():
    def split_bits(b):
        x = torch.tensor([b], dtype=torch.int64)
        x = torch.where(x >= 2**31, x - 2**32, x).to(torch.int32).view(torch.float32)
        hi, rem = split_fp32(x)
        assert torch.equal(bits(merge_fp32(hi, rem)), bits(x))
        return int(hi.view(torch.int16).to(torch.int32) & 0xFFFF), int(rem)

    assert split_bits(0x7F800000) == (0x7F80, 0)  # +inf
    assert split_bits(0xFF800000) == (0xFF80, 0)  # -inf
    assert split_bits(0x80000000) == (0x8000, 0)  # -0.0
    assert split_bits(0x7F7F8000) == (0x7F80, -0x8000)  # largest finite region rounds to +inf, master kept
    assert split_bits(0x00000001) == (0x0000, 1)  # smallest fp32 subnormal -> +0.0 param
    assert split_bits(0x00008000) == (0x0001, -0x8000)  # -> smallest bf16 subnormal (2**-133)
    assert split_bits(0x7FC00000) == (0x7FC0, 0)  # quiet NaN stays NaN
    assert split_bits(0x7FFFFFFF) == (0x8000, -1)  # NaN whose high half wraps: param -0.0 (documented)
    assert torch.tensor([0x0001], dtype=torch.int16).view(torch.bfloat16).item() == 2.0**-133


def test_random_values_roundtrip_and_round_like_torch():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1 << 20, generator=g) * torch.logspace(-40, 38, 1 << 20).float()
    hi, rem = split_fp32(x)
    assert torch.equal(bits(merge_fp32(hi, rem)), bits(x))
    _, low = halves(x)
    m = low != 0x8000
    assert torch.equal(bits(hi)[m], bits(x.to(torch.bfloat16))[m])
    assert torch.equal(bits(round_bf16(x)), bits(hi))


# ---------------------------------------------------------------------------------------------- AdamW math
def _hyper(step, **kw):
    base = dict(lr=1e-2, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1, step=step)
    base.update(kw)
    return AdamWHyper(**base)


@pytest.mark.parametrize("decoupled", [True, False])
def test_adamw_matches_torch_optim(decoupled):
    g = torch.Generator().manual_seed(1)
    p0 = torch.randn(1000, generator=g)
    grads = [torch.randn(1000, generator=g) for _ in range(6)]
    ref = torch.nn.Parameter(p0.clone())
    cls = torch.optim.AdamW if decoupled else torch.optim.Adam
    opt = cls([ref], lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, foreach=False)
    p, m, v = p0.clone(), torch.zeros(1000), torch.zeros(1000)
    for t, gr in enumerate(grads, 1):
        ref.grad = gr.clone()
        opt.step()
        p = adamw_chunk(p, gr, m, v, _hyper(t, decoupled=decoupled))
    torch.testing.assert_close(p, ref.detach(), rtol=2e-6, atol=1e-7)
    # torch forms m with lerp (different rounding near zero), hence the absolute tolerance
    torch.testing.assert_close(m, opt.state[ref]["exp_avg"], rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(v, opt.state[ref]["exp_avg_sq"], rtol=1e-6, atol=1e-9)


def test_adamw_clip_coef_scales_the_gradient_and_bf16_moments_round_the_fp32_ones():
    g = torch.Generator().manual_seed(2)
    p, gr = torch.randn(257, generator=g), torch.randn(257, generator=g)
    m1, v1, m2, v2 = (torch.zeros(257) for _ in range(4))
    a = adamw_chunk(p, gr, m1, v1, _hyper(1, clip_coef=0.37))
    b = adamw_chunk(p, gr * 0.37, m2, v2, _hyper(1))
    assert torch.equal(a, b) and torch.equal(m1, m2) and torch.equal(v1, v2)
    mb, vb = torch.randn(257, generator=g).bfloat16(), torch.rand(257, generator=g).bfloat16()
    mf, vf = mb.float(), vb.float()
    c = adamw_chunk(p, gr, mb, vb, _hyper(3))
    d = adamw_chunk(p, gr, mf, vf, _hyper(3))
    assert torch.equal(c, d)
    assert torch.equal(bits(mb), bits(mf.to(torch.bfloat16))) and torch.equal(bits(vb), bits(vf.to(torch.bfloat16)))


def _plain_params(dtype, seed=3):
    g = torch.Generator().manual_seed(seed)
    shapes = {"w1.weight": (37, 11), "w1.bias": (37,), "norm.weight": (11,), "w2.weight": (5, 37)}
    return [(n, torch.nn.Parameter(torch.randn(*s, generator=g).to(dtype))) for n, s in shapes.items()]


def _run_plain(cfg: OptimizerConfig, dtype, steps=30):
    params = _plain_params(dtype)
    opt = ShardedAdamW(params, cfg, expert_names=set(), device="cpu")
    assert not opt.initialized  # lazy: nothing before the first step
    g = torch.Generator().manual_seed(4)
    for t in range(steps):
        for _, p in params:
            p.grad = (torch.randn(p.shape, generator=g) * (10.0 ** (t % 5 - 2))).to(dtype)
        opt.step(lr=3e-2 * (1 + t % 3), clip_coef=0.5 if t % 4 == 0 else 1.0)
    return opt, {n: p.detach().clone() for n, p in params}


def test_sharded_adamw_pao_remainders_equal_fp32_master_bitwise_single_process():
    fp32, w_fp32 = _run_plain(OptimizerConfig(), torch.bfloat16)
    pao, w_pao = _run_plain(OptimizerConfig(use_precision_aware_optimizer=True), torch.bfloat16)
    assert same_bits(w_fp32, w_pao) == []
    for a, b in zip(fp32.slots, pao.slots):
        assert a.mode == "master" and b.mode == "remainder"
        assert a.state["master"].dtype == torch.float32 and b.state["remainder"].dtype == torch.int16
        assert torch.equal(bits(fp32.master_weight(a)), bits(pao.master_weight(b)))
        assert torch.equal(a.state["exp_avg_sq"], b.state["exp_avg_sq"])
    # the remainders carry real information (the masters are not just the bf16 params)
    assert any(bool((s.state["remainder"] != 0).any()) for s in pao.slots)


def test_sharded_adamw_chunking_and_state_layout(monkeypatch):
    _, whole = _run_plain(
        OptimizerConfig(use_precision_aware_optimizer=True, exp_avg_dtype="bf16", exp_avg_sq_dtype="bf16"),
        torch.bfloat16,
        steps=5,
    )
    monkeypatch.setattr(optimizer_mod, "CHUNK", 7)
    opt, chunked = _run_plain(
        OptimizerConfig(use_precision_aware_optimizer=True, exp_avg_dtype="bf16", exp_avg_sq_dtype="bf16"),
        torch.bfloat16,
        steps=5,
    )
    assert same_bits(whole, chunked) == []
    mem = opt.memory()
    n = sum(p.numel() for _, p in _plain_params(torch.bfloat16))
    assert (mem["remainder"]["bytes"], mem["exp_avg"]["bytes"], mem["exp_avg_sq"]["bytes"]) == (2 * n, 2 * n, 2 * n)
    assert mem["master"]["bytes"] == 0
    # fp32 params: the param is the master, only the moments are state
    opt32, _ = _run_plain(OptimizerConfig(), torch.float32, steps=2)
    m32 = opt32.memory()
    assert m32["master"]["bytes"] == m32["remainder"]["bytes"] == 0 and m32["exp_avg"]["bytes"] == 4 * n
    # weight decay follows Megatron's rule: not on biases and 1-D tensors
    assert {s.name: s.decay for s in opt32.slots} == {
        "w1.weight": True,
        "w1.bias": False,
        "norm.weight": False,
        "w2.weight": True,
    }


# ---------------------------------------------------------------------------------------------- schedule, clip, split
@pytest.mark.parametrize(
    "style,warmup", [("constant", 0), ("constant", 5), ("linear", 5), ("cosine", 10), ("cosine", 0)]
)
def test_lr_schedule_matches_megatron_core(style, warmup):
    from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler

    p = torch.nn.Parameter(torch.zeros(1))
    sgd = torch.optim.SGD([p], lr=0.0)
    meg = OptimizerParamScheduler(
        sgd,
        init_lr=1e-5,
        max_lr=3e-3,
        min_lr=3e-4,
        lr_warmup_steps=warmup,
        lr_decay_steps=60,
        lr_decay_style=style,
        start_wd=0.0,
        end_wd=0.0,
        wd_incr_steps=1,
        wd_incr_style="constant",
    )
    ours = LRScheduler(
        OptimizerConfig(
            lr=3e-3,
            min_lr=3e-4,
            lr_warmup_init=1e-5,
            lr_warmup_steps=warmup,
            lr_decay_style=style,
            lr_decay_steps=60 if style != "constant" else None,
        )
    )
    for _ in range(80):
        assert ours.lr == sgd.param_groups[0]["lr"]
        meg.step(1)
        ours.step(1)


def test_offload_split_follows_megatron_rule():
    # a tensor goes to CPU while the count already sent is below fraction * total (whole tensors, may overshoot)
    assert offload_split([10, 20, 30, 40], 0.5) == [True, True, True, False]  # 0, 10, 30 < 50; then 60
    assert offload_split([40, 30, 20, 10], 0.5) == [True, True, False, False]  # 0, 40 < 50; then 70
    assert offload_split([10, 20, 30, 40], 0.05) == [True, False, False, False]
    assert offload_split([10, 20], 1.0) == [True, True] and offload_split([10, 20], 0.0) == [False, False]


def test_clip_coefficient_and_norm_match_torch():
    g = torch.Generator().manual_seed(5)
    grads = [torch.randn(s, generator=g).bfloat16() for s in (100, 7, 33)]
    grads[1][:3] = 0
    norm, zeros = global_norm_and_zeros([(grads[:2], None), (grads[2:], None)], "cpu")
    ref = torch.nn.utils.get_total_norm([t.float() for t in grads])
    assert norm == pytest.approx(float(ref), rel=1e-6)
    assert zeros == sum(int((t == 0).sum()) for t in grads)
    assert clip_coefficient(10.0, 1.0) == pytest.approx(1.0 / (10.0 + 1e-6))
    assert clip_coefficient(0.5, 1.0) == 1.0 and clip_coefficient(10.0, 0.0) == 1.0
    assert clip_coefficient(10.0, None) == 1.0 and clip_coefficient(math.inf, 1.0) == 1.0
    inf_norm, _ = global_norm_and_zeros([([torch.tensor([1.0, math.inf])], None)], "cpu")
    nan_norm, _ = global_norm_and_zeros([([torch.tensor([1.0, math.nan])], None)], "cpu")
    assert inf_norm == math.inf and math.isnan(nan_norm)


@pytest.mark.parametrize(
    "kwargs,needle",
    [
        (dict(exp_avg_dtype="bf16"), "needs use_precision_aware_optimizer"),
        (dict(exp_avg_sq_dtype="fp16", use_precision_aware_optimizer=True), "exp_avg_sq_dtype"),
        (dict(lr_decay_style="cosine"), "lr_decay_steps"),
        (dict(lr_decay_style="wsd"), "lr_decay_style"),
        (dict(offload_fraction=1.5), "offload_fraction"),
        (dict(optimizer="adam"), "optimizer"),
        (dict(betas=(0.9, 1.0)), "betas"),
        (dict(lr=1e-4, min_lr=1e-3), "min_lr"),
    ],
)
def test_optimizer_config_rejects_bad_values_in_one_line(kwargs, needle):
    with pytest.raises(MliteError) as e:
        OptimizerConfig(**kwargs)
    assert needle in str(e.value) and "\n" not in str(e.value)


# ---------------------------------------------------------------------------------------------- THE key test
def _pao_vs_fp32_worker(rank, world, steps):
    from runtime_workers import runtime_config

    from mlite.runtime.runtime import create_runtime

    out = {}
    for name, opt in [
        ("fp32", {}),
        ("pao", {"use_precision_aware_optimizer": True}),
        (
            "pao_bf16_moments",
            {"use_precision_aware_optimizer": True, "exp_avg_dtype": "bf16", "exp_avg_sq_dtype": "bf16"},
        ),
    ]:
        rt = create_runtime(runtime_config("tiny-moe", param_dtype="bf16", **opt))
        h = rt.build_model()
        n = steps if name != "pao_bf16_moments" else 20
        metrics = train(h, n, rank=rank)
        snap = snapshot(h)
        out[name] = {
            "losses": [m["loss"] for m in metrics],
            "norms": [m["grad_norm"] for m in metrics],
            "params": snap["params"],
            "masters": snap["masters"],
            "state_dtypes": {k: str(t.dtype) for s in snap["state"].values() for k, t in s.items()},
            "param_dtypes": {str(t.dtype) for t in snap["params"].values()},
        }
    return out


def _check_pao_vs_fp32(res):
    for rank in res:
        a, b = rank["fp32"], rank["pao"]
        assert a["param_dtypes"] == b["param_dtypes"] == {"torch.bfloat16"}
        assert a["state_dtypes"] == {
            "master": "torch.float32",
            "exp_avg": "torch.float32",
            "exp_avg_sq": "torch.float32",
        }
        assert b["state_dtypes"] == {
            "remainder": "torch.int16",
            "exp_avg": "torch.float32",
            "exp_avg_sq": "torch.float32",
        }
        assert len(a["losses"]) == 50 and a["losses"] == b["losses"]  # exact float equality
        assert a["norms"] == b["norms"]
        assert same_bits(a["params"], b["params"]) == []
        assert same_bits(a["masters"], b["masters"]) == []
        assert sum(a["losses"][-5:]) / 5 < sum(a["losses"][:5]) / 5 - 0.3  # it trained
        c = rank["pao_bf16_moments"]
        assert c["state_dtypes"]["exp_avg"] == "torch.bfloat16" and c["state_dtypes"]["remainder"] == "torch.int16"
        assert c["losses"][0] == a["losses"][0]
        assert sum(c["losses"][-5:]) / 5 < sum(c["losses"][:5]) / 5 - 0.1  # it trains too
        assert c["losses"] != a["losses"][:20]  # bf16 moments are a different run
    # the ranks see the same global loss
    assert all(r["fp32"]["losses"] == res[0]["fp32"]["losses"] for r in res)


@pytest.mark.slow
def test_pao_run_equals_fp32_master_run_bitwise_over_50_steps():
    _check_pao_vs_fp32(run_local(_pao_vs_fp32_worker, 2, (50,), timeout_s=240))
    if torch.cuda.is_available():  # GPU part: the same property with the update on the GPU
        r = run_local(_cuda_pao_worker, 1, device="cuda", timeout_s=240)[0]
        assert r["params"] == [] and r["masters"] == [] and r["losses"][0] == r["losses"][1]


def _cuda_pao_worker(rank, world):
    # backward on CUDA is not bitwise reproducible: feed both runs the same gradients (see runtime_workers.lockstep)
    return lockstep(rank, "cuda", {}, {"use_precision_aware_optimizer": True}, 50)


def test_clip_scale_on_the_device_equals_the_host_coefficient():
    """clip_scale (tensor ops, no host wait) gives clip_coefficient's value rounded to fp32, bit for bit."""
    from mlite.runtime.optim.clip import clip_scale, global_norm_tensor

    g = torch.Generator().manual_seed(9)
    norms = torch.cat([torch.rand(2000, generator=g) * 3, torch.rand(2000, generator=g) * 1e4, torch.tensor([1.0])])
    for clip_grad in (1.0, 0.3, 0.0, None):
        for x in norms.double().tolist():
            c, finite = clip_scale(torch.tensor(x, dtype=torch.float64), clip_grad).tolist()
            assert finite == 1.0 and c == float(torch.tensor(clip_coefficient(x, clip_grad), dtype=torch.float32))
    for bad in (math.inf, math.nan):
        assert clip_scale(torch.tensor(bad, dtype=torch.float64), 1.0).tolist() == [1.0, 0.0]
    grads = [torch.randn(s, generator=g).bfloat16() for s in (100, 7, 33)]
    groups = [(grads[:2], None), (grads[2:], None)]
    sq = [sum(float(torch.linalg.vector_norm(t.float())) ** 2 for t in gs) for gs, _ in groups]
    assert float(global_norm_tensor(groups, "cpu")) == pytest.approx(math.sqrt(sum(sq)), rel=1e-6)
    # bit for bit: the norm is math.sqrt of the float64 sum of squares (as before the device form existed)
    from mlite.runtime.optim.clip import local_sq_lists

    total = float(torch.stack(local_sq_lists([g for g, _ in groups], "cpu")).sum())
    assert float(global_norm_tensor(groups, "cpu")) == math.sqrt(total)


def _skip_worker(rank, world):
    from runtime_workers import runtime_config, same_bits, snapshot, synthetic_microbatches

    from mlite.runtime.optim.optimizer import local
    from mlite.runtime.runtime import create_runtime

    out = {}
    rt = create_runtime(runtime_config("tiny-moe"))
    h = rt.build_model()
    before = snapshot(h)
    rt.forward_backward(h, synthetic_microbatches(0, rank))
    p0 = next(p for p in h.model.parameters() if p.grad is not None)
    local(p0.grad).view(-1)[3] = math.inf
    local(p0.grad).view(-1)[:3] = 0
    expect_zeros = sum(int((local(p.grad) == 0).sum()) for p in h.model.parameters() if p.grad is not None)
    ok, norm, zeros = rt.optimizer_step(h)
    out["skipped"] = (ok, math.isinf(norm), zeros == expect_zeros, h.optimizer.step_count)
    out["unchanged"] = same_bits(snapshot(h)["params"], before["params"])
    rt.zero_grad(h)
    rt.forward_backward(h, synthetic_microbatches(1, rank))
    out["then"] = rt.optimizer_step(h)[0], h.optimizer.step_count
    # a fresh run that only takes the finite step ends in the same bits (the skipped step left no trace)
    rt2 = create_runtime(runtime_config("tiny-moe"))
    h2 = rt2.build_model()
    rt2.forward_backward(h2, synthetic_microbatches(1, rank))
    rt2.optimizer_step(h2)
    out["same_as_fresh"] = same_bits(snapshot(h)["params"], snapshot(h2)["params"])
    return out


def test_inf_norm_skips_the_update_and_its_step_count():
    from mlite.runtime.dist import run_local

    r = run_local(_skip_worker, 1, timeout_s=240)[0]
    assert r["skipped"] == (False, True, True, 0)
    assert r["unchanged"] == []
    assert r["then"] == (True, 1)
    assert r["same_as_fresh"] == []


def test_staged_host_update_equals_the_resident_update_across_chunk_and_shard_boundaries(monkeypatch):
    """The offload path (staging buffers, chunks that start as shards land, shards copied back as their last chunk
    ends) forced on CPU, with chunks smaller than and straddling the shards and a shard without a gradient: the
    same bits and zero counts as the resident update."""
    monkeypatch.setattr(optimizer_mod, "CHUNK", 29)
    staged_calls = []

    def staged(self, g):
        staged_calls.append(g.offload)
        return g.offload

    res = {}
    for name, frac in (("resident", 0.0), ("staged", 1.0)):
        if name == "staged":
            monkeypatch.setattr(ShardedAdamW, "_staged", staged)
        cfg = OptimizerConfig(use_precision_aware_optimizer=True, offload_fraction=frac)
        params = _plain_params(torch.bfloat16)
        opt = ShardedAdamW(params, cfg, expert_names=set(), device="cpu")
        g = torch.Generator().manual_seed(4)
        zeros = []
        for t in range(6):
            for i, (_, p) in enumerate(params):
                p.grad = None if (i == 1 and t % 2) else (torch.randn(p.shape, generator=g) * 0.1).bfloat16()
                if p.grad is not None:
                    p.grad.view(-1)[: t + 1] = 0
            zeros.append(opt.step(lr=1e-2, clip_coef=0.5 if t % 3 == 0 else 1.0))
        res[name] = ({n: p.detach().clone() for n, p in params}, zeros, opt)
    assert staged_calls and all(staged_calls)
    assert same_bits(res["resident"][0], res["staged"][0]) == []
    assert res["resident"][1] == res["staged"][1]
    for a, b in zip(res["resident"][2].slots, res["staged"][2].slots):
        assert torch.equal(a.state["remainder"], b.state["remainder"])
        assert torch.equal(a.state["exp_avg_sq"], b.state["exp_avg_sq"])
