"""Lite models: exact parameter counts, transformers as the numerical oracle (logits and gradients, packed vs one
sequence at a time), recompute modes, MoE aux loss, fused cross-entropy, determinism, and that training works."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

from mlite.errors import MliteError
from mlite.models import from_hf_config, load_config
from mlite.runtime.batch import PackedBatch
from mlite.runtime.models import DecoderBlock, build_lite_model, lite_config
from mlite.runtime.models import attention as attention_mod
from mlite.runtime.models.loss import linear_cross_entropy

TINY = ("tiny-dense", "tiny-moe", "tiny-hybrid")


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tiny ops run fastest on one thread (and several threads thrash on a busy 2-core CI box)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _sequences(lens=(37, 70), vocab=512, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (n,), generator=g) for n in lens]


# ---------------------------------------------------------------------- parameter counts
@pytest.mark.parametrize("name", TINY + ("tiny-llama", "tiny-qwen2", "tiny-mixtral", "tiny-qwen3-next"))
def test_param_count_tiny(name):
    spec = from_hf_config(name)
    model = build_lite_model(spec)
    assert model.num_params() == spec.total - spec.mtp
    if name in TINY:
        assert model.num_params() == spec.training_params


@pytest.mark.parametrize(
    "name",
    ["Qwen3-8B", "Qwen3-30B-A3B", "Qwen3.5-35B-A3B", "Llama-3.1-8B", "Mixtral-8x7B", "Qwen3-Next-80B-A3B-Thinking"],
)
def test_param_count_large_on_meta(name):
    spec = from_hf_config(name)
    model = build_lite_model(spec, device=torch.device("meta"), param_dtype=torch.bfloat16)
    assert all(p.device.type == "meta" for p in model.parameters())
    assert model.num_params() == spec.total - spec.mtp
    experts = model.expert_modules()
    assert len(experts) == spec.num_moe_layers
    assert sum(p.numel() for e in experts for p in e.parameters()) == spec.components.get("routed_experts", 0)


@pytest.mark.parametrize("name, kind", [("tiny-deepseek-v3", "deepseek_v3"), ("tiny-glm4-moe", "glm4_moe")])
def test_unsupported_architecture_is_one_line(name, kind):
    with pytest.raises(MliteError) as e:
        build_lite_model(name, device="meta")
    assert kind in str(e.value) and "\n" not in str(e.value)


def test_unsupported_layer_kind_names_it():
    cfg = lite_config(from_hf_config("tiny-dense"))
    with pytest.raises(MliteError, match="'mla'"):
        DecoderBlock(cfg, "mla", "dense", set(), index=3)
    with pytest.raises(MliteError, match="'hash_moe'"):
        DecoderBlock(cfg, "full", "hash_moe", set(), index=3)
    with pytest.raises(MliteError, match="recompute"):
        build_lite_model("tiny-dense", recompute="some")


# ---------------------------------------------------------------------- transformers oracle
def _variants():
    out = [(n, load_config(n)[1]) for n in TINY + ("tiny-llama", "tiny-qwen2", "tiny-mixtral", "tiny-qwen3-next")]
    llama = dict(
        load_config("tiny-llama")[1],
        tie_word_embeddings=True,
        rope_theta=500000.0,
        rope_scaling={
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 16,
        },
    )
    moe = dict(load_config("tiny-moe")[1], norm_topk_prob=False, decoder_sparse_step=2, mlp_only_layers=[0])
    return out + [("llama3-rope-tied", llama), ("moe-unnormalised-sparse", moe)]


def _hf_model(cfg: dict):
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    cfg = {k: v for k, v in cfg.items() if k != "architectures"}
    mt = cfg.pop("model_type")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return AutoModelForCausalLM.from_config(AutoConfig.for_model(mt, **cfg), dtype=torch.float32)


def _perturbed_lite(spec, seed=1):
    """A lite model whose every weight (norm scales included) is off its init, so no term can hide."""
    lite = build_lite_model(spec, seed=seed)
    g = torch.Generator().manual_seed(seed + 10)
    with torch.no_grad():
        for n, p in lite.named_parameters():
            if not n.endswith("A_log"):
                p.add_(0.05 * torch.randn(p.shape, generator=g))
    return lite


@pytest.mark.parametrize("name, cfg", _variants(), ids=[v[0] for v in _variants()])
def test_logits_match_transformers(name, cfg):
    spec = from_hf_config(cfg, name=name)
    lite = _perturbed_lite(spec)
    hf = _hf_model(cfg).eval()
    missing, unexpected = hf.load_state_dict(lite.hf_state_dict(), strict=False)
    assert not missing and not unexpected
    seqs = _sequences()
    batch = PackedBatch.from_sequences([s.tolist() for s in seqs])
    with torch.no_grad():
        got = lite.forward_batch(batch)
        want = torch.cat([hf(input_ids=s[None]).logits[0] for s in seqs])
    torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("name", TINY)
def test_loss_and_gradients_match_transformers(name):
    """Sum of token CEs over a packed batch and every parameter's gradient, vs HF run one sequence at a time."""
    cfg = load_config(name)[1]
    spec = from_hf_config(cfg, name=name)
    lite = _perturbed_lite(spec, seed=2)
    hf = _hf_model(cfg)
    hf.load_state_dict(lite.hf_state_dict(), strict=False)
    seqs = _sequences((23, 64, 9), seed=4)
    masks = [[i % 4 != 0 for i in range(len(s))] for s in seqs]
    batch = PackedBatch.from_sequences([s.tolist() for s in seqs], masks)
    loss, n = lite.loss(batch)
    loss.backward()
    ref, count = 0.0, 0
    for s, mask in zip(seqs, masks):
        logits = hf(input_ids=s[None]).logits[0]
        tgt = torch.where(torch.tensor(mask[1:]), s[1:], torch.full_like(s[1:], -100))
        ref = ref + F.cross_entropy(logits[:-1].float(), tgt, reduction="sum", ignore_index=-100)
        count += int((tgt != -100).sum())
    ref.backward()
    assert n == count
    torch.testing.assert_close(loss, ref.detach(), atol=1e-4, rtol=1e-5)
    hf_params = dict(hf.named_parameters())
    for pname, p in lite.named_parameters():
        torch.testing.assert_close(
            p.grad, hf_params[lite.hf_key(pname)].grad, atol=2e-5, rtol=1e-3, msg=lambda m, pname=pname: f"{pname}: {m}"
        )


def test_cpu_attention_paths_agree(monkeypatch):
    """Block-diagonal-mask SDPA (one call) and one SDPA call per sequence give the same logits."""
    lite = build_lite_model("tiny-dense", seed=3)
    batch = PackedBatch.from_sequences([s.tolist() for s in _sequences((5, 30, 1, 17))])
    with torch.no_grad():
        masked = lite.forward_batch(batch)
        monkeypatch.setattr(attention_mod, "MASK_MAX_TOKENS", 0)
        looped = lite.forward_batch(batch)
    torch.testing.assert_close(masked, looped, atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------------- recompute, aux loss, fused CE
def _saved_bytes(model, batch) -> tuple[torch.Tensor, int]:
    total = [0]

    def pack(t):
        total[0] += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss, _ = model.loss(batch)
    return loss, total[0]


def test_recompute_modes_same_numbers_less_memory():
    batch = PackedBatch.from_sequences([s.tolist() for s in _sequences((60, 100, 40))])
    results = {}
    for mode in ("none", "selective", "full"):
        m = build_lite_model("tiny-hybrid", seed=5, recompute=mode)
        loss, saved = _saved_bytes(m, batch)
        loss.backward()
        results[mode] = (loss.detach(), {n: p.grad for n, p in m.named_parameters()}, saved)
    base_loss, base_grads, base_saved = results["none"]
    for mode in ("selective", "full"):
        loss, grads, _ = results[mode]
        torch.testing.assert_close(loss, base_loss, atol=0, rtol=0)
        for n in base_grads:
            torch.testing.assert_close(grads[n], base_grads[n], atol=1e-7, rtol=1e-6)
    assert results["full"][2] < results["selective"][2] < base_saved


def test_moe_aux_loss_is_switch_loss_summed_over_layers():
    coeff = 0.01
    batch = PackedBatch.from_sequences([s.tolist() for s in _sequences((50, 30))])
    plain = build_lite_model("tiny-moe", seed=7)
    with_aux = build_lite_model("tiny-moe", seed=7, moe_aux_loss_coeff=coeff)
    logits = []
    hooks = [
        b.mlp.gate.register_forward_hook(lambda mod, inp, out: logits.append(out.detach()))
        for b in with_aux.blocks
        if b.mlp_kind == "moe"
    ]
    ce, n = plain.loss(batch)
    total, n2 = with_aux.loss(batch)
    for h in hooks:
        h.remove()
    E, k = with_aux.config.num_experts, with_aux.config.moe_router_topk
    aux = 0.0
    for lg in logits:  # independent recomputation: one-hot counts of the top-k choices
        probs = lg.float().softmax(-1)
        chosen = F.one_hot(probs.topk(k, dim=-1).indices, E).sum(dim=(0, 1)).float()
        aux += E * (chosen / (lg.shape[0] * k) * probs.mean(0)).sum()
    assert len(logits) == 4 and n == n2
    torch.testing.assert_close(total, ce + coeff * aux * n, atol=1e-5, rtol=1e-6)
    assert 1.0 * len(logits) <= aux.item() <= E * len(logits)  # 1 per layer at perfect balance


@pytest.mark.parametrize("chunk", [7, 4096])
def test_fused_linear_cross_entropy(chunk):
    g = torch.Generator().manual_seed(0)
    h = torch.randn(50, 16, generator=g, requires_grad=True)
    w = torch.randn(97, 16, generator=g, requires_grad=True)
    t = torch.randint(0, 97, (50,), generator=g)
    got = linear_cross_entropy(h, w, t, chunk)
    (2.5 * got).backward()
    gh, gw = h.grad.clone(), w.grad.clone()
    h.grad = w.grad = None
    want = F.cross_entropy(h @ w.t(), t, reduction="sum")
    (2.5 * want).backward()
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(gh, h.grad)
    torch.testing.assert_close(gw, w.grad)


def test_label_outside_vocabulary_is_one_line():
    m = build_lite_model("tiny-dense")
    b = PackedBatch(torch.tensor([1, 2, 3]), torch.tensor([2, 3, 999]), torch.tensor([3]))
    with pytest.raises(MliteError, match="vocab_size 512"):
        m.loss(b)


# ---------------------------------------------------------------------- determinism, dtypes, training
def test_init_is_deterministic_and_leaves_global_rng_alone():
    torch.manual_seed(123)
    before = torch.rand(3)
    torch.manual_seed(123)
    a = build_lite_model("tiny-hybrid", seed=0)
    after = torch.rand(3)
    b = build_lite_model("tiny-hybrid", seed=0)
    c = build_lite_model("tiny-hybrid", seed=1)
    assert torch.equal(before, after)
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert any(not torch.equal(sa[k], sc[k]) for k in sa)


@pytest.mark.parametrize("name", TINY)
def test_bf16_forward_backward(name):
    m = build_lite_model(name, param_dtype=torch.bfloat16)
    assert all(p.dtype == torch.bfloat16 for p in m.parameters())
    batch = PackedBatch.from_sequences([s.tolist() for s in _sequences((20, 33))])
    loss, _n = m.loss(batch)
    assert loss.dtype == torch.float32 and torch.isfinite(loss)
    loss.backward()
    assert all(p.grad is not None and torch.isfinite(p.grad.float()).all() for p in m.parameters())


def _train(name, steps, seed=0, lr=3e-3):
    from mlite.runtime.data import sft_iterator

    it = sft_iterator(tokens_per_microbatch=384, seed=seed)
    model = build_lite_model(name, seed=seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    losses = []
    for _ in range(steps):
        (batch,) = next(it)
        loss, n = model.loss(batch)
        (loss / n).backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item() / n)
    return losses


@pytest.mark.parametrize("name", TINY)
def test_loss_falls_with_adamw(name):
    losses = _train(name, 12)
    assert sum(losses[-3:]) / 3 < losses[0] - 0.8, losses


def test_training_is_deterministic():
    assert _train("tiny-moe", 3, seed=4) == _train("tiny-moe", 3, seed=4)


def test_fused_cross_entropy_skips_gradients_without_grad_mode():
    g = torch.Generator().manual_seed(0)
    h = torch.randn(20, 8, generator=g, requires_grad=True)
    w = torch.randn(33, 8, generator=g, requires_grad=True)
    t = torch.randint(0, 33, (20,), generator=g)
    with torch.no_grad():
        loss = linear_cross_entropy(h, w, t, 6)
    assert not loss.requires_grad
    torch.testing.assert_close(loss, F.cross_entropy(h @ w.t(), t, reduction="sum").detach())
