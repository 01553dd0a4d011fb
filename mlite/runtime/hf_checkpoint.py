"""Weights from a local Hugging Face safetensors directory, for a lite model that may be cut to size.

- Reads only the tensors the model needs (``safe_open`` per shard, through ``model.safetensors.index.json`` when the
  checkpoint is sharded), so a few layers of a large checkpoint load in the memory of those layers.
- Layer ``j`` of a cut model reads original layer ``source_layers[j]`` (:class:`mlite.models.shrink.Shrunk`);
  a cut to ``E`` routed experts reads experts ``0 .. E-1`` and the matching router rows.
- Both expert layouts found in checkpoints: one tensor per expert (``experts.{e}.gate_proj/up_proj/down_proj``, or
  Mixtral's ``w1/w3/w2``) and transformers' fused ``experts.gate_up_proj`` / ``experts.down_proj``; multimodal
  checkpoints' ``model.language_model.`` prefix as well as ``model.``.
- The checkpoint's own ``config.json`` must describe the model that was cut: every shape-deciding field is compared
  and a mismatch is refused before any tensor is read.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import MliteError

if TYPE_CHECKING:
    import torch

SHAPE_FIELDS = (
    "hidden_size",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "intermediate_size",
    "moe_intermediate_size",
    "shared_expert_intermediate_size",
    "vocab_size",
    "num_experts",
    "n_routed_experts",
    "num_local_experts",
    "linear_num_key_heads",
    "linear_num_value_heads",
    "linear_key_head_dim",
    "linear_value_head_dim",
    "tie_word_embeddings",
)
"""Config fields that decide tensor shapes: a checkpoint must agree with the (uncut) config on each it has."""

_LAYER = re.compile(r"^(model\.layers\.)(\d+)(\..*)$")
_PREFIXES = ("model.", "model.language_model.")


def _text(cfg: dict) -> dict:
    return cfg["text_config"] if isinstance(cfg.get("text_config"), dict) else cfg


def check_matches(directory: Path, config: dict) -> dict:
    """The checkpoint's config.json, after checking it describes ``config`` (the uncut model)."""
    path = directory / "config.json"
    if not path.is_file():
        raise MliteError(f"--hf-checkpoint {directory}: no config.json there (give a Hugging Face model directory)")
    try:
        ck = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise MliteError(f"--hf-checkpoint {directory}: config.json is not valid JSON ({e})") from None
    a, b = _text(ck), _text(config)
    for k in SHAPE_FIELDS:
        if k in a and k in b and a[k] != b[k]:
            raise MliteError(
                f"--hf-checkpoint {directory}: the checkpoint does not match the model config "
                f"({k} is {a[k]} there, {b[k]} in the config)"
            )
    if a.get("num_hidden_layers", 0) < b.get("num_hidden_layers", 0):
        raise MliteError(
            f"--hf-checkpoint {directory}: the checkpoint has {a.get('num_hidden_layers')} layers, "
            f"the model config {b.get('num_hidden_layers')}"
        )
    return ck


class _Shards:
    """Key → shard file, and lazily opened shards."""

    def __init__(self, directory: Path):
        index = directory / "model.safetensors.index.json"
        if index.is_file():
            weight_map = json.loads(index.read_text()).get("weight_map", {})
            self.where = {k: directory / f for k, f in weight_map.items()}
        else:
            files = sorted(directory.glob("*.safetensors"))
            if not files:
                raise MliteError(f"--hf-checkpoint {directory}: no *.safetensors files there")
            from safetensors import safe_open

            self.where = {}
            for f in files:
                with safe_open(str(f), framework="pt") as s:
                    self.where.update(dict.fromkeys(s.keys(), f))
        self._open: dict[Path, object] = {}

    def has(self, key: str) -> bool:
        return key in self.where

    def get(self, key: str) -> torch.Tensor:
        from safetensors import safe_open

        f = self.where[key]
        if f not in self._open:
            self._open[f] = safe_open(str(f), framework="pt")
        return self._open[f].get_tensor(key)  # type: ignore[attr-defined]


def _resolve(shards: _Shards, key: str) -> str | None:
    """The name ``key`` (transformers' ``model.`` naming) has in this checkpoint."""
    for p in _PREFIXES:
        k = p + key[len("model.") :] if key.startswith("model.") else key
        if shards.has(k):
            return k
    return None


def _expert_stack(shards: _Shards, base: str, num_experts: int, fused: str) -> torch.Tensor | None:
    """``[E, out, in]`` for ``base`` = '...mlp.experts' from per-expert tensors (None if the layout is absent)."""
    names = {"gate_up_proj": (("gate_proj", "up_proj"), ("w1", "w3")), "down_proj": (("down_proj",), ("w2",))}[fused]
    for parts in names:
        keys = [[_resolve(shards, f"{base}.{e}.{p}.weight") for p in parts] for e in range(num_experts)]
        if all(k is not None for row in keys for k in row):
            import torch

            return torch.stack([torch.cat([shards.get(k) for k in row], 0) for row in keys])  # type: ignore[arg-type]
    return None


def load_hf_checkpoint(
    directory,
    wanted: dict[str, tuple[int, ...]],
    *,
    config: dict,
    source_layers: tuple[int, ...] | None = None,
    num_experts: int | None = None,
) -> dict[str, torch.Tensor]:
    """The tensors named in ``wanted`` (transformers names of the cut model → shapes) read from ``directory``."""
    directory = Path(directory).expanduser().resolve()
    if not directory.is_dir():
        raise MliteError(f"--hf-checkpoint {directory}: no such directory")
    check_matches(directory, config)
    shards = _Shards(directory)
    out: dict[str, torch.Tensor] = {}
    for key, shape in wanted.items():
        src_key = key
        m = _LAYER.match(key)
        if m and source_layers is not None:
            src_key = f"{m.group(1)}{source_layers[int(m.group(2))]}{m.group(3)}"
        t: torch.Tensor | None = None
        if src_key.endswith(("mlp.experts.gate_up_proj", "mlp.experts.down_proj")):
            base, fused = src_key.rsplit(".", 1)
            found = _resolve(shards, src_key)
            n = shape[0]
            t = shards.get(found)[:n] if found else _expert_stack(shards, base, n, fused)
            if t is None:
                t = _expert_stack(shards, base.replace(".mlp.", ".block_sparse_moe."), n, fused)
        else:
            found = _resolve(shards, src_key) or _resolve(shards, src_key.replace(".mlp.", ".block_sparse_moe."))
            if found is None and key == "lm_head.weight":
                found = _resolve(shards, "model.embed_tokens.weight")  # tied embeddings: one tensor on disk
            if found is not None:
                t = shards.get(found)
                if (
                    num_experts is not None
                    and src_key.endswith(("mlp.gate.weight", "e_score_correction_bias"))
                    and t.shape[0] > shape[0]
                ):
                    t = t[: shape[0]]  # router rows of the kept experts
        if t is None:
            raise MliteError(
                f"--hf-checkpoint {directory}: tensor '{src_key}' is not in the checkpoint "
                "(it does not match the model config)"
            )
        if tuple(t.shape) != tuple(shape):
            raise MliteError(
                f"--hf-checkpoint {directory}: '{src_key}' has shape {tuple(t.shape)}, the model "
                f"needs {tuple(shape)} (the checkpoint does not match the model config)"
            )
        out[key] = t
    return out


__all__ = ["SHAPE_FIELDS", "check_matches", "load_hf_checkpoint"]
