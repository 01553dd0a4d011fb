"""``enumerate_meshes``: every valid mesh of a model on N GPUs, ranked by a documented score (and, where the step
time was predicted, by the predicted speed).

Candidates: PP a divisor of N with PP <= layers; VPP 1, or (PP > 1) any VPP that splits the layers evenly, up to
``max_vpp``; TP, CP, EP, ETP divisors of what is left; sizes the model's own rules refuse are skipped
(:func:`mlite.models.mesh_rules.sizes_violate`, the data :func:`mlite.mesh.checks.rule_model` checks); each
candidate is validated by :func:`resolve`'s rules (:class:`~mlite.mesh.resolve_many.Resolver`: the same plan,
each rule's findings memoised by the sizes it reads; uneven layouts chosen automatically when the layers do not split evenly
and VPP is 1), so a mesh the rules refuse is never listed.

Ranking (ascending; lower is better), in order of precedence:
  1. fits in memory (when a ``fits`` callback is given, e.g. from the memory estimator); among the meshes that do
     not fit, the least per-GPU memory first (the callback's ``extra["total_bytes"]``, where it reports one): the
     score of a mesh that does not fit says nothing, how far it is from fitting does;
  2. among the meshes that fit, the highest predicted tokens/s/GPU first, where the callback predicted one (its
     ``extra["tokens_per_s_per_gpu"]``: :func:`mlite.memory.mesh_table` with a hardware profile asks
     :func:`mlite.time.predict` for every mesh that fits, and only for those); without a prediction this term is 0
     for every mesh and the order is the one below;
  3. score = 100 * [TP group spans nodes] + 30 * [EP*ETP group spans nodes]
             + 50 * pipeline bubble (PP-1)/(VPP*M + PP-1), M = num_microbatches
             + 4 * log2(CP) + 2 * log2(TP) + 1 * log2(ETP) + 0.5 * [uneven stages].
The score prefers TP and EP inside a node, fewer pipeline bubbles, less CP, then smaller TP/ETP; with a speed
prediction it only breaks ties between meshes predicted equally fast. :func:`rank_key` is the one sort key.
"""

from __future__ import annotations

import gc
import math
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass

from ..models.mesh_rules import rules_for, sizes_violate
from .config import DEFAULT_GPUS_PER_NODE, DEFAULT_SEQ_LEN, ParallelConfig
from .plan import MeshPlan
from .resolve_many import Resolver
from .rules import divisors


@dataclass(slots=True)
class RankedMesh:
    """A valid mesh with its ranking."""

    plan: MeshPlan
    """The resolved mesh."""
    score: float
    """Communication/bubble score (lower is better; see module docstring)."""
    fits: bool | None = None
    """Fits in GPU memory (None when no estimator was given)."""
    extra: dict | None = None
    """What the ``fits`` callback returned beyond the verdict (e.g. per-GPU bytes)."""

    def to_dict(self) -> dict:
        d = self.plan.to_dict()
        d.pop("rules", None)
        d["score"] = round(self.score, 4)
        d["fits"] = self.fits
        if self.extra:
            d.update(self.extra)
        return d


def mesh_score(plan: MeshPlan, num_microbatches: int = 8) -> float:
    """The ranking score of a valid mesh (module docstring)."""
    p = plan.parallel
    gpn = plan.gpus_per_node
    tp_span = p.tp > 1 and (p.tp > gpn or gpn % p.tp != 0)
    epx = p.ep * p.etp_size
    ep_span = epx > 1 and (epx > gpn or gpn % epx != 0)
    bubble = (p.pp - 1) / (p.vpp * num_microbatches + p.pp - 1) if p.pp > 1 else 0.0
    return (
        100 * tp_span
        + 30 * ep_span
        + 50 * bubble
        + 4 * math.log2(p.cp)
        + 2 * math.log2(p.tp)
        + math.log2(p.etp_size)
        + 0.5 * (plan.layout_source == "auto")
    )


def candidate_configs(spec, ngpu: int, *, seq_len: int = DEFAULT_SEQ_LEN, max_vpp: int = 8):
    """Candidate ParallelConfigs that pass the cheap divisibility rules (before full validation)."""
    L = spec.num_layers
    heads, kv = spec.num_attention_heads, spec.num_key_value_heads
    nk, nv = spec.linear_num_key_heads, spec.linear_num_value_heads
    E, moe_ffn = spec.num_experts, spec.moe_ffn_hidden_size
    widths = [w for w in (spec.ffn_hidden_size, spec.shared_expert_ffn_hidden_size) if w]
    arch = spec.architecture
    own_rules = bool(rules_for(arch))  # the model's own mesh rules (data, mlite/models/mesh_rules.json)
    for pp in divisors(ngpu):
        if pp > L:
            break
        vpps = [1] + ([v for v in range(2, max_vpp + 1) if L % (pp * v) == 0] if pp > 1 else [])
        for tp in divisors(ngpu // pp):
            if heads % tp or kv % tp or (nv and (nk % tp or nv % tp)) or any(w % tp for w in widths):
                continue
            for cp in divisors(ngpu // (pp * tp)):
                if cp > 1 and seq_len % (2 * cp):
                    continue
                for ep in divisors(ngpu // pp) if E else [1]:
                    if E and E % ep:
                        continue
                    for etp in divisors(ngpu // (pp * ep)) if E else [1]:
                        if E and moe_ffn % etp:
                            continue
                        for vpp in vpps:
                            sizes = dict(tp=tp, pp=pp, vpp=vpp, cp=cp, ep=ep, etp=etp)
                            if own_rules and sizes_violate(arch, sizes):
                                continue
                            yield ParallelConfig(tp=tp, pp=pp, vpp=vpp, cp=cp, ep=ep, etp=etp)


def enumerate_meshes(
    spec,
    ngpu: int,
    *,
    seq_len: int = DEFAULT_SEQ_LEN,
    gpus_per_node: int = DEFAULT_GPUS_PER_NODE,
    num_microbatches: int = 8,
    max_vpp: int = 8,
    fits: Callable[[MeshPlan], bool | tuple[bool, dict]] | None = None,
) -> list[RankedMesh]:
    """Every valid mesh, best first. ``fits(plan)`` returns a verdict (or ``(verdict, extra_fields)``)."""
    with gc_paused():
        out: list[RankedMesh] = []
        resolvers = {  # resolve() for many meshes, each rule's findings memoised (resolve_many)
            uneven: Resolver(spec, ngpu, seq_len=seq_len, gpus_per_node=gpus_per_node, auto_uneven=uneven)
            for uneven in (False, True)
        }
        for cfg in candidate_configs(spec, ngpu, seq_len=seq_len, max_vpp=max_vpp):
            plan = resolvers[cfg.vpp == 1](cfg)
            if not plan.valid:
                continue
            verdict, extra = None, None
            if fits is not None:
                r = fits(plan)
                verdict, extra = r if isinstance(r, tuple) else (r, None)
            out.append(RankedMesh(plan, mesh_score(plan, num_microbatches), verdict, extra))
        out.sort(key=rank_key)
    return out


@contextmanager
def gc_paused():
    """The cyclic garbage collector paused while the table is built (tens of thousands of small objects, none of
    them garbage yet: the collections would only walk them again; about a fifth of the build's CPU time on Kimi-K2 at
    1024 GPUs) and resumed after, as it was."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def rank_key(m: RankedMesh) -> tuple:
    """The sort key of :func:`enumerate_meshes` (module docstring): fits first, then (a mesh that fits) the highest
    predicted tokens/s/GPU where one was predicted, or (a mesh that does not fit) its per-GPU bytes, then the score,
    then the smaller pipeline, VPP, TP, CP, the larger EP, the smaller ETP."""
    p = m.plan.parallel
    extra = m.extra or {}
    over = float(extra.get("total_bytes", 0)) if m.fits is False else 0.0
    speed = -float(extra.get("tokens_per_s_per_gpu", 0.0)) if m.fits is not False else 0.0
    return (m.fits is False, over, speed, m.score, p.pp, p.vpp, p.tp, p.cp, -p.ep, p.etp_size)
