"""FLOPs per token (``mlite.models.flops``, the MFU numerator) against PyTorch's own counter,
``torch.utils.flop_counter.FlopCounterMode``, on the lite models the runtime trains.

What each side counts as a FLOP:

* the counter: only the ops in its registry, from their shapes: ``mm`` / ``addmm`` / ``bmm`` / ``baddbmm`` (what
  ``F.linear`` and ``matmul`` become) are 2·m·n·k (an ``addmm``'s bias add is not counted), ``aten.convolution``,
  and CUDA's flash / efficient / cuDNN SDPA kernels; not ``torch._grouped_mm`` (the CUDA expert path: here the
  experts take the CPU loop path, one ``F.linear`` pair per expert). It does
  not see PyTorch's CPU SDPA kernel (``_scaled_dot_product_flash_attention_for_cpu`` is not in the registry: the
  attention core would count 0), nor a triangular solve, nor any elementwise op. So the attention tests run SDPA under
  ``SDPBackend.MATH``, where the core is two ``bmm`` over the whole L x L square (the causal mask is applied
  elementwise): 2·L·L·d for the scores and 2·L·L·d_v for the values per head, which is the formula with
  ``causal=False`` (``causal=True`` halves that term: a causal kernel skips the upper triangle).
* the formula: 2 per matrix parameter a token touches (attention / MLP / routed experts it is sent to / shared
  experts / the output projection, the lm_head or the tied embedding matrix), forward; the attention score/value
  term; training = 3 x forward. Two deliberate differences, taken off here by name, never by a tolerance: the
  formula also gives 2 FLOPs per element to the tensors inside those components that are no GEMM operand: the small
  vectors (q/k norms, biases, the Gated DeltaNet's dt_bias / A_log / gated-norm weight) and the Gated DeltaNet's
  short-conv weight (2·channels·kernel per token, real work, but ``causal_conv1d_packed`` does it as kernel-many
  shifted elementwise multiply-adds, not as an ``aten.convolution``), which the counter ignores; and it leaves out
  the router GEMM (2·hidden·experts per token), which the counter sees under the modules ``*.mlp.gate``.
* the Gated DeltaNet core: the formula counts the chunked delta rule as fla's kernel does it (2·HV·(2·K·V + 64·(K + V))
  per token); the pure-PyTorch path the lite runtime runs on CPU does more GEMMs (the chunk-to-chunk state hand-over,
  K x K per chunk) and a triangular solve the counter cannot see, so the core is measured on its own (module
  ``GDNCore`` below), taken off both sides, and only checked to cost the counter at least what the formula says.

The backward pass: autograd's GEMMs (2 per forward GEMM) are counted by the counter as they run; the fused linear
cross-entropy computes its two gradient GEMMs inside its forward, so the total over forward + backward is what the
3 x holds. MoE: on CPU the real router decides, and the counter counts what ran (every (token, slot) pair goes
through exactly one expert's GEMMs, so the total does not depend on the balance); on the meta device (the catalog's
real configs at full width) a balanced routing is forced, since meta tensors hold no routing decisions. MLA / DSA /
compressed attention / Mamba2 are not built by the lite runtime (``SUPPORTED_ARCHITECTURES``); MLA is counted on transformers' own
DeepSeek-V3 model instead (the last test), DSA / compressed attention / Mamba2 are not here.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from mlite.models import from_hf_config, load_config
from mlite.models.flops import _MATRIX_COMPONENTS, attention_flops
from mlite.models.shrink import shrink_config
from mlite.runtime.batch import PackedBatch
from mlite.runtime.models import build_lite_model, deltanet
from mlite.runtime.models import moe as moe_mod

T = 64
"""Tokens of the one sequence each case runs (one GDN chunk on CPU)."""
TINY = ("tiny-dense", "tiny-llama", "tiny-qwen2", "tiny-moe", "tiny-mixtral", "tiny-hybrid", "tiny-qwen3-next")
"""Every family the lite runtime builds (qwen3, llama, qwen2, qwen3_moe, mixtral, qwen3_5_moe, qwen3_next)."""
CATALOG = (
    "Qwen3-8B",
    "Llama-3.1-8B",
    "Qwen2.5-32B",
    "Qwen3-30B-A3B",
    "Qwen3-235B-A22B",
    "Mixtral-8x7B",
    "Qwen3.5-35B-A3B",
    "Qwen3-Next-80B-A3B-Thinking",
)
"""Shipped configs the lite runtime builds, one per family and shape (heads x head_dim != hidden in the Qwen3 MoE and
Qwen3.5 ones), cut to their distinct layer kinds and built on the meta device at full width."""


class GDNCore(nn.Module):
    """The gated delta rule as a module, so the counter's module tracker reports its FLOPs apart."""

    def forward(self, *args, **kw):
        return _GDR(*args, **kw)


_GDR = deltanet.gated_delta_rule


@pytest.fixture(autouse=True)
def _gdn_core_as_module(monkeypatch):
    monkeypatch.setattr(deltanet, "gated_delta_rule", lambda *a, **kw: GDNCore()(*a, **kw))
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _balanced_moe_forward(self, x, want_aux=False):
    """MoE.forward with every expert given the same number of (token, slot) pairs (give or take one)."""
    n, k, E = x.shape[0], self.top_k, self.num_experts
    self.gate(x)  # the router GEMM still runs (and is taken off by its module name)
    q, r = divmod(n * k, E)
    counts = torch.tensor([q + 1] * r + [q] * (E - r))
    y = self.experts(x.repeat_interleave(k, dim=0), counts).view(n, k, -1).sum(dim=1)
    if self.shared_name is not None:
        s = getattr(self, self.shared_name)(x)
        y = y + (torch.sigmoid(self.shared_expert_gate(x)) * s if self.shared_expert_gate is not None else s)
    return y, None


def _counted(model, run) -> dict[str, float]:
    """Counter FLOPs of ``run()`` (SDPA on its math path): total, router GEMMs, Gated DeltaNet cores."""
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as fc:
        run()
    by = {k: sum(d.values()) for k, d in fc.get_flop_counts().items()}
    return {
        "total": fc.get_total_flops(),
        "router": sum(v for k, v in by.items() if k.endswith(".mlp.gate")),
        "gdn_core": sum(v for k, v in by.items() if k.endswith("GDNCore")),
    }


def _expected(spec, model, *, training: bool) -> dict[str, float]:
    """The formula's figure for ``T`` tokens, split as the counter sees it (see the module docstring)."""
    comp = {f"model.layers.{lay.index}.{g.name}": g.component for lay in spec.main_layers for g in lay.groups}
    vectors = sum(
        p.numel()
        for n, p in model.named_parameters()
        if (p.dim() == 1 or n.endswith("conv1d.weight")) and comp.get(model.hf_key(n)) in _MATRIX_COMPONENTS
    )
    mult = 3 if training else 1
    gdn = sum(attention_flops(spec, lay, T, False) for lay in spec.main_layers if lay.attention == "gdn")
    total = spec.flops_per_token(T, training=training, causal=False) * T
    return {"total": total, "vectors": mult * 2 * vectors * T, "gdn_core": mult * gdn * T}


def _check(spec, model, counted, *, training):
    want = _expected(spec, model, training=training)
    got = counted["total"] - counted["router"] - counted["gdn_core"]
    assert got == want["total"] - want["vectors"] - want["gdn_core"], (spec.name, training, counted, want)
    assert counted["gdn_core"] >= want["gdn_core"]
    if any(lay.attention == "gdn" for lay in spec.main_layers):
        assert want["gdn_core"] > 0 and counted["gdn_core"] > 0
    if spec.is_moe:
        assert counted["router"] > 0


def _spec(cfg, name, tied):
    return from_hf_config(dict(cfg, tie_word_embeddings=tied), name=name)


@pytest.mark.parametrize("tied", [False, True], ids=["untied", "tied_output_projection"])
@pytest.mark.parametrize("name", TINY)
def test_flops_per_token_matches_flop_counter_tiny_cpu_tied_output_projection_counted(name, tied):
    """CPU, the training path (``model(batch)``: the fused linear cross-entropy), real routing: forward alone and
    forward + backward. With tied embeddings the output projection is the embedding matrix and is counted."""
    spec = _spec(load_config(name)[1], name, tied)
    model = build_lite_model(spec)
    g = torch.Generator().manual_seed(0)
    ids, labels = (torch.randint(0, spec.vocab_size, (T,), generator=g) for _ in range(2))
    batch = PackedBatch(ids, labels, torch.tensor([T]))  # every position a loss position

    def forward():
        with torch.no_grad():
            model(batch)

    def train():
        model(batch)[0].backward()

    _check(spec, model, _counted(model, forward), training=False)
    _check(spec, model, _counted(model, train), training=True)


@pytest.mark.parametrize("tied", [False, True], ids=["untied", "tied_output_projection"])
@pytest.mark.parametrize("name", CATALOG)
def test_flops_per_token_matches_flop_counter_catalog_meta_tied_output_projection_counted(name, tied, monkeypatch):
    """The shipped configs at full width (the vocabulary too) on the meta device, forward + backward of the logits,
    a balanced routing forced."""
    monkeypatch.setattr(moe_mod.MoE, "forward", _balanced_moe_forward)
    kinds = len({(lay.attention, lay.mlp) for lay in from_hf_config(name).main_layers})
    spec = _spec(shrink_config(name, layers=kinds).config, name, tied)
    model = build_lite_model(spec, device="meta")
    ids = torch.zeros(T, dtype=torch.long, device="meta")
    _check(spec, model, _counted(model, lambda: model(ids, lengths=(T,)).sum().backward()), training=True)


def test_tied_and_untied_cost_the_same():
    """Tying shares the matrix, it does not remove the GEMM: the same FLOPs either way."""
    raw = load_config("Qwen3-8B")[1]
    assert _spec(raw, "a", True).flops_per_token(4096) == _spec(raw, "b", False).flops_per_token(4096)


MLA = ("DeepSeek-V3", "Moonlight-16B-A3B-Instruct")
"""Shipped MLA configs (with and without a query LoRA), which the lite runtime does not build: counted on transformers'
own model (``attn_implementation="eager"``: the scores and values are two matmuls over the whole square, as under
SDPA's math path), cut to one dense MLA layer, at full width on the meta device."""


@pytest.mark.parametrize("tied", [False, True], ids=["untied", "tied_output_projection"])
@pytest.mark.parametrize("name", MLA)
def test_flops_per_token_matches_flop_counter_on_transformers_mla_tied_output_projection_counted(name, tied):
    """MLA's low-rank projections (q_a / q_b or q, kv_a_with_mqa, kv_b, o) and its score/value term
    (qk = nope + rope, v = v_head_dim) as the formula counts them, forward + backward. What transformers computes
    besides the model's GEMMs is taken off by name: the rotary table's ``inv_freq @ positions`` matmul (module
    ``rotary_emb``) and, as for the lite models, the 2 FLOPs per element the formula gives the MLA's two latent
    RMSNorm weights (vectors inside the attention component)."""
    import transformers

    cfg = {k: v for k, v in shrink_config(name, layers=1).config.items() if k != "quantization_config"}
    spec = _spec(cfg, name, tied)
    assert [lay.attention for lay in spec.main_layers] == ["mla"]
    hf = transformers.AutoConfig.for_model(**dict(cfg, tie_word_embeddings=tied))
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(hf, attn_implementation="eager")
    ids = torch.zeros(1, T, dtype=torch.long, device="meta")
    with FlopCounterMode(display=False) as fc:
        model(input_ids=ids).logits.sum().backward()
    by = {k: sum(d.values()) for k, d in fc.get_flop_counts().items()}
    rotary = sum(v for k, v in by.items() if k.endswith(".rotary_emb"))
    assert 0 < rotary < 1e-6 * fc.get_total_flops()
    comp = {f"model.layers.{lay.index}.{g.name}": g.component for lay in spec.main_layers for g in lay.groups}
    vectors = sum(p.numel() for n, p in model.named_parameters() if p.dim() == 1 and comp.get(n) in _MATRIX_COMPONENTS)
    assert vectors > 0  # the latent norms
    want = spec.flops_per_token(T, training=True, causal=False) * T - 3 * 2 * vectors * T
    assert fc.get_total_flops() - rotary == want
