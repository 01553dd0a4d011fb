"""Tensor inventories of the building blocks: attention variants, Gated DeltaNet, MLPs, MoE, norms.

Each builder appends :class:`~mlite.models.spec.ParamGroup` entries named as in the Hugging Face checkpoint,
with the Megatron tensor-parallel treatment of each tensor: column/row-parallel weights are ``tp``, the
bias of a row-parallel layer and every norm are ``rep`` (replicated), MLA/DSA down-projections are ``rep``
(Megatron keeps them duplicated), routers and expert biases are ``rep``, routed experts are ``expert``.
"""

from __future__ import annotations

from .spec import ParamGroup


class Inventory:
    """An ordered list of tensors being assembled for one layer (or the pre/post parts)."""

    def __init__(self, prefix: str = ""):
        self.prefix = prefix
        self.groups: list[ParamGroup] = []

    def add(
        self, name: str, numel: int, component: str, parallel: str, *, checkpoint_only: bool = False, rows: int = 0
    ) -> None:
        """One tensor (``rows``: the rows of an n-gram memory table, split kind ``rows``)."""
        self.groups.append(ParamGroup(self.prefix + name, int(numel), component, parallel, checkpoint_only, rows))

    def linear(
        self,
        name: str,
        fan_in: int,
        fan_out: int,
        component: str,
        parallel: str = "tp",
        *,
        bias: bool = False,
        row: bool = False,
    ) -> None:
        """``name.weight`` (and ``name.bias``); a row-parallel layer's bias is replicated."""
        self.add(f"{name}.weight", fan_in * fan_out, component, parallel)
        if bias:
            self.add(f"{name}.bias", fan_out, component, "rep" if (row or parallel == "rep") else parallel)

    def norm(self, name: str, dim: int, component: str = "norms", *, bias: bool = False) -> None:
        """An RMSNorm (or LayerNorm with ``bias``); always replicated."""
        self.add(f"{name}.weight", dim, component, "rep")
        if bias:
            self.add(f"{name}.bias", dim, component, "rep")

    def extend(self, other: Inventory) -> None:
        self.groups.extend(other.groups)


# ---------------------------------------------------------------------- attention
def gqa_attention(
    inv: Inventory,
    h: int,
    heads: int,
    kv_heads: int,
    head_dim: int,
    *,
    qkv_bias: bool = False,
    o_bias: bool = False,
    qk_norm: bool = False,
    output_gate: bool = False,
) -> None:
    """Grouped-query attention (Llama, Qwen2/3, Mixtral, GLM-4.5); ``output_gate`` doubles q (Qwen3-Next/3.5)."""
    a = "attention"
    inv.linear("self_attn.q_proj", h, heads * head_dim * (2 if output_gate else 1), a, bias=qkv_bias)
    inv.linear("self_attn.k_proj", h, kv_heads * head_dim, a, bias=qkv_bias)
    inv.linear("self_attn.v_proj", h, kv_heads * head_dim, a, bias=qkv_bias)
    inv.linear("self_attn.o_proj", heads * head_dim, h, a, bias=o_bias, row=True)
    if qk_norm:
        inv.norm("self_attn.q_norm", head_dim, a)
        inv.norm("self_attn.k_norm", head_dim, a)


def mla_attention(
    inv: Inventory,
    h: int,
    heads: int,
    q_lora_rank: int | None,
    kv_lora_rank: int,
    qk_nope: int,
    qk_rope: int,
    v_head_dim: int,
    *,
    bias: bool = False,
) -> None:
    """Multi-head latent attention (DeepSeek-V3, Kimi-K2, GLM-5)."""
    a = "attention"
    qk_head = qk_nope + qk_rope
    if q_lora_rank:
        inv.linear("self_attn.q_a_proj", h, q_lora_rank, a, "rep", bias=bias)
        inv.norm("self_attn.q_a_layernorm", q_lora_rank, a)
        inv.linear("self_attn.q_b_proj", q_lora_rank, heads * qk_head, a)
    else:
        inv.linear("self_attn.q_proj", h, heads * qk_head, a)
    inv.linear("self_attn.kv_a_proj_with_mqa", h, kv_lora_rank + qk_rope, a, "rep", bias=bias)
    inv.norm("self_attn.kv_a_layernorm", kv_lora_rank, a)
    inv.linear("self_attn.kv_b_proj", kv_lora_rank, heads * (qk_nope + v_head_dim), a)
    inv.linear("self_attn.o_proj", heads * v_head_dim, h, a, bias=bias, row=True)


def dsa_indexer(inv: Inventory, h: int, q_lora_rank: int, index_heads: int, index_head_dim: int) -> None:
    """GLM-5's DeepSeek-sparse-attention lightning indexer (duplicated across TP)."""
    a = "attention"
    inv.linear("self_attn.indexer.wq_b", q_lora_rank, index_heads * index_head_dim, a, "rep")
    inv.linear("self_attn.indexer.wk", h, index_head_dim, a, "rep")
    inv.norm("self_attn.indexer.k_norm", index_head_dim, a, bias=True)
    inv.linear("self_attn.indexer.weights_proj", h, index_heads, a, "rep")


def gated_deltanet(
    inv: Inventory,
    h: int,
    key_heads: int,
    value_heads: int,
    key_dim: int,
    value_dim: int,
    conv_kernel: int,
    *,
    fused_names: bool = True,
) -> None:
    """Gated DeltaNet linear attention (Qwen3-Next ``in_proj_qkvz/ba``; Qwen3.5 split projections)."""
    c = "linear_attention"
    kd, vd = key_heads * key_dim, value_heads * value_dim
    if fused_names:
        inv.linear("linear_attn.in_proj_qkvz", h, 2 * kd + 2 * vd, c)
        inv.linear("linear_attn.in_proj_ba", h, 2 * value_heads, c)
    else:
        inv.linear("linear_attn.in_proj_qkv", h, 2 * kd + vd, c)
        inv.linear("linear_attn.in_proj_z", h, vd, c)
        inv.linear("linear_attn.in_proj_b", h, value_heads, c)
        inv.linear("linear_attn.in_proj_a", h, value_heads, c)
    inv.add("linear_attn.conv1d.weight", (2 * kd + vd) * conv_kernel, c, "tp")
    inv.add("linear_attn.dt_bias", value_heads, c, "tp")
    inv.add("linear_attn.A_log", value_heads, c, "tp")
    inv.norm("linear_attn.norm", value_dim, c)
    inv.linear("linear_attn.out_proj", vd, h, c, row=True)


# ---------------------------------------------------------------------- MLPs
def swiglu_mlp(inv: Inventory, name: str, h: int, ffn: int, component: str, *, bias: bool = False) -> None:
    """gate/up (column-parallel) and down (row-parallel) projections."""
    inv.linear(f"{name}.gate_proj", h, ffn, component, bias=bias)
    inv.linear(f"{name}.up_proj", h, ffn, component, bias=bias)
    inv.linear(f"{name}.down_proj", ffn, h, component, bias=bias, row=True)


def moe_block(
    inv: Inventory,
    h: int,
    num_experts: int,
    expert_ffn: int,
    *,
    prefix: str = "mlp",
    shared_ffn: int = 0,
    shared_name: str = "shared_experts",
    shared_gate: bool = False,
    expert_bias: bool = False,
) -> None:
    """Router (+ expert bias), routed experts (SwiGLU), optional shared expert (+ its sigmoid gate)."""
    inv.linear(f"{prefix}.gate", h, num_experts, "router", "rep")
    if expert_bias:
        inv.add(f"{prefix}.gate.e_score_correction_bias", num_experts, "router", "rep")
    inv.add(f"{prefix}.experts.gate_up_proj", num_experts * 2 * expert_ffn * h, "routed_experts", "expert")
    inv.add(f"{prefix}.experts.down_proj", num_experts * expert_ffn * h, "routed_experts", "expert")
    if shared_ffn:
        swiglu_mlp(inv, f"{prefix}.{shared_name}", h, shared_ffn, "shared_experts")
        if shared_gate:
            inv.linear(f"{prefix}.shared_expert_gate", h, 1, "shared_experts", "rep")


def layer_norms(inv: Inventory, h: int) -> None:
    """The two residual-path norms of a decoder layer."""
    inv.norm("input_layernorm", h)
    inv.norm("post_attention_layernorm", h)
