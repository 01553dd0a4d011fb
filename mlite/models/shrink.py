"""Real configs cut to size for a debug run: fewer layers, experts or vocabulary, the same architecture.

- Layers are *chosen*, not truncated: every distinct (attention kind, MLP kind) pair of the original stack is kept
  when ``layers`` allows (a Qwen3.5 stack cut to 2 layers keeps one Gated DeltaNet and one full-attention layer; a
  DeepSeek-V3 stack keeps one dense-first and one MoE layer), the rest filled in original order. The chosen
  original indices are returned (``source_layers``), so a checkpoint's layers can be loaded into the cut model.
- Per-layer lists (``layer_types``, ``mlp_layer_types``, ``compress_ratios`` ..., Nemotron-H's
  ``hybrid_override_pattern`` string) are re-indexed; counters that
  describe a prefix of the stack (``first_k_dense_replace``, ``num_hash_layers``) and index lists
  (``mlp_only_layers``) are recomputed from the chosen layers; hybrid stacks given by an interval get an explicit
  ``layer_types``. Layer-id lists (DeepSeek-V4.1's ``*_layer_ids``: KV and index sources, Engram layers, with the
  Engram row counts of the layers kept) keep the chosen layers, renumbered.
- Experts: the routed-expert count shrinks; top-k and group-limited routing (``n_group``, ``topk_group``) are
  reduced only as far as the new count requires. The vocabulary shrinks only for randomly initialised runs (the
  caller refuses it with a checkpoint); special token ids beyond it are dropped.
Every change is said in ``changes``, one sentence each.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field

from ..errors import MliteError
from .config import load_config
from .reader import from_hf_config
from .spec import ModelSpec

_EXPERT_KEYS = ("num_experts", "n_routed_experts", "num_local_experts")
"""Routed-expert count, by family (Qwen, DeepSeek/GLM/Kimi, Mixtral)."""
_TOPK_KEYS = ("num_experts_per_tok", "moe_topk")
_PREFIX_COUNTERS = {"first_k_dense_replace": "dense", "num_hash_layers": "hash_moe"}
"""Keys counting a leading run of layers of one MLP kind (DeepSeek's dense-first layers, DeepSeek-V4's hash MoE)."""
_TOKEN_ID_KEYS = ("bos_token_id", "eos_token_id", "pad_token_id")
_PAIRED_LISTS = {"engram_layer_ids": "engram_num_embeddings"}
"""Layer-id lists with a list of one value per listed layer (DeepSeek-V4.1's Engram row counts)."""


@dataclass
class Shrunk:
    """A cut-to-size config and what was changed."""

    config: dict
    """The new Hugging Face config dict (text part changed in place where the model has a ``text_config``)."""
    source_layers: tuple[int, ...]
    """For each layer of the cut model, the index of the original layer it stands for."""
    changes: list[str] = field(default_factory=list)
    """One sentence per change, for the user."""
    num_experts: int | None = None
    """Routed experts kept (None: dense model); experts ``0 .. num_experts-1`` of each MoE layer."""


def _text(cfg: dict) -> dict:
    return cfg["text_config"] if isinstance(cfg.get("text_config"), dict) else cfg


def _choose_layers(kinds: list[tuple[str, str]], n: int) -> list[int]:
    """``n`` indices (sorted) covering every distinct kind pair first, then the earliest others."""
    first: dict[tuple[str, str], int] = {}
    for i, k in enumerate(kinds):
        first.setdefault(k, i)
    picked = sorted(first.values())[:n]
    rest = [i for i in range(len(kinds)) if i not in set(picked)]
    return sorted(picked + rest[: n - len(picked)])


def shrink_config(ref, *, layers: int | None = None, experts: int | None = None, vocab: int | None = None) -> Shrunk:
    """Cut ``ref`` (a catalog name, a path or a config dict) to ``layers`` / ``experts`` / ``vocab``."""
    name, raw = load_config(ref)
    spec = from_hf_config(raw, name=name)
    cfg = copy.deepcopy(raw)
    t = _text(cfg)
    changes: list[str] = []
    n_old = spec.num_layers
    kinds = [(layer.attention, layer.mlp) for layer in spec.main_layers]

    if layers is None:
        layers = n_old
    if not 1 <= layers <= n_old:
        raise MliteError(f"--layers {layers}: {name} has {n_old} layers; give 1 to {n_old}")
    src = list(range(n_old)) if layers == n_old else _choose_layers(kinds, layers)
    if layers != n_old:
        _cut_layers(t, spec, kinds, src, changes)
    kept_experts = spec.num_experts or None
    if experts is not None:
        kept_experts = _cut_experts(t, spec, name, experts, changes) or kept_experts
    if vocab is not None:
        _cut_vocab(cfg, t, name, vocab, changes)
    from_hf_config(cfg, name=f"{name}-cut")  # the cut config must still read as the same family
    return Shrunk(
        config=cfg, source_layers=tuple(src), changes=changes, num_experts=kept_experts if spec.is_moe else None
    )


def _cut_layers(t: dict, spec: ModelSpec, kinds: list[tuple[str, str]], src: list[int], changes: list[str]) -> None:
    """Keep the original layers ``src`` (fewer than all) in the text config ``t``: the count, every per-layer
    list, the counters and index lists recomputed."""
    n_old = spec.num_layers
    distinct = len(set(kinds))
    kept = len({kinds[i] for i in src})
    t["num_hidden_layers"] = len(src)
    msg = f"layers {n_old} -> {len(src)} (original layers {', '.join(map(str, src))})"
    if kept < distinct:
        msg += f"; only {kept} of the {distinct} layer kinds fit in {len(src)} layers"
    changes.append(msg)
    _reindex_per_layer(t, src, n_old, spec.num_mtp_layers)
    _renumber_layer_ids(t, src, changes)
    if "full_attention_interval" in t and "layer_types" not in t and spec.architecture in ("qwen3_next", "qwen3_5_moe"):
        t["layer_types"] = ["linear_attention" if kinds[i][0] == "gdn" else "full_attention" for i in src]
        changes.append("layer_types written out (the interval rule would not give the chosen pattern)")
    if isinstance(t.get("mlp_only_layers"), list) and t["mlp_only_layers"]:
        old_idx = set(t["mlp_only_layers"])
        t["mlp_only_layers"] = [j for j, i in enumerate(src) if i in old_idx]
    for key, mlp_kind in _PREFIX_COUNTERS.items():
        if isinstance(t.get(key), int) and t[key] > 0:
            new = sum(1 for i in src if spec.main_layers[i].mlp == mlp_kind)
            if new != t[key]:
                changes.append(f"{key} {t[key]} -> {new}")
                t[key] = new


def _renumber_layer_ids(t: dict, src: list[int], changes: list[str]) -> None:
    """``*_layer_ids`` lists (and their paired value lists) keep the chosen layers, renumbered; ``*_layer_id``
    integers of a layer not kept become the first kept layer after it (or the last)."""
    new = {old: j for j, old in enumerate(src)}
    for key, val in list(t.items()):
        if key.endswith("_layer_ids") and isinstance(val, list) and all(isinstance(x, int) for x in val):
            keep = [k for k, x in enumerate(val) if x in new]
            t[key] = [new[val[k]] for k in keep]
            paired = _PAIRED_LISTS.get(key)
            if paired and isinstance(t.get(paired), list) and len(t[paired]) == len(val):
                t[paired] = [t[paired][k] for k in keep]
            if len(keep) != len(val):
                changes.append(f"{key}: layers {val} -> {t[key]} (the layers kept)")
        elif key.endswith("_layer_id") and isinstance(val, int) and not isinstance(val, bool) and val not in new:
            t[key] = next((j for j, old in enumerate(src) if old >= val), len(src) - 1)
            changes.append(f"{key} {val} -> {t[key]}")
        elif key.endswith("_layer_id") and isinstance(val, int) and not isinstance(val, bool):
            t[key] = new[val]


def _reindex_per_layer(t: dict, src: list[int], n_old: int, n_mtp: int) -> None:
    """Per-layer lists (and Nemotron-H's pattern string) of ``t`` re-indexed to the layers ``src``."""
    if isinstance(t.get("hybrid_override_pattern"), str) and len(t["hybrid_override_pattern"]) == n_old:
        t["hybrid_override_pattern"] = "".join(t["hybrid_override_pattern"][i] for i in src)  # Nemotron-H
    for key, val in list(t.items()):
        if not isinstance(val, list) or key in ("mlp_only_layers", "architectures"):
            continue
        if len(val) == n_old:
            t[key] = [val[i] for i in src]
        elif n_mtp and len(val) == n_old + n_mtp:  # per-layer lists that also cover the MTP layers
            t[key] = [val[i] for i in src] + val[n_old:]


def _cut_experts(t: dict, spec: ModelSpec, name: str, experts: int, changes: list[str]) -> int | None:
    """Keep routed experts ``0 .. experts-1``: the count, group-limited routing and top-k reduced as far as the
    new count requires. Returns the new count (None: unchanged)."""
    ekey = next((k for k in _EXPERT_KEYS if isinstance(t.get(k), int) and t[k] > 0), None)
    if ekey is None or not spec.is_moe:
        raise MliteError(f"--experts {experts}: {name} has no routed experts (a dense model); leave --experts out")
    old = t[ekey]
    if not 1 <= experts <= old:
        raise MliteError(f"--experts {experts}: {name} has {old} routed experts per layer; give 1 to {old}")
    if experts == old:
        return None
    t[ekey] = experts
    changes.append(f"routed experts {old} -> {experts} (experts 0..{experts - 1} of each MoE layer)")
    groups = _cut_groups(t, experts, changes)
    reachable = experts
    if isinstance(groups, int) and groups > 1 and isinstance(t.get("topk_group"), int):
        reachable = t["topk_group"] * (experts // groups)
    for k in _TOPK_KEYS:
        if isinstance(t.get(k), int) and t[k] > reachable:
            changes.append(f"{k} {t[k]} -> {reachable} (no more experts can be routed to)")
            t[k] = reachable
    return experts


def _cut_groups(t: dict, experts: int, changes: list[str]) -> object:
    """``n_group`` (and ``topk_group``) reduced so that ``experts`` split evenly into groups; the new ``n_group``
    (as the config has it: possibly absent or not an int)."""
    groups = t.get("n_group")
    if isinstance(groups, int) and groups > 1 and experts % groups:
        g = math.gcd(groups, experts)
        changes.append(f"n_group {groups} -> {g} ({experts} experts must split evenly into groups)")
        t["n_group"] = groups = g
        if isinstance(t.get("topk_group"), int) and t["topk_group"] > g:
            changes.append(f"topk_group {t['topk_group']} -> {g}")
            t["topk_group"] = g
    return groups


def _cut_vocab(cfg: dict, t: dict, name: str, vocab: int, changes: list[str]) -> None:
    """``vocab_size`` reduced to ``vocab``; special token ids beyond it dropped (in ``cfg`` and its text part)."""
    old = t.get("vocab_size")
    if not isinstance(old, int):
        raise MliteError(f"--vocab {vocab}: {name}'s config has no vocab_size")
    if not 2 <= vocab <= old:
        raise MliteError(f"--vocab {vocab}: {name} has a vocabulary of {old}; give 2 to {old}")
    if vocab == old:
        return
    t["vocab_size"] = vocab
    changes.append(f"vocab_size {old} -> {vocab} (random initialisation only)")
    for k in _TOKEN_ID_KEYS:
        for d in {id(cfg): cfg, id(t): t}.values():
            v = d.get(k)
            if (isinstance(v, int) and v >= vocab) or (isinstance(v, list) and any(x >= vocab for x in v)):
                d[k] = None
                changes.append(f"{k} dropped (outside the new vocabulary)")


__all__ = ["Shrunk", "shrink_config"]
