"""``from_hf_config``: a config file (or dict) to a :class:`~mlite.models.spec.ModelSpec`."""

from __future__ import annotations

from pathlib import Path

from ..errors import ConfigError
from .config import Fields, load_config
from .families import ALIASES, NATIVE, SUPPORTED_MODEL_TYPES, build_native
from .hf_meta import spec_from_meta, transformers_knows
from .spec import ModelSpec
from .vision import VISION_PLACEMENT
from .vision import vision_params as count_vision


def _split_text(cfg: dict) -> tuple[dict, dict | None]:
    """The language-model part of a (possibly multimodal) config, and its vision config (Qwen2.5-VL's hub files
    keep the text fields at the top level, next to ``vision_config``)."""
    text = cfg.get("text_config")
    if not isinstance(text, dict):
        vision = cfg.get("vision_config")
        return cfg, vision if isinstance(vision, dict) else None
    text = dict(text)
    for key in ("tie_word_embeddings",):
        if key not in text and key in cfg:
            text[key] = cfg[key]
    vision = cfg.get("vision_config")
    return text, vision if isinstance(vision, dict) else None


def from_hf_config(ref: str | Path | dict, *, name: str | None = None) -> ModelSpec:
    """Read a Hugging Face ``config.json`` (path, ``data/models`` name, or dict) into a :class:`ModelSpec`."""
    nm, cfg = load_config(ref)
    where = "config" if isinstance(ref, dict) else str(ref)
    model_type = cfg.get("model_type")
    supported = ", ".join(SUPPORTED_MODEL_TYPES)
    if not isinstance(model_type, str) or not model_type:
        raise ConfigError(
            f"{where}: field 'model_type' is missing; supported: {supported} "
            "(or any type the installed transformers ships)"
        )
    text, vision = _split_text(cfg)
    arch: str | None = ALIASES.get(model_type, model_type)
    if arch not in NATIVE and text is not cfg:
        inner = text.get("model_type")
        arch = ALIASES.get(inner, inner) if isinstance(inner, str) else None
    notes = []
    vision_params = None
    if model_type == "kimi_k2" or (text.get("model_type") == "kimi_k2"):
        notes.append("kimi_k2 is read as deepseek_v3 (same architecture; the checkpoint ships remote code)")
    if arch in NATIVE:
        if vision is not None:
            vision_params = count_vision(model_type, Fields(vision, where + ":vision_config", model_type))
            if vision_params is None:
                notes.append("vision tower present but not counted (excluded from total by convention)")
            else:
                notes.append(
                    f"vision tower: {vision_params:,} parameters, not in total; in memory estimates " + VISION_PLACEMENT
                )
        return build_native(
            arch,
            Fields(text, where, model_type),
            name=name or nm,
            model_type=model_type,
            vision_params=vision_params,
            notes=notes,
        )
    if transformers_knows(model_type):
        return spec_from_meta(cfg, name=name or nm, model_type=model_type, where=where)
    raise ConfigError(
        f"{where}: unknown model_type '{model_type}'; supported: {supported} "
        "(or any type the installed transformers ships)"
    )
