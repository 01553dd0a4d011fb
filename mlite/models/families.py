"""Native parameter inventories for the model types users plan for.

One function per architecture turns a (text) config dict into layers, pre and post tensors and the
scalar fields of :class:`~mlite.models.spec.ModelSpec`. Defaults for absent fields are those of the
transformers configuration class of the same type.
"""

from __future__ import annotations

from collections.abc import Callable

from ..errors import ConfigError
from .blocks import (
    Inventory,
    dsa_indexer,
    gated_deltanet,
    gqa_attention,
    layer_norms,
    mla_attention,
    moe_block,
    swiglu_mlp,
)
from .config import Fields
from .spec import LayerSpec, ModelSpec, ParamGroup
from .vision import qwen3_vl_vision_params

ALIASES = {
    "kimi_k2": "deepseek_v3",  # Kimi-K2 ships remote code; it is the DeepSeek-V3 architecture
    "kimi_k25": "deepseek_v3",  # Kimi K2.5/K2.6: text model is DeepSeek-V3 (vision tower apart)
    "qwen3_5_moe_text": "qwen3_5_moe",
    "qwen3_vl": "qwen3",  # Qwen3-VL: the text model (text_config) is Qwen3; the vision tower is counted apart
    "qwen3_vl_text": "qwen3",
    "qwen3_vl_moe": "qwen3_moe",
    "qwen3_vl_moe_text": "qwen3_moe",
    "qwen2_5_vl": "qwen2",  # Qwen2.5-VL: a Qwen2 text model (top level or text_config) + vision tower
    "qwen2_5_vl_text": "qwen2",
    "deepseek_v41_text": "deepseek_v41",
}


def _layer(index, attention, mlp, inv: Inventory, mtp=False) -> LayerSpec:
    return LayerSpec(index=index, attention=attention, mlp=mlp, mtp=mtp, groups=tuple(inv.groups))


def _pre_post(f: Fields, h: int, vocab: int, tie: bool, extra_post: Callable[[Inventory], None] | None = None):
    pre = Inventory("model.")
    pre.add("embed_tokens.weight", vocab * h, "embedding", "vocab")
    post = Inventory()
    post.norm("model.norm", h)
    if extra_post:
        extra_post(post)
    if not tie:
        post.add("lm_head.weight", vocab * h, "lm_head", "vocab")
    return tuple(pre.groups), tuple(post.groups)


def _common(f: Fields) -> dict:
    h = f.int("hidden_size")
    heads = f.int("num_attention_heads")
    return dict(
        hidden_size=h,
        vocab_size=f.int("vocab_size"),
        num_layers=f.int("num_hidden_layers"),
        num_attention_heads=heads,
        num_key_value_heads=f.int("num_key_value_heads", heads),
        max_position_embeddings=f.int("max_position_embeddings", 0, min_value=0),
    )


def _head_dim(f: Fields, c: dict) -> int:
    hd = f.cfg.get("head_dim")
    if hd is None:
        if c["hidden_size"] % c["num_attention_heads"]:
            raise ConfigError(
                f"{f.where}: field 'head_dim' is missing and hidden_size {c['hidden_size']} is not divisible by "
                f"num_attention_heads {c['num_attention_heads']}; add head_dim"
            )
        return c["hidden_size"] // c["num_attention_heads"]
    return f.int("head_dim")


def _mtp_deepseek_style(f: Fields, c: dict, index: int, block: Callable[[Inventory], tuple[str, str]]) -> LayerSpec:
    """DeepSeek-V3 / GLM MTP layer: its own embed_tokens and shared_head copies, enorm/hnorm, eh_proj, a block."""
    h, v = c["hidden_size"], c["vocab_size"]
    inv = Inventory()
    inv.add("embed_tokens.weight", v * h, "embedding", "vocab", checkpoint_only=True)
    inv.norm("enorm", h)
    inv.norm("hnorm", h)
    inv.linear("eh_proj", 2 * h, h, "other")
    attention, mlp = block(inv)
    inv.norm("shared_head.norm", h)
    inv.add("shared_head.head.weight", v * h, "lm_head", "vocab", checkpoint_only=True)
    return _layer(index, attention, mlp, inv, mtp=True)


# ---------------------------------------------------------------------- dense
def dense_family(model_type: str) -> Callable[[Fields], dict]:
    def build(f: Fields) -> dict:
        c = _common(f)
        h, hd = c["hidden_size"], _head_dim(f, c)
        ffn = f.int("intermediate_size")
        if model_type == "qwen2":
            qkv_bias, o_bias, qk_norm, mlp_bias = True, False, False, False
        elif model_type == "qwen3":
            qkv_bias = o_bias = f.bool("attention_bias", False)
            qk_norm, mlp_bias = True, False
        else:  # llama
            qkv_bias = o_bias = f.bool("attention_bias", False)
            qk_norm, mlp_bias = False, f.bool("mlp_bias", False)
        layers = []
        for i in range(c["num_layers"]):
            inv = Inventory()
            gqa_attention(
                inv,
                h,
                c["num_attention_heads"],
                c["num_key_value_heads"],
                hd,
                qkv_bias=qkv_bias,
                o_bias=o_bias,
                qk_norm=qk_norm,
            )
            swiglu_mlp(inv, "mlp", h, ffn, "dense_mlp", bias=mlp_bias)
            layer_norms(inv, h)
            layers.append(_layer(i, "full", "dense", inv))
        tie = f.bool("tie_word_embeddings", False)
        pre, post = _pre_post(f, h, c["vocab_size"], tie)
        return dict(
            c,
            head_dim=hd,
            v_head_dim=hd,
            ffn_hidden_size=ffn,
            tie_word_embeddings=tie,
            layers=layers,
            pre=pre,
            post=post,
        )

    return build


# ---------------------------------------------------------------------- Qwen3-MoE / Mixtral
def _qwen_is_moe(f: Fields, i: int, num_experts: int) -> bool:
    only = f.list("mlp_only_layers", [])
    step = f.int("decoder_sparse_step", 1)
    return i not in only and num_experts > 0 and (i + 1) % step == 0


def qwen3_moe(f: Fields) -> dict:
    c = _common(f)
    h, hd = c["hidden_size"], _head_dim(f, c)
    E, k = f.int("num_experts"), f.int("num_experts_per_tok")
    moe_ffn, ffn = f.int("moe_intermediate_size"), f.int("intermediate_size", 0, min_value=0)
    bias = f.bool("attention_bias", False)
    layers = []
    for i in range(c["num_layers"]):
        inv = Inventory()
        gqa_attention(
            inv, h, c["num_attention_heads"], c["num_key_value_heads"], hd, qkv_bias=bias, o_bias=bias, qk_norm=True
        )
        if _qwen_is_moe(f, i, E):
            moe_block(inv, h, E, moe_ffn)
            mlp = "moe"
        else:
            swiglu_mlp(inv, "mlp", h, f.int("intermediate_size"), "dense_mlp")
            mlp = "dense"
        layer_norms(inv, h)
        layers.append(_layer(i, "full", mlp, inv))
    tie = f.bool("tie_word_embeddings", False)
    pre, post = _pre_post(f, h, c["vocab_size"], tie)
    return dict(
        c,
        head_dim=hd,
        v_head_dim=hd,
        ffn_hidden_size=ffn if any(layer.mlp == "dense" for layer in layers) else 0,
        moe_ffn_hidden_size=moe_ffn,
        num_experts=E,
        moe_router_topk=k,
        tie_word_embeddings=tie,
        layers=layers,
        pre=pre,
        post=post,
    )


def mixtral(f: Fields) -> dict:
    c = _common(f)
    h, hd = c["hidden_size"], _head_dim(f, c)
    E, k, ffn = f.int("num_local_experts", 8), f.int("num_experts_per_tok", 2), f.int("intermediate_size")
    layers = []
    for i in range(c["num_layers"]):
        inv = Inventory()
        gqa_attention(inv, h, c["num_attention_heads"], c["num_key_value_heads"], hd)
        moe_block(inv, h, E, ffn)
        layer_norms(inv, h)
        layers.append(_layer(i, "full", "moe", inv))
    tie = f.bool("tie_word_embeddings", False)
    pre, post = _pre_post(f, h, c["vocab_size"], tie)
    return dict(
        c,
        head_dim=hd,
        v_head_dim=hd,
        ffn_hidden_size=0,
        moe_ffn_hidden_size=ffn,
        num_experts=E,
        moe_router_topk=k,
        tie_word_embeddings=tie,
        layers=layers,
        pre=pre,
        post=post,
    )


# ---------------------------------------------------------------------- hybrid Gated DeltaNet
def _hybrid(f: Fields, fused_names: bool, default_mtp: int, mtp_key: str | None) -> dict:
    c = _common(f)
    h, hd = c["hidden_size"], _head_dim(f, c)
    L = c["num_layers"]
    if f.has("layer_types"):
        types = f.list("layer_types", length=L, allowed={"linear_attention", "full_attention"})[:L]
    else:
        every = f.int("full_attention_interval", 4)
        types = ["full_attention" if (i + 1) % every == 0 else "linear_attention" for i in range(L)]
    E, k = f.int("num_experts"), f.int("num_experts_per_tok")
    moe_ffn = f.int("moe_intermediate_size")
    shared = f.int("shared_expert_intermediate_size", 0, min_value=0)
    gdn = dict(
        key_heads=f.int("linear_num_key_heads"),
        value_heads=f.int("linear_num_value_heads"),
        key_dim=f.int("linear_key_head_dim"),
        value_dim=f.int("linear_value_head_dim"),
        conv_kernel=f.int("linear_conv_kernel_dim", 4),
    )
    bias = f.bool("attention_bias", False)

    def full_attention(inv):
        gqa_attention(
            inv,
            h,
            c["num_attention_heads"],
            c["num_key_value_heads"],
            hd,
            qkv_bias=bias,
            o_bias=bias,
            qk_norm=True,
            output_gate=True,
        )

    def mlp(inv, i) -> str:
        if _qwen_is_moe(f, i, E):
            moe_block(inv, h, E, moe_ffn, shared_ffn=shared, shared_name="shared_expert", shared_gate=bool(shared))
            return "moe"
        swiglu_mlp(inv, "mlp", h, f.int("intermediate_size"), "dense_mlp")
        return "dense"

    layers = []
    for i, t in enumerate(types):
        inv = Inventory()
        if t == "full_attention":
            full_attention(inv)
        else:
            gated_deltanet(inv, h, fused_names=fused_names, **gdn)
        kind = mlp(inv, i)
        layer_norms(inv, h)
        layers.append(_layer(i, "gated_full" if t == "full_attention" else "gdn", kind, inv))
    n_mtp = f.int(mtp_key, default_mtp, min_value=0) if mtp_key else default_mtp
    for j in range(n_mtp):
        inv = Inventory()
        inv.linear("mtp.fc", 2 * h, h, "other")
        inv.norm("mtp.pre_fc_norm_embedding", h)
        inv.norm("mtp.pre_fc_norm_hidden", h)
        sub = Inventory(f"mtp.layers.{j}.")
        full_attention(sub)
        moe_block(sub, h, E, moe_ffn, shared_ffn=shared, shared_name="shared_expert", shared_gate=bool(shared))
        layer_norms(sub, h)
        inv.extend(sub)
        inv.norm("mtp.norm", h)
        layers.append(_layer(L + j, "gated_full", "moe", inv, mtp=True))
    tie = f.bool("tie_word_embeddings", False)
    pre, post = _pre_post(f, h, c["vocab_size"], tie)
    dense_ffn = f.int("intermediate_size", 0, min_value=0) if any(layer.mlp == "dense" for layer in layers) else 0
    return dict(
        c,
        head_dim=hd,
        v_head_dim=hd,
        ffn_hidden_size=dense_ffn,
        moe_ffn_hidden_size=moe_ffn,
        num_experts=E,
        moe_router_topk=k,
        shared_expert_ffn_hidden_size=shared,
        tie_word_embeddings=tie,
        linear_num_key_heads=gdn["key_heads"],
        linear_num_value_heads=gdn["value_heads"],
        linear_key_head_dim=gdn["key_dim"],
        linear_value_head_dim=gdn["value_dim"],
        linear_conv_kernel_dim=gdn["conv_kernel"],
        layers=layers,
        pre=pre,
        post=post,
    )


def qwen3_next(f: Fields) -> dict:
    # Qwen3-Next checkpoints carry one MTP layer (mtp.*) although config.json has no field for it.
    out = _hybrid(f, fused_names=True, default_mtp=f.int("num_nextn_predict_layers", 1, min_value=0), mtp_key=None)
    out["notes"] = [
        "Qwen3-Next: one MTP layer assumed (the released checkpoints carry mtp.*; config.json has no field)"
    ]
    return out


def qwen3_5_moe(f: Fields) -> dict:
    return _hybrid(f, fused_names=False, default_mtp=0, mtp_key="mtp_num_hidden_layers")


# ---------------------------------------------------------------------- DeepSeek-V3 / Kimi / GLM
def _ds_moe(f: Fields, h: int, inv: Inventory, *, expert_bias: bool) -> None:
    n_shared = f.int("n_shared_experts", 0, min_value=0)
    moe_ffn = f.int("moe_intermediate_size")
    moe_block(inv, h, f.int("n_routed_experts"), moe_ffn, shared_ffn=n_shared * moe_ffn, expert_bias=expert_bias)


def _mla_common(f: Fields, c: dict) -> dict:
    return dict(
        q_lora_rank=f.int("q_lora_rank", None),
        kv_lora_rank=f.int("kv_lora_rank"),
        qk_nope=f.int("qk_nope_head_dim"),
        qk_rope=f.int("qk_rope_head_dim"),
        v_head_dim=f.int("v_head_dim"),
    )


def _mla_family(f: Fields, *, dsa: bool, moe_rule: Callable[[int], bool]) -> dict:
    c = _common(f)
    h = c["hidden_size"]
    m = _mla_common(f, c)
    bias = f.bool("attention_bias", False)
    ffn = f.int("intermediate_size")
    E = f.int("n_routed_experts", 0, min_value=0)
    expert_bias = f.cfg.get("topk_method", "noaux_tc") == "noaux_tc"

    def attention(inv):
        mla_attention(
            inv,
            h,
            c["num_attention_heads"],
            m["q_lora_rank"],
            m["kv_lora_rank"],
            m["qk_nope"],
            m["qk_rope"],
            m["v_head_dim"],
            bias=bias,
        )
        if dsa:
            dsa_indexer(inv, h, m["q_lora_rank"] or h, f.int("index_n_heads"), f.int("index_head_dim"))
        return "dsa" if dsa else "mla"

    layers = []
    for i in range(c["num_layers"]):
        inv = Inventory()
        att = attention(inv)
        if E and moe_rule(i):
            _ds_moe(f, h, inv, expert_bias=expert_bias)
            kind = "moe"
        else:
            swiglu_mlp(inv, "mlp", h, ffn, "dense_mlp")
            kind = "dense"
        layer_norms(inv, h)
        layers.append(_layer(i, att, kind, inv))

    def mtp_block(inv):
        att = attention(inv)
        _ds_moe(f, h, inv, expert_bias=expert_bias)
        layer_norms(inv, h)
        return att, "moe"

    for j in range(f.int("num_nextn_predict_layers", 0, min_value=0)):
        layers.append(_mtp_deepseek_style(f, c, c["num_layers"] + j, mtp_block))
    tie = f.bool("tie_word_embeddings", False)
    pre, post = _pre_post(f, h, c["vocab_size"], tie)
    n_shared = f.int("n_shared_experts", 0, min_value=0)
    moe_ffn = f.int("moe_intermediate_size", 0, min_value=0)
    return dict(
        c,
        num_key_value_heads=c["num_attention_heads"],
        head_dim=m["qk_nope"] + m["qk_rope"],
        v_head_dim=m["v_head_dim"],
        ffn_hidden_size=ffn if any(layer.mlp == "dense" for layer in layers) else 0,
        moe_ffn_hidden_size=moe_ffn,
        num_experts=E,
        moe_router_topk=f.int("num_experts_per_tok", 0, min_value=0),
        shared_expert_ffn_hidden_size=n_shared * moe_ffn,
        tie_word_embeddings=tie,
        q_lora_rank=m["q_lora_rank"],
        kv_lora_rank=m["kv_lora_rank"],
        qk_pos_emb_head_dim=m["qk_rope"],
        layers=layers,
        pre=pre,
        post=post,
    )


def deepseek_v3(f: Fields) -> dict:
    first = f.int("first_k_dense_replace", 3, min_value=0)
    freq = f.int("moe_layer_freq", 1)
    return _mla_family(f, dsa=False, moe_rule=lambda i: i >= first and i % freq == 0)


def glm_moe_dsa(f: Fields) -> dict:
    L = f.int("num_hidden_layers")
    if f.has("mlp_layer_types"):
        types = f.list("mlp_layer_types", length=L, allowed={"dense", "sparse"})
        rule = lambda i: types[i] == "sparse"
    else:
        first = f.int("first_k_dense_replace", 3, min_value=0)
        rule = lambda i: i >= first
    return _mla_family(f, dsa=True, moe_rule=rule)


def glm4_moe(f: Fields) -> dict:
    c = _common(f)
    h, hd = c["hidden_size"], _head_dim(f, c)
    first = f.int("first_k_dense_replace", 1, min_value=0)
    bias, qk_norm = f.bool("attention_bias", False), f.bool("use_qk_norm", False)
    ffn = f.int("intermediate_size")

    def attention(inv):
        gqa_attention(inv, h, c["num_attention_heads"], c["num_key_value_heads"], hd, qkv_bias=bias, qk_norm=qk_norm)

    layers = []
    for i in range(c["num_layers"]):
        inv = Inventory()
        attention(inv)
        if i >= first:
            _ds_moe(f, h, inv, expert_bias=True)
            kind = "moe"
        else:
            swiglu_mlp(inv, "mlp", h, ffn, "dense_mlp")
            kind = "dense"
        layer_norms(inv, h)
        layers.append(_layer(i, "full", kind, inv))

    def mtp_block(inv):
        attention(inv)
        _ds_moe(f, h, inv, expert_bias=True)
        layer_norms(inv, h)
        return "full", "moe"

    for j in range(f.int("num_nextn_predict_layers", 0, min_value=0)):
        layers.append(_mtp_deepseek_style(f, c, c["num_layers"] + j, mtp_block))
    tie = f.bool("tie_word_embeddings", False)
    pre, post = _pre_post(f, h, c["vocab_size"], tie)
    n_shared, moe_ffn = f.int("n_shared_experts", 0, min_value=0), f.int("moe_intermediate_size")
    return dict(
        c,
        head_dim=hd,
        v_head_dim=hd,
        ffn_hidden_size=ffn,
        moe_ffn_hidden_size=moe_ffn,
        num_experts=f.int("n_routed_experts"),
        moe_router_topk=f.int("num_experts_per_tok"),
        shared_expert_ffn_hidden_size=n_shared * moe_ffn,
        tie_word_embeddings=tie,
        layers=layers,
        pre=pre,
        post=post,
    )


# ---------------------------------------------------------------------- DeepSeek-V4
_V4_ATTENTION = {
    "sliding_attention": "swa",
    "compressed_sparse_attention": "csa",
    "heavily_compressed_attention": "hca",
}


def deepseek_v4(f: Fields) -> dict:
    c = _common(f)
    h, L = c["hidden_size"], c["num_layers"]
    heads, hd = c["num_attention_heads"], f.int("head_dim", 512)
    q_lora, o_groups, o_lora = f.int("q_lora_rank"), f.int("o_groups"), f.int("o_lora_rank")
    ihd, iheads = f.int("index_head_dim", 128), f.int("index_n_heads", 64)
    hc = f.int("hc_mult", 4)
    rates = {"compressed_sparse_attention": 4, "heavily_compressed_attention": 128}
    rates.update(f.cfg.get("compress_rates") or {})
    if f.has("compress_rate_csa"):
        rates["compressed_sparse_attention"] = f.int("compress_rate_csa")
    if f.has("compress_rate_hca"):
        rates["heavily_compressed_attention"] = f.int("compress_rate_hca")
    if f.has("layer_types"):
        types = f.list("layer_types", length=L, allowed=set(_V4_ATTENTION))[:L]
    elif f.has("compress_ratios"):
        by_ratio = {
            0: "sliding_attention",
            rates["compressed_sparse_attention"]: "compressed_sparse_attention",
            rates["heavily_compressed_attention"]: "heavily_compressed_attention",
        }
        ratios = f.list("compress_ratios", length=L, allowed=set(by_ratio))
        types = [by_ratio[r] for r in ratios[:L]]
    else:
        types = ["heavily_compressed_attention"] * min(L, 2) + [
            "compressed_sparse_attention" if i % 2 else "heavily_compressed_attention" for i in range(max(L - 2, 0))
        ]
    if f.has("mlp_layer_types"):
        mlp_types = f.list("mlp_layer_types", length=L, allowed={"hash_moe", "moe"})[:L]
    else:
        n_hash = f.int("num_hash_layers", 3, min_value=0)
        mlp_types = ["hash_moe"] * min(L, n_hash) + ["moe"] * max(0, L - n_hash)
    E, moe_ffn = f.int("n_routed_experts"), f.int("moe_intermediate_size")
    n_shared = f.int("n_shared_experts", 1, min_value=0)
    mix = (2 + hc) * hc
    a = "attention"

    def block(inv, att_type, mlp_type):
        inv.linear("self_attn.q_a_proj", h, q_lora, a, "rep")
        inv.norm("self_attn.q_a_norm", q_lora, a)
        inv.linear("self_attn.q_b_proj", q_lora, heads * hd, a)
        inv.linear("self_attn.kv_proj", h, hd, a, "rep")
        inv.norm("self_attn.kv_norm", hd, a)
        inv.add("self_attn.o_a_proj.weight", (heads * hd // o_groups) * o_groups * o_lora, a, "tp")
        inv.linear("self_attn.o_b_proj", o_groups * o_lora, h, a, row=True)
        inv.add("self_attn.sinks", heads, a, "tp")
        if att_type == "heavily_compressed_attention":
            r = rates[att_type]
            inv.linear("self_attn.compressor.kv_proj", h, hd, a, "rep")
            inv.linear("self_attn.compressor.gate_proj", h, hd, a, "rep")
            inv.add("self_attn.compressor.position_bias", r * hd, a, "rep")
            inv.norm("self_attn.compressor.kv_norm", hd, a)
        elif att_type == "compressed_sparse_attention":
            r = rates[att_type]
            inv.linear("self_attn.compressor.kv_proj", h, 2 * hd, a, "rep")
            inv.linear("self_attn.compressor.gate_proj", h, 2 * hd, a, "rep")
            inv.add("self_attn.compressor.position_bias", r * 2 * hd, a, "rep")
            inv.norm("self_attn.compressor.kv_norm", hd, a)
            p = "self_attn.compressor.indexer."
            inv.linear(p + "kv_proj", h, 2 * ihd, a, "rep")
            inv.linear(p + "gate_proj", h, 2 * ihd, a, "rep")
            inv.add(p + "position_bias", r * 2 * ihd, a, "rep")
            inv.norm(p + "kv_norm", ihd, a)
            inv.linear(p + "q_b_proj", q_lora, iheads * ihd, a, "rep")
            inv.linear(p + "scorer.weights_proj", h, iheads, a, "rep")
        moe_block(inv, h, E, moe_ffn, shared_ffn=n_shared * moe_ffn, expert_bias=(mlp_type == "moe"))
        layer_norms(inv, h)
        for name in ("attn_hc", "ffn_hc"):
            inv.add(f"{name}.fn", mix * hc * h, "hyper_connections", "rep")
            inv.add(f"{name}.base", mix, "hyper_connections", "rep")
            inv.add(f"{name}.scale", 3, "hyper_connections", "rep")

    def hc_head(inv, prefix="model.hc_head."):
        inv.add(prefix + "hc_fn", hc * hc * h, "hyper_connections", "rep")
        inv.add(prefix + "hc_base", hc, "hyper_connections", "rep")
        inv.add(prefix + "hc_scale", 1, "hyper_connections", "rep")

    layers = []
    for i in range(L):
        inv = Inventory()
        block(inv, types[i], mlp_types[i])
        layers.append(_layer(i, _V4_ATTENTION[types[i]], mlp_types[i], inv))
    notes = ["DeepSeek-V4: the hash-routing table tid2eid (integer token->expert ids) is not a parameter"]
    n_mtp = f.int("num_nextn_predict_layers", 0, min_value=0)
    for j in range(n_mtp):
        inv = Inventory(f"mtp.{j}.")
        inv.norm("enorm", h)
        inv.norm("hnorm", h)
        inv.linear("e_proj", h, h, "other")
        inv.linear("h_proj", h, h, "other")
        block(inv, types[-1], "moe")
        inv.norm("norm", h)
        hc_head(inv, "hc_head.")
        layers.append(_layer(L + j, _V4_ATTENTION[types[-1]], "moe", inv, mtp=True))
    if n_mtp:
        notes.append(
            "DeepSeek-V4: MTP layer structure is not published in transformers; counted as e_proj + h_proj "
            "+ enorm/hnorm + one block of the last layer's kind + norm + hc head (an estimate)"
        )
    tie = f.bool("tie_word_embeddings", False)
    pre, post = _pre_post(f, h, c["vocab_size"], tie, extra_post=hc_head)
    return dict(
        c,
        num_key_value_heads=1,
        head_dim=hd,
        v_head_dim=hd,
        ffn_hidden_size=0,
        moe_ffn_hidden_size=moe_ffn,
        num_experts=E,
        moe_router_topk=f.int("num_experts_per_tok"),
        shared_expert_ffn_hidden_size=n_shared * moe_ffn,
        tie_word_embeddings=tie,
        q_lora_rank=q_lora,
        hc_mult=hc,
        layers=layers,
        pre=pre,
        post=post,
        notes=notes,
    )


# ---------------------------------------------------------------------- DeepSeek-V4.1 (Engram n-gram memory)
def deepseek_v41(f: Fields) -> dict:
    """DeepSeek-V4.1-Flash (HF ``model_type`` ``deepseek_v41``, as ``model/registry.py`` @ 1fcfc5a9 of the
    ISEEKYAN/Megatron-LM fork registers it; text part under ``text_config``).

    Names follow the release key set (``experimental/lite/docs/contracts/deepseek_v41/weights.json`` @ 700ca39f):
    per layer ``attn.{wq_a,q_norm,wq_b,wkv,kv_norm,wo_a,wo_b,attn_sink}``, a compressor on the KV source layers
    (``kv_source_layer_ids``; its ``wgate`` on all but the last of them), an indexer (``wk``/``k_norm`` on the KV
    source layers, ``wq_b``/``weights_proj`` on ``index_source_layer_ids``), a MoE (gate + bias, routed and shared
    SwiGLU experts), ``hc_{attn,ffn}_{fn,base,scale}``, and on ``engram_layer_ids`` an Engram module: the n-gram table
    ``engram.embed.weight`` [rows, engram_head_dim] (split kind ``rows``), ``q_weight``/``k_weight`` [hc_mult, h] and
    ``wkv`` [(max_ngram_size - 1) x engram_n_heads x engram_head_dim -> (hc_mult + 1) x h]
    (``model/deepseek_v41/lite/engram.py`` @ 0ce9c218). The Engram table rows are exact; the release index carries no
    shapes, so the other tensors' shapes follow the DeepSeek-V4 layout and the config (an estimate). The three
    DSpark (``mtp.N``) blocks are archival: excluded from optimizer groups and gradients (contract README @ e7d37ebf),
    so not counted; nor is the vision tower (32 blocks) or its aligner."""
    c = _common(f)
    h, L = c["hidden_size"], c["num_layers"]
    heads, hd = c["num_attention_heads"], f.int("head_dim")
    q_lora, o_groups, o_lora = f.int("q_lora_rank"), f.int("o_groups"), f.int("o_lora_rank")
    ihd, iheads = f.int("index_head_dim"), f.int("index_n_heads")
    hc = f.int("hc_mult", 4)
    kv_src = f.list("kv_source_layer_ids", [])
    idx_src = f.list("index_source_layer_ids", [])
    engram_layers = f.list("engram_layer_ids", [])
    engram_rows = f.list("engram_num_embeddings", [])
    if len(engram_rows) != len(engram_layers):
        raise ConfigError(
            f"{f.where}: field 'engram_num_embeddings' has {len(engram_rows)} entries but engram_layer_ids has "
            f"{len(engram_layers)}; give one row count per Engram layer"
        )
    e_dim, e_heads, e_order = f.int("engram_head_dim"), f.int("engram_n_heads"), f.int("engram_max_ngram_size")
    if e_dim % 32:
        raise ConfigError(f"{f.where}: field 'engram_head_dim' {e_dim} must be divisible by 32 (E8M0 block scales)")
    E, moe_ffn = f.int("n_routed_experts"), f.int("moe_intermediate_size")
    n_shared = f.int("n_shared_experts", 1, min_value=0)
    mix = (2 + hc) * hc
    a = "attention"
    layers = []
    for i in range(L):
        inv = Inventory(f"layers.{i}.")
        inv.linear("attn.wq_a", h, q_lora, a, "rep")
        inv.norm("attn.q_norm", q_lora, a)
        inv.linear("attn.wq_b", q_lora, heads * hd, a)
        inv.linear("attn.wkv", h, hd, a, "rep")
        inv.norm("attn.kv_norm", hd, a)
        inv.add("attn.wo_a.weight", (heads * hd // o_groups) * o_groups * o_lora, a, "tp")
        inv.linear("attn.wo_b", o_groups * o_lora, h, a, row=True)
        inv.add("attn.attn_sink", heads, a, "tp")
        if i in kv_src:
            inv.linear("attn.compressor.wkv", h, hd, a, "rep")
            if i != kv_src[-1]:
                inv.linear("attn.compressor.wgate", h, hd, a, "rep")
            inv.norm("attn.compressor.norm", hd, a)
            inv.linear("attn.indexer.wk", h, ihd, a, "rep")
            inv.norm("attn.indexer.k_norm", ihd, a)
        if i in idx_src:
            inv.linear("attn.indexer.wq_b", q_lora, iheads * ihd, a, "rep")
            inv.linear("attn.indexer.weights_proj", h, iheads, a, "rep")
        if i in engram_layers:
            rows = engram_rows[engram_layers.index(i)]
            inv.add("engram.embed.weight", rows * e_dim, "ngram_tables", "rows", rows=rows)
            inv.add("engram.q_weight", hc * h, "other", "rep")
            inv.add("engram.k_weight", hc * h, "other", "rep")
            inv.linear("engram.wkv", (e_order - 1) * e_heads * e_dim, (hc + 1) * h, "other", "rep")
        moe_block(inv, h, E, moe_ffn, prefix="ffn", shared_ffn=n_shared * moe_ffn, expert_bias=True)
        inv.norm("attn_norm", h)
        inv.norm("ffn_norm", h)
        for name in ("hc_attn", "hc_ffn"):
            inv.add(f"{name}_fn", mix * hc * h, "hyper_connections", "rep")
            inv.add(f"{name}_base", mix, "hyper_connections", "rep")
            inv.add(f"{name}_scale", 3, "hyper_connections", "rep")
        attention = "csa" if i in kv_src else "swa"
        layers.append(_layer(i, attention, "moe", inv))
    v = c["vocab_size"]
    pre = Inventory()
    pre.add("embed.weight", v * h, "embedding", "vocab")
    post = Inventory()
    post.norm("norm", h)
    post.add("hc_head_fn", hc * hc * h, "hyper_connections", "rep")
    post.add("hc_head_base", hc, "hyper_connections", "rep")
    post.add("hc_head_scale", 1, "hyper_connections", "rep")
    post.add("head.weight", v * h, "lm_head", "vocab")
    notes = [
        "DeepSeek-V4.1: Engram n-gram tables on layers "
        + ", ".join(str(i) for i in engram_layers)
        + f" ({' + '.join(f'{r:,}' for r in engram_rows)} rows x {e_dim}) are exact; other tensor shapes follow "
        "the DeepSeek-V4 layout (the release index has no shapes: an estimate)",
        f"DeepSeek-V4.1: the {f.int('num_nextn_predict_layers', 0, min_value=0)} archival DSpark (mtp) blocks and "
        "the vision tower are not counted (excluded from optimizer groups and gradients)",
    ]
    return dict(
        c,
        num_key_value_heads=1,
        head_dim=hd,
        v_head_dim=hd,
        ffn_hidden_size=0,
        moe_ffn_hidden_size=moe_ffn,
        num_experts=E,
        moe_router_topk=f.int("num_experts_per_tok"),
        shared_expert_ffn_hidden_size=n_shared * moe_ffn,
        tie_word_embeddings=False,
        q_lora_rank=q_lora,
        hc_mult=hc,
        layers=layers,
        pre=tuple(pre.groups),
        post=tuple(post.groups),
        notes=notes,
    )


# ---------------------------------------------------------------------- MiMo (Qwen2 layout + MTP)
def mimo(f: Fields) -> dict:
    """XiaomiMiMo/MiMo-7B: the Qwen2 layout (q/k/v bias) and ``num_nextn_predict_layers`` MTP layers
    (``model.mtp_layers.N``: token/hidden norms, input_proj 2h -> h, one Qwen2 decoder layer, final norm; they share
    the main model's embedding and lm_head, so no copies)."""
    out = dense_family("qwen2")(f)
    h, hd, L = out["hidden_size"], out["head_dim"], out["num_layers"]
    for j in range(f.int("num_nextn_predict_layers", 1, min_value=0)):
        inv = Inventory(f"mtp_layers.{j}.")
        inv.norm("token_layernorm", h)
        inv.norm("hidden_layernorm", h)
        inv.linear("input_proj", 2 * h, h, "other")
        gqa_attention(inv, h, out["num_attention_heads"], out["num_key_value_heads"], hd, qkv_bias=True, o_bias=False)
        swiglu_mlp(inv, "mlp", h, out["ffn_hidden_size"], "dense_mlp")
        layer_norms(inv, h)
        inv.norm("final_layernorm", h)
        out["layers"].append(_layer(L + j, "full", "dense", inv, mtp=True))
    out["notes"] = ["MiMo: read natively as Qwen2 + MTP layers (the checkpoint ships remote code, type 'mimo')"]
    return out


# ---------------------------------------------------------------------- Nemotron-H (Mamba2 + attention + MoE)
def _nemotron_pattern(f: Fields, L: int) -> str:
    pattern = f.cfg.get("hybrid_override_pattern")
    if not isinstance(pattern, str) or len(pattern) != L or set(pattern) - set("M*E-"):
        raise ConfigError(
            f"{f.where}: field 'hybrid_override_pattern' must be a string of {L} characters from 'M' (Mamba2), "
            f"'*' (attention), 'E' (MoE), '-' (MLP), found {pattern!r} (model_type '{f.model_type}')"
        )
    return pattern


def nemotron_h(f: Fields) -> dict:
    """NVIDIA Nemotron-H / Nemotron-3 (``hybrid_override_pattern``): each layer is one norm + one mixer, a Mamba2
    SSM (M), GQA attention without rotary bias terms (*), a squared-ReLU MoE with shared expert and expert bias (E)
    or a squared-ReLU MLP (-)."""
    c = _common(f)
    h, L = c["hidden_size"], c["num_layers"]
    hd = f.int("head_dim", h // c["num_attention_heads"])
    pattern = _nemotron_pattern(f, L)
    nh, mhd = f.int("mamba_num_heads"), f.int("mamba_head_dim")
    ng, state, kernel = f.int("n_groups", 1), f.int("ssm_state_size"), f.int("conv_kernel", 4)
    d_in = nh * mhd
    conv_dim = d_in + 2 * ng * state
    proj_bias, conv_bias = f.bool("mamba_proj_bias", False), f.bool("use_conv_bias", True)
    att_bias, mlp_bias = f.bool("attention_bias", False), f.bool("mlp_bias", False)
    E = f.int("n_routed_experts", 0, min_value=0)
    moe_ffn = f.int("moe_intermediate_size", 0, min_value=0)
    shared = f.int("moe_shared_expert_intermediate_size", 0, min_value=0) * f.int("n_shared_experts", 1, min_value=0)
    ffn = f.int("intermediate_size", 0, min_value=0)
    la = "linear_attention"
    layers = []
    for i, ch in enumerate(pattern):
        inv = Inventory()
        inv.norm("norm", h)
        if ch == "M":
            inv.linear("mixer.in_proj", h, 2 * d_in + 2 * ng * state + nh, la, bias=proj_bias)
            inv.add("mixer.conv1d.weight", conv_dim * kernel, la, "tp")
            if conv_bias:
                inv.add("mixer.conv1d.bias", conv_dim, la, "tp")
            inv.add("mixer.dt_bias", nh, la, "tp")
            inv.add("mixer.A_log", nh, la, "tp")
            inv.add("mixer.D", nh, la, "tp")
            inv.add("mixer.norm.weight", d_in, la, "tp")  # grouped gated RMSNorm over d_inner: split with the heads
            inv.linear("mixer.out_proj", d_in, h, la, bias=proj_bias, row=True)
            attention, mlp = "mamba2", "none"
        elif ch == "*":
            att = Inventory()
            gqa_attention(
                att, h, c["num_attention_heads"], c["num_key_value_heads"], hd, qkv_bias=att_bias, o_bias=att_bias
            )
            for g in att.groups:  # the checkpoint names the attention module 'mixer'
                inv.add(g.name.replace("self_attn.", "mixer."), g.numel, g.component, g.parallel)
            attention, mlp = "full", "none"
        elif ch == "E":
            inv.linear("mixer.gate", h, E, "router", "rep")
            inv.add("mixer.gate.e_score_correction_bias", E, "router", "rep")
            inv.add("mixer.experts.up_proj", E * moe_ffn * h, "routed_experts", "expert")
            inv.add("mixer.experts.down_proj", E * moe_ffn * h, "routed_experts", "expert")
            if shared:
                inv.linear("mixer.shared_experts.up_proj", h, shared, "shared_experts", bias=mlp_bias)
                inv.linear("mixer.shared_experts.down_proj", shared, h, "shared_experts", bias=mlp_bias, row=True)
            attention, mlp = "none", "moe"
        else:
            inv.linear("mixer.up_proj", h, ffn, "dense_mlp", bias=mlp_bias)
            inv.linear("mixer.down_proj", ffn, h, "dense_mlp", bias=mlp_bias, row=True)
            attention, mlp = "none", "dense"
        layers.append(_layer(i, attention, mlp, inv))
    tie = f.bool("tie_word_embeddings", False)
    pre = Inventory("model.")
    pre.add("embeddings.weight", c["vocab_size"] * h, "embedding", "vocab")
    post = Inventory()
    post.norm("model.norm_f", h)
    if not tie:
        post.add("lm_head.weight", c["vocab_size"] * h, "lm_head", "vocab")
    return dict(
        c,
        head_dim=hd,
        v_head_dim=hd,
        ffn_hidden_size=ffn if "-" in pattern else 0,
        moe_ffn_hidden_size=moe_ffn,
        num_experts=E,
        moe_router_topk=f.int("num_experts_per_tok", 0, min_value=0),
        shared_expert_ffn_hidden_size=shared,
        tie_word_embeddings=tie,
        mamba_num_heads=nh,
        mamba_head_dim=mhd,
        mamba_num_groups=ng,
        mamba_state_dim=state,
        mamba_conv_kernel=kernel,
        layers=layers,
        pre=tuple(pre.groups),
        post=tuple(post.groups),
        notes=[
            "Nemotron-H: layers follow hybrid_override_pattern (M Mamba2, * attention, E MoE, - MLP); "
            "each holds one mixer, so a layer has either an attention/SSM part or an MLP part"
        ],
    )


NATIVE: dict[str, Callable[[Fields], dict]] = {
    "llama": dense_family("llama"),
    "qwen2": dense_family("qwen2"),
    "qwen3": dense_family("qwen3"),
    "qwen3_moe": qwen3_moe,
    "mixtral": mixtral,
    "qwen3_next": qwen3_next,
    "qwen3_5_moe": qwen3_5_moe,
    "deepseek_v3": deepseek_v3,
    "glm4_moe": glm4_moe,
    "glm_moe_dsa": glm_moe_dsa,
    "deepseek_v4": deepseek_v4,
    "deepseek_v41": deepseek_v41,
    "mimo": mimo,
    "nemotron_h": nemotron_h,
}
"""Architectures with a native inventory (keys are architectures; see :data:`ALIASES` for model types)."""

SUPPORTED_MODEL_TYPES = tuple(sorted(set(NATIVE) | set(ALIASES)))
"""Every ``model_type`` the kit reads natively."""


def build_native(arch: str, f: Fields, **meta) -> ModelSpec:
    """Run the native builder for ``arch`` and wrap the result in a :class:`ModelSpec`."""
    out = NATIVE[arch](f)
    out["layers"] = tuple(out["layers"])
    out["notes"] = tuple(out.get("notes", ())) + tuple(meta.pop("notes", ()))
    return ModelSpec(architecture=arch, source="native", config=f.cfg, **meta, **out)


__all__ = ["ALIASES", "NATIVE", "SUPPORTED_MODEL_TYPES", "ParamGroup", "build_native", "qwen3_5_vision_params"]


def qwen3_5_vision_params(v: Fields) -> int:
    """Parameters of the Qwen3.5 vision tower (Qwen3-VL's without DeepStack mergers): see :mod:`.vision`."""
    return qwen3_vl_vision_params(v, deepstack=False)
