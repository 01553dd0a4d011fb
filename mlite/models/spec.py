"""The model description every other module works from: layers by kind, parameters by component.

Conventions (also in the README):

* ``total``: every parameter of the language-model checkpoint, MTP layers included (and also reported on
  their own as ``mtp``); vision towers excluded (reported apart as ``vision`` where the kit can count them);
  tied embeddings counted once. Checkpoint-only copies (DeepSeek-style MTP layers store their own
  ``embed_tokens`` and ``shared_head.head``) count in ``total`` because they are in the checkpoint, but a
  training run shares them with the main model, so they are left out of per-GPU memory.
* ``active``: parameters touched per token by the main model (MTP excluded): ``total`` minus MTP minus the
  routed experts a token does not use; embedding and lm_head included.
* Router expert biases (``e_score_correction_bias``) are parameters here; transformers holds them as buffers.
* N-gram memory tables (DeepSeek-V4.1's Engram, component ``ngram_tables``, split kind ``rows``) count in ``total``
  (they are checkpoint tensors) but not in ``active`` (a token reads a few rows of them, no matrix product): they are
  not transformer weights, their rows are sharded over the DP x CP owners and the memory code treats them apart
  (:mod:`mlite.memory.ngram`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import ClassVar

COMPONENTS = (
    "embedding",
    "attention",
    "linear_attention",
    "dense_mlp",
    "routed_experts",
    "shared_experts",
    "router",
    "norms",
    "hyper_connections",
    "ngram_tables",
    "lm_head",
    "mtp",
    "other",
)
"""Component names, in display order. ``mtp`` collects every parameter of the MTP layers."""

_EXPERT_MLPS = ("moe", "hash_moe")

PARALLEL_KINDS = ("tp", "rep", "expert", "vocab", "rows")
"""How a tensor is split: ``tp`` over tensor parallelism, ``rep`` replicated across TP, ``expert`` over
EP x ETP, ``vocab`` vocabulary-parallel over TP (after padding the vocabulary), ``rows`` an n-gram memory table
whose rows are sharded over the DP x CP owners (contiguous intervals, DeepSeek-V4.1's Engram)."""


@dataclass(frozen=True, slots=True)
class ParamGroup:
    """One weight tensor of the model (or of one layer)."""

    name: str
    """Checkpoint-style name relative to its layer, e.g. ``self_attn.q_proj.weight``."""
    numel: int
    """Number of elements."""
    component: str
    """One of :data:`COMPONENTS` (never ``mtp``: MTP layers keep their inner breakdown)."""
    parallel: str
    """One of :data:`PARALLEL_KINDS`."""
    checkpoint_only: bool = False
    """True for checkpoint copies the training model shares with the main model (MTP embed/head copies)."""
    rows: int = 0
    """Rows of an n-gram memory table (``parallel == "rows"``; its width is ``numel // rows``); 0 otherwise."""

    @property
    def width(self) -> int:
        """Row width of an n-gram table (0 for other tensors)."""
        return self.numel // self.rows if self.rows else 0

    shape: tuple[int, ...] = ()
    """The tensor's dimensions where the kit knows them: ``(out, in)`` of a linear weight (``nn.Linear`` layout),
    ``(experts, out, in)`` of fused routed experts; ``()``: not a GEMM weight, or not described (norms, biases,
    convolutions, tables). :mod:`mlite.models.quantized` reads it (FP8 block scales, the rollout TP block rule)."""
    tp_dim: int | None = None
    """The dimension of :attr:`shape` tensor parallelism splits (vLLM and Megatron-Core alike: 0, the output, for a
    column-parallel weight; 1, the input, for a row-parallel one; experts: their FFN width); None: not split."""
    tp_unit: int = 1
    """Rows of :attr:`tp_dim` that stay together on one rank (DeepSeek-V4's ``o_a_proj``: one output group of
    ``o_lora_rank`` rows; vLLM keeps ``o_groups // tp`` whole groups per rank)."""
    tp_replicate: bool = False
    """Past ``shape[tp_dim] / tp_unit`` ranks each unit is replicated, not split (vLLM's ``QKVParallelLinear``: KV
    heads ``divide(tp, kv_heads)`` when TP exceeds them: one head per rank)."""
    tp_parts: int = 1
    """Equal partitions stacked along :attr:`tp_dim` that TP splits each on its own (fused gate and up: 2; vLLM's
    merged column-parallel weights check each partition)."""

    @property
    def matrix(self) -> bool:
        """A weight matrix Muon orthogonalises: :attr:`shape` has two dimensions (or three: stacked routed experts,
        one matrix each) and it is not the embedding or the output layer (Megatron Lite's
        ``tag_muon_parameter_metadata``; :mod:`mlite.memory.muon`). Tensors without a described shape are not."""
        return len(self.shape) >= 2 and self.component not in ("embedding", "lm_head")


@dataclass(frozen=True, slots=True)
class LayerSpec:
    """One decoder layer (main or MTP)."""

    index: int
    """Position in the checkpoint (MTP layers follow the main layers)."""
    attention: str
    """``full``, ``gated_full`` (output-gated), ``mla``, ``dsa`` (MLA + indexer), ``gdn`` (Gated DeltaNet),
    ``csa``/``hca``/``swa`` (DeepSeek-V4 compressed sparse / heavily compressed / sliding attention), ``mamba2``
    (Mamba2 SSM mixer, Nemotron-H), ``none`` (a layer with only an MLP part, Nemotron-H)."""
    mlp: str
    """``dense``, ``moe``, ``hash_moe`` or ``none`` (a layer with only a mixer, Nemotron-H)."""
    mtp: bool
    """True for a multi-token-prediction layer."""
    groups: tuple[ParamGroup, ...]
    """Every tensor of the layer."""

    @property
    def kind(self) -> str:
        """``attention+mlp``, prefixed ``mtp:`` for MTP layers (e.g. ``gdn+moe``, ``mtp:mla+moe``)."""
        k = f"{self.attention}+{self.mlp}"
        return f"mtp:{k}" if self.mtp else k

    @property
    def params(self) -> int:
        """All parameters of the layer (checkpoint copies included)."""
        return sum(g.numel for g in self.groups)

    def by_component(self) -> dict[str, int]:
        """Parameters of this layer by component."""
        out: dict[str, int] = {}
        for g in self.groups:
            out[g.component] = out.get(g.component, 0) + g.numel
        return out


@dataclass(frozen=True)
class ModelSpec:
    """An exact description of a language model, built from a Hugging Face ``config.json``."""

    name: str
    """Display name (file stem or the ``name`` argument)."""
    model_type: str
    """``model_type`` as the config says (``kimi_k2`` stays ``kimi_k2``)."""
    architecture: str
    """The architecture the kit reads it as (``deepseek_v3`` for Kimi)."""
    source: str
    """``native`` (the kit's own inventory) or ``transformers-meta`` (built from transformers on the meta device)."""
    hidden_size: int
    """Model width h."""
    vocab_size: int
    """Vocabulary size V (unpadded)."""
    num_layers: int
    """Main decoder layers (MTP excluded)."""
    num_attention_heads: int
    """Query heads."""
    num_key_value_heads: int
    """Key/value heads (GQA); equals the query heads for MLA."""
    head_dim: int
    """Query/key head dimension of full attention (qk_nope + qk_rope for MLA)."""
    v_head_dim: int
    """Value head dimension."""
    ffn_hidden_size: int
    """Dense MLP width (0 if no dense MLP layer)."""
    moe_ffn_hidden_size: int = 0
    """Routed expert width."""
    num_experts: int = 0
    """Routed experts per MoE layer."""
    moe_router_topk: int = 0
    """Experts each token is routed to."""
    shared_expert_ffn_hidden_size: int = 0
    """Total width of the shared expert(s) (n_shared x width), 0 if none."""
    tie_word_embeddings: bool = False
    """lm_head shares the embedding matrix."""
    q_lora_rank: int | None = None
    """MLA query low-rank dimension."""
    kv_lora_rank: int | None = None
    """MLA key/value low-rank dimension."""
    qk_pos_emb_head_dim: int = 0
    """MLA rotary part of the query/key head."""
    linear_num_key_heads: int = 0
    """Gated DeltaNet key heads."""
    linear_num_value_heads: int = 0
    """Gated DeltaNet value heads."""
    linear_key_head_dim: int = 0
    """Gated DeltaNet key head dimension."""
    linear_value_head_dim: int = 0
    """Gated DeltaNet value head dimension."""
    linear_conv_kernel_dim: int = 0
    """Gated DeltaNet short-convolution width."""
    hc_mult: int = 1
    """DeepSeek-V4 hyper-connection streams (1 = plain residual)."""
    mamba_num_heads: int = 0
    """Mamba2 SSM heads (Nemotron-H), 0 if none."""
    mamba_head_dim: int = 0
    """Mamba2 head dimension; d_inner = heads x head_dim."""
    mamba_num_groups: int = 0
    """Mamba2 B/C groups."""
    mamba_state_dim: int = 0
    """Mamba2 SSM state size N."""
    mamba_conv_kernel: int = 0
    """Mamba2 short-convolution width."""
    max_position_embeddings: int = 0
    """Longest context the config declares."""
    pre: tuple[ParamGroup, ...] = ()
    """Tensors before the first layer (the embedding)."""
    post: tuple[ParamGroup, ...] = ()
    """Tensors after the last layer (final norm, lm_head, hyper-connection head)."""
    layers: tuple[LayerSpec, ...] = ()
    """Main layers, then MTP layers."""
    vision_params: int | None = None
    """Vision tower parameters (not in ``total``); None when the config has none or the kit cannot count it."""
    notes: tuple[str, ...] = ()
    """What the reader assumed or which path it used, in plain words."""
    config: dict = field(default_factory=dict, repr=False, compare=False)
    """The (text) config dict the spec was read from."""

    from_hf_config: ClassVar[Callable[..., ModelSpec]]
    """:func:`mlite.models.reader.from_hf_config`, the documented entry point (attached by :mod:`mlite.models`, which
    imports the reader)."""

    # ----------------------------------------------------------------- layers
    @cached_property
    def main_layers(self) -> tuple[LayerSpec, ...]:
        """The main decoder layers."""
        return tuple(layer for layer in self.layers if not layer.mtp)

    @cached_property
    def mtp_layers(self) -> tuple[LayerSpec, ...]:
        """The MTP layers."""
        return tuple(layer for layer in self.layers if layer.mtp)

    @property
    def num_mtp_layers(self) -> int:
        """Number of MTP layers in the checkpoint."""
        return len(self.mtp_layers)

    @property
    def is_moe(self) -> bool:
        """True if any main layer has routed experts."""
        return any(layer.mlp in _EXPERT_MLPS for layer in self.main_layers)

    @property
    def num_moe_layers(self) -> int:
        """Main layers with routed experts."""
        return sum(layer.mlp in _EXPERT_MLPS for layer in self.main_layers)

    @property
    def attention_kinds(self) -> tuple[str, ...]:
        """Attention kinds present, in first-seen order."""
        return tuple(dict.fromkeys(layer.attention for layer in self.layers))

    # ----------------------------------------------------------------- counts
    @cached_property
    def components(self) -> dict[str, int]:
        """Parameters by component; MTP layers appear as one ``mtp`` entry. Sums to ``total``."""
        out = {c: 0 for c in COMPONENTS}
        for g in self.pre + self.post:
            out[g.component] += g.numel
        for layer in self.layers:
            if layer.mtp:
                out["mtp"] += layer.params
            else:
                for g in layer.groups:
                    out[g.component] += g.numel
        return {k: v for k, v in out.items() if v}

    @property
    def total(self) -> int:
        """Every language-model parameter in the checkpoint, MTP included."""
        return sum(self.components.values())

    @property
    def mtp(self) -> int:
        """Parameters of the MTP layers (checkpoint copies of embedding/head included)."""
        return sum(layer.params for layer in self.mtp_layers)

    @property
    def embedding(self) -> int:
        """Input embedding parameters (the lm_head is counted apart)."""
        return self.components.get("embedding", 0)

    @property
    def lm_head(self) -> int:
        """Output layer parameters (0 when tied)."""
        return self.components.get("lm_head", 0)

    @cached_property
    def ngram_tables(self) -> tuple[tuple[int, ParamGroup], ...]:
        """``(layer index, table)`` of each n-gram memory table (split kind ``rows``) of the main layers."""
        return tuple((layer.index, g) for layer in self.main_layers for g in layer.groups if g.parallel == "rows")

    @property
    def active(self) -> int:
        """Parameters touched per token by the main model (MTP excluded), embeddings included; n-gram tables
        excluded (a token reads a handful of their rows)."""
        unused = sum(g.numel for _, g in self.ngram_tables)
        for layer in self.main_layers:
            if layer.mlp in _EXPERT_MLPS and self.num_experts:
                routed = layer.by_component().get("routed_experts", 0)
                unused += routed * (self.num_experts - self.moe_router_topk) // self.num_experts
        return self.total - self.mtp - unused

    @property
    def training_params(self) -> int:
        """Parameters a training run holds: ``total`` minus checkpoint-only copies."""
        copies = sum(g.numel for layer in self.layers for g in layer.groups if g.checkpoint_only)
        return self.total - copies

    def split_components(self, kind: str) -> tuple[str, ...]:
        """Components with any tensor split by ``kind`` (``tp``: tp or vocab; ``expert``: EP x ETP)."""
        kinds = {"tp": ("tp", "vocab"), "expert": ("expert",)}[kind]
        seen: dict[str, None] = {}
        for g in self.all_groups():
            if g.parallel in kinds:
                seen[g.component] = None
        return tuple(c for c in COMPONENTS if c in seen)

    def all_groups(self):
        """Every tensor of the model (pre, layers, post), MTP layers included."""
        yield from self.pre
        for layer in self.layers:
            yield from layer.groups
        yield from self.post

    # ------------------------------------------------------------------ flops
    def flops_per_token(self, seq_len: int, *, training: bool = True, causal: bool = True) -> float:
        """Model FLOPs per token (the figure MFU divides by): see :mod:`mlite.models.flops`."""
        from .flops import flops_per_token

        return flops_per_token(self, seq_len, training=training, causal=causal)

    # ----------------------------------------------------------------- output
    def summary(self) -> dict:
        """The ``mlite params --json`` document."""
        return {
            "name": self.name,
            "model_type": self.model_type,
            "architecture": self.architecture,
            "source": self.source,
            "total": self.total,
            "active": self.active,
            "embedding": self.embedding,
            "lm_head": self.lm_head,
            "mtp": self.mtp,
            "vision": self.vision_params,
            "num_layers": self.num_layers,
            "num_mtp_layers": self.num_mtp_layers,
            "components": dict(self.components),
            "tp_split": list(self.split_components("tp")),
            "ep_split": list(self.split_components("expert")),
            "ngram_tables": [
                {"layer": i, "name": g.name, "rows": g.rows, "width": g.width, "numel": g.numel}
                for i, g in self.ngram_tables
            ],
            "layers": [{"index": layer.index, "kind": layer.kind, "params": layer.params} for layer in self.layers],
            "notes": list(self.notes),
        }
