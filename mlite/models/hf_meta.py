"""The transformers path: a model instantiated on the meta device (no memory, about a second even for 1T).

Used (a) as the inventory for model types the kit has no native reader for, classifying parameters into
components by name, and (b) as the oracle the tests hold the native inventories against.
"""

from __future__ import annotations

import re
import warnings

from ..errors import ConfigError
from .blocks import Inventory
from .spec import LayerSpec, ModelSpec

ROUTER_BIAS_BUFFERS = ("e_score_correction_bias",)
"""Buffers that are trained-checkpoint parameters (router expert biases); counted as parameters."""

_LAYER = re.compile(r"(?:^|\.)(?:layers|h|blocks|layer)\.(\d+)\.")


def transformers_knows(model_type: str) -> bool:
    """True if the installed transformers has a config class for ``model_type``."""
    try:
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES
    except Exception:  # noqa: BLE001 - transformers missing or broken: the meta path is unavailable
        return False
    return model_type in CONFIG_MAPPING_NAMES


def meta_model(config: dict, model_type: str | None = None):
    """``AutoModelForCausalLM.from_config`` on the meta device for a config dict."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    cfg = {k: v for k, v in config.items() if k not in ("auto_map", "quantization_config", "architectures")}
    mt = model_type or cfg.pop("model_type")
    cfg.pop("model_type", None)
    hf_logging.set_verbosity_error()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf_cfg = AutoConfig.for_model(mt, **cfg)
        with torch.device("meta"):
            return AutoModelForCausalLM.from_config(hf_cfg), hf_cfg


def meta_param_count(config: dict, model_type: str | None = None) -> tuple[int, int]:
    """(parameters, router-bias buffer elements) of the transformers model for ``config``."""
    model, _ = meta_model(config, model_type)
    params = sum(p.numel() for p in model.parameters())
    biases = sum(b.numel() for n, b in model.named_buffers() if n.rsplit(".", 1)[-1] in ROUTER_BIAS_BUFFERS)
    return params, biases


def classify(name: str) -> tuple[str, str]:
    """(component, parallel) for a parameter name of an unknown architecture."""
    n = name.lower()
    if _LAYER.search(n) is None:
        if re.search(r"embed_tokens|wte\b|word_embeddings|embed_in", n):
            return "embedding", "vocab"
        if re.search(r"lm_head|embed_out|^output\.", n):
            return "lm_head", "vocab"
        return ("norms", "rep") if "norm" in n or n.startswith("ln_") else ("other", "rep")
    if "shared_expert" in n:
        return "shared_experts", "tp"
    if "experts" in n:
        return "routed_experts", "expert"
    if re.search(r"(mlp|moe|feed_forward)\.(gate|router)\.(weight|bias|e_score)|router|e_score_correction", n):
        return "router", "rep"
    module = n.rsplit(".", 2)[-2] if n.count(".") >= 1 else n
    if "norm" in module and not re.search(r"\.(self_attn|attn|attention|linear_attn|mlp|mixer)\.", "." + n):
        return "norms", "rep"
    if re.search(r"linear_attn|mamba|ssm|mixer|linear_attention|time_mix", n):
        return "linear_attention", "tp"
    if re.search(r"attn|attention", n):
        return "attention", "rep" if "norm" in n else "tp"
    if "norm" in n or re.search(r"\bln_?\d", n):
        return "norms", "rep"
    if re.search(r"mlp|feed_forward|ffn|fc\d", n):
        return "dense_mlp", "tp"
    return "other", "rep"


def spec_from_meta(config: dict, *, name: str, model_type: str, where: str) -> ModelSpec:
    """Build a :class:`ModelSpec` from the transformers model on the meta device."""
    try:
        model, hf_cfg = meta_model(config, model_type)
    except Exception as e:  # noqa: BLE001 - transformers rejects the config: report it as one line
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ConfigError(f"{where}: transformers could not build model_type '{model_type}': {msg}") from None
    tensors = [(n, p.numel()) for n, p in model.named_parameters()]
    tensors += [(n, b.numel()) for n, b in model.named_buffers() if n.rsplit(".", 1)[-1] in ROUTER_BIAS_BUFFERS]
    pre, post = Inventory(), Inventory()
    per_layer: dict[int, Inventory] = {}
    seen_layers = False
    for n, numel in tensors:
        comp, par = classify(n)
        m = _LAYER.search(n)
        if m:
            seen_layers = True
            idx = int(m.group(1))
            inv = per_layer.setdefault(idx, Inventory())
            inv.add(n[m.end() :], numel, comp, par)
        else:
            (post if seen_layers else pre).add(n, numel, comp, par)
    layers = []
    for idx in sorted(per_layer):
        comps = {g.component for g in per_layer[idx].groups}
        layers.append(
            LayerSpec(
                index=idx,
                attention="linear" if "linear_attention" in comps and "attention" not in comps else "full",
                mlp="moe" if "routed_experts" in comps else "dense",
                mtp=False,
                groups=tuple(per_layer[idx].groups),
            )
        )

    def attr(*names, default=0):
        for nm in names:
            v = getattr(hf_cfg, nm, None)
            if isinstance(v, int) and not isinstance(v, bool):
                return v
        return default

    h = attr("hidden_size", "d_model", "n_embd")
    heads = attr("num_attention_heads", "n_head", default=1)
    head_dim = attr("head_dim", default=(h // heads if heads else 0))
    cls = type(model).__name__
    return ModelSpec(
        name=name,
        model_type=model_type,
        architecture=model_type,
        source="transformers-meta",
        hidden_size=h,
        vocab_size=attr("vocab_size"),
        num_layers=len(layers) or attr("num_hidden_layers"),
        num_attention_heads=heads,
        num_key_value_heads=attr("num_key_value_heads", default=heads),
        head_dim=head_dim,
        v_head_dim=head_dim,
        ffn_hidden_size=attr("intermediate_size", "ffn_dim", "n_inner"),
        moe_ffn_hidden_size=attr("moe_intermediate_size"),
        num_experts=attr("num_experts", "n_routed_experts", "num_local_experts"),
        moe_router_topk=attr("num_experts_per_tok", "moe_topk", "top_k"),
        tie_word_embeddings=bool(getattr(hf_cfg, "tie_word_embeddings", False)),
        max_position_embeddings=attr("max_position_embeddings"),
        pre=tuple(pre.groups),
        post=tuple(post.groups),
        layers=tuple(layers),
        notes=(
            f"parameter inventory built from transformers' {cls} on the meta device; "
            "components classified by parameter name, MTP layers (if any) not included",
        ),
        config=config,
    )
