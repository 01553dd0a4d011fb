"""The transforms of :class:`~mlite.options.schema.Codec` rows: options that span several fields or Hydra keys.

Each codec is three small functions over filled-in keys ``k`` (the row's key templates, in order):

* ``view(o, ctx) -> (changes, notes)``: what the target runs for these fields (e.g. recompute=full drops extra
  modules), so writer, reader and the launcher header agree;
* ``write(o, ctx, k) -> [Entry]``: the overrides for the (viewed) options;
* ``read(get, o, ctx, k, warn) -> {field: value}``: the reverse, ``get(key, default)`` marks the key consumed;
  ``o`` holds what was read so far.

``ctx`` carries ``tp`` and ``moe`` (writer: the mesh; reader: read from the keys where needed).
"""

from __future__ import annotations

from dataclasses import dataclass

from .table import MEGATRON_RECOMPUTE_MODULES


@dataclass(frozen=True)
class Entry:
    """One override a codec writes."""

    key: str
    """Filled-in Hydra key."""
    value: object
    """Python value (rendered with :func:`mlite.export.overrides.hydra_literal`)."""
    add: bool = False
    """``+key``."""
    knob: str | None = None
    """Launcher knob that holds :attr:`value` (the override reads ``${KNOB}``)."""


def _none(o, ctx):
    return {}, []


# ------------------------------------------------------------------------ recompute
def recompute_list(o) -> list[str]:
    """mlite's ``impl_cfg.recompute``: ``[full]``, or the recomputed modules (selective = ``core_attn`` + extras)."""
    if o["recompute"] == "full":
        return ["full"]
    mods = list(o["recompute_modules"])
    if o["recompute"] == "selective" and "core_attn" not in mods:
        mods.insert(0, "core_attn")
    return mods


def split_recompute(mods) -> tuple[str, tuple[str, ...]]:
    """A recomputed-module list back to ``(recompute, recompute_modules)``: ``core_attn`` means selective."""
    mods = [str(m) for m in (mods if isinstance(mods, (list, tuple)) else [mods] if mods else [])]
    if "full" in mods:
        return "full", ()
    if "core_attn" in mods:
        return "selective", tuple(m for m in mods if m != "core_attn")
    return "none", tuple(mods)


def _recompute_view(o, allowed=None):
    notes = []
    mods = tuple(o["recompute_modules"])
    if o["recompute"] == "full":
        notes += [f"recompute_modules '{m}' dropped: recompute=full recomputes whole layers" for m in mods]
        return {"recompute": "full", "recompute_modules": ()}, notes
    if allowed is not None:
        for m in mods:
            if m not in allowed:
                notes.append(f"recompute module '{m}' has no Megatron-Core counterpart ({', '.join(allowed)}); dropped")
        mods = tuple(m for m in mods if m in allowed)
    rec, rest = split_recompute(recompute_list({"recompute": o["recompute"], "recompute_modules": mods}))
    return {"recompute": rec, "recompute_modules": rest}, notes


def _mlite_recompute_write(o, ctx, k):
    rec = recompute_list(o)
    return [Entry(k[0], rec, add=True)] if rec else []


def _mlite_recompute_read(get, o, ctx, k, warn):
    v = get(k[0])
    if v is None:
        return {}
    rec, mods = split_recompute(v)
    return {"recompute": rec, "recompute_modules": mods}


def _megatron_recompute_write(o, ctx, k):
    gran, method, layers, modules = k
    if o["recompute"] == "full":
        return [Entry(gran, "full"), Entry(method, "uniform"), Entry(layers, 1)]
    mods = recompute_list(o)
    return [Entry(gran, "selective"), Entry(modules, mods)] if mods else []


def _megatron_recompute_read(get, o, ctx, k, warn):
    gran, method, layers, modules = k
    g, mods = get(gran), get(modules)
    get(method)
    get(layers)
    if g == "full":
        return {"recompute": "full", "recompute_modules": ()}
    if g == "selective":
        rec, rest = split_recompute(list(mods or ["core_attn"]))
        return {"recompute": rec, "recompute_modules": rest}
    return {}


# ------------------------------------------------------------------------ optimizer offload
def _fraction(v, key, warn):
    if isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v <= 1:
        return float(v)
    warn(f"{key}={v!r}: offload fraction is not a number in [0, 1]; not used")
    return None


def _mlite_offload_view(o, ctx):
    if o["optimizer_offload"] and not o["offload_fraction"]:
        note = (
            "optimizer_offload=True without offload_fraction: verl's mlite engine then offloads the whole "
            "optimizer state (offload_fraction 1.0)"
        )
        return {"offload_fraction": 1.0}, [note]
    return {}, []


def _mlite_offload_write(o, ctx, k):
    f = o["offload_fraction"]
    return [Entry(k[0], f, add=True, knob="OFFLOAD_FRACTION")] if f > 0 else []


def _mlite_offload_read(get, o, ctx, k, warn):
    frac = get(k[0], get(k[1]))
    if frac is None and get(k[2]):
        frac = 1.0
    if frac is None and o.get("optimizer_offload"):
        frac = 1.0  # verl's mlite engine: optimizer_offload without a fraction offloads all of it
    if frac is None:
        return {}
    frac = _fraction(frac, k[0], warn)
    return {} if frac is None else {"offload_fraction": frac}


def _megatron_offload_write(o, ctx, k):
    f = o["offload_fraction"]
    if f <= 0:
        return []
    return [Entry(k[0], True, add=True), Entry(k[1], f, add=True, knob="OFFLOAD_FRACTION"), Entry(k[2], True, add=True)]


def _megatron_offload_read(get, o, ctx, k, warn):
    get(k[2])
    if not get(k[0]):
        get(k[1])
        return {}
    frac = _fraction(get(k[1], 1.0), k[1], warn)
    return {} if frac is None else {"offload_fraction": frac}


# ------------------------------------------------------------------------ sequence parallel (Megatron)
def _sp_view(o, ctx):
    tp, moe = ctx.get("tp", 1), ctx.get("moe", False)
    return {"sequence_parallel": bool(tp > 1 and (o["sequence_parallel"] or moe))}, []


def _sp_write(o, ctx, k):
    # verl's default is True; Megatron-Core forces it on for MoE with TP > 1 and ignores it with TP 1
    if ctx.get("tp", 1) > 1 and not o["sequence_parallel"] and not ctx.get("moe", False):
        return [Entry(k[0], False)]
    return []


def _sp_read(get, o, ctx, k, warn):
    v = get(k[0])
    if v is not None:
        return {"sequence_parallel": bool(v)}
    tp = get(k[1])
    return {"sequence_parallel": bool(isinstance(tp, int) and tp > 1)}


# ------------------------------------------------------------------------ gradient buffer dtype (Megatron)
def _grads_write(o, ctx, k):
    """bf16 main grads: with PAO verl derives ``grad_reduce_in_fp32=False`` from the optimizer's
    ``main_grads_dtype``; without PAO only the DDP override says it (``_build_ddp_config_overrides`` in
    verl/workers/engine/megatron/transformer_impl.py)."""
    if o["main_grads_dtype"] != "bf16":
        return []
    if o["use_precision_aware_optimizer"]:
        return [Entry(k[0], "bf16")]
    return [Entry(k[1], False, add=True)]


def _grads_read(get, o, ctx, k, warn):
    dtype, fp32_reduce = get(k[0]), get(k[1])
    if fp32_reduce is False or (
        fp32_reduce is None and o.get("use_precision_aware_optimizer") and str(dtype) in ("bf16", "bfloat16")
    ):
        return {"main_grads_dtype": "bf16"}
    return {}


# ------------------------------------------------------------------------ GRPO sequence length
def _grpo_seq_read(get, o, ctx, k, warn):
    p, r = get(k[0], 512), get(k[1], 512)  # verl's data defaults
    if all(isinstance(v, int) and not isinstance(v, bool) for v in (p, r)):
        return {"seq_len": p + r}
    warn(f"seq_len could not be read ({k[0]}={p!r}, {k[1]}={r!r}); the estimator's default is used")
    return {}


# ------------------------------------------------------------------------ chunked optimizer-state offload
def _megatron_chunked_view(o, ctx):
    if not o["chunked_optimizer_state_offload"]:
        return {}, []
    notes = []
    if o["optimizer_offload"]:
        notes.append(
            "optimizer_offload=True with chunked_optimizer_state_offload: verl's load_megatron_optimizer "
            "(verl/utils/megatron_utils.py) moves exp_avg / exp_avg_sq back to the GPU whole, so the update holds the "
            "whole state, not one chunk window"
        )
    if o["offload_master_for_forward"]:
        notes.append(
            "chunked_optimizer_state_offload: the masters leave the GPU only when the trainer calls "
            "offload_optimizer_state_for_forward() (Megatron-Core's training loop does); no call was found in verl's "
            "Megatron engine, so estimate with --masters-resident-in-rollout unless your verl calls it"
        )
    return {}, notes


def _chunked_write(o, ctx, k):
    return [Entry(k[0], True, add=True)] if o["chunked_optimizer_state_offload"] else []


def _chunked_read(get, o, ctx, k, warn):
    on, alias = get(k[0]), get(k[1])
    if alias is not None and not isinstance(alias, bool):
        warn(f"{k[1]}={alias!r}: expected True or False; not used")
        alias = None
    if on is not None and not isinstance(on, bool):
        warn(f"{k[0]}={on!r}: expected True or False; not used")
        on = None
    if alias:
        warn(
            f"{k[1]}=True is Megatron-Core's deprecated alias of chunked_optimizer_state_offload (FutureWarning in "
            "OptimizerConfig.__post_init__, megatron/core/optimizer/optimizer_config.py @ d48bd6be): read as "
            "chunked_optimizer_state_offload=True, chunk size 0 and fraction 1.0 unless given"
        )
        return {"chunked_optimizer_state_offload": True}
    return {} if on is None else {"chunked_optimizer_state_offload": on}


CODECS = {
    "mlite_recompute": (lambda o, ctx: _recompute_view(o), _mlite_recompute_write, _mlite_recompute_read),
    "megatron_recompute": (
        lambda o, ctx: _recompute_view(o, MEGATRON_RECOMPUTE_MODULES),
        _megatron_recompute_write,
        _megatron_recompute_read,
    ),
    "mlite_offload_fraction": (_mlite_offload_view, _mlite_offload_write, _mlite_offload_read),
    "megatron_cpu_offload": (_none, _megatron_offload_write, _megatron_offload_read),
    "megatron_sequence_parallel": (_sp_view, _sp_write, _sp_read),
    "megatron_grads_dtype": (_none, _grads_write, _grads_read),
    "grpo_seq_len": (_none, lambda o, ctx, k: [], _grpo_seq_read),
    "megatron_chunked_state_offload": (_megatron_chunked_view, _chunked_write, _chunked_read),
}
"""Codec name -> ``(view, write, read)``."""
