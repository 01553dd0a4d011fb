"""Parameters each GPU holds: per pipeline rank, split into dense (sharded over DP x CP) and expert (over EDP).

Local = what a rank holds before optimizer sharding: ``tp`` tensors / TP, replicated tensors whole, routed experts /
(EP x ETP), vocabulary-parallel tensors at the padded vocabulary / TP; n-gram memory tables (split kind ``rows``,
DeepSeek-V4.1's Engram) are not counted here: they are sharded over their DP x CP owners, not optimizer-sharded,
and never offloaded (:mod:`mlite.memory.ngram` holds their bytes). Checkpoint-only copies (DeepSeek-style MTP
embed/head copies) are not held; instead, as Megatron does, a pipeline stage that needs the embedding but does not
own it (the last stage of a tied-embedding model, a stage holding MTP layers) keeps its own copy when PP > 1.
A vision tower (``spec.vision_params``) sits with the embedding, replicated across TP (:data:`mlite.models.vision.
VISION_PLACEMENT`).

Layers are grouped into kinds (same attention, MLP and tensor counts); per kind a prefix count of occurrences makes
the sums over a stage's contiguous layer range O(kinds), which keeps the whole-mesh table fast.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..mesh.rules import pad_vocab

_CACHE: dict[int, tuple] = {}


@dataclass(frozen=True, slots=True)
class Counts:
    """Parameter counts of one layer (or pre/post part) by split kind."""

    tp: int = 0
    """Split over TP."""
    rep: int = 0
    """Replicated across TP."""
    expert: int = 0
    """Split over EP x ETP."""
    vocab: int = 0
    """Vocabulary-parallel, at the unpadded vocabulary (scaled to the padded one per mesh)."""
    tensors: int = 0
    """Number of tensors (for buffer padding)."""

    def local(self, tp: int, ep_etp: int, vocab_scale: float) -> tuple[float, float]:
        """(dense, expert) parameters on one rank."""
        return self.tp / tp + self.rep + self.vocab * vocab_scale / tp, self.expert / ep_etp


def _counts(groups) -> Counts:
    c = {"tp": 0, "rep": 0, "expert": 0, "vocab": 0}
    n = 0
    for g in groups:
        if not g.checkpoint_only and g.parallel != "rows":
            c[g.parallel] += g.numel
            n += 1
    return Counts(**c, tensors=n)


@dataclass(frozen=True)
class ModelCounts:
    """Per-kind layer counts of a model, with prefix occurrence counts over the main layers."""

    kinds: tuple
    """Distinct (Counts, layer) pairs of the main layers; the layer is a representative."""
    prefix: tuple
    """prefix[k][i] = occurrences of kind k among main layers [0, i)."""
    mtp: tuple
    """(Counts, layer) of each MTP layer."""
    pre: Counts
    """The embedding part."""
    post: Counts
    """Final norm, lm_head, hyper-connection head."""


def model_counts(spec) -> ModelCounts:
    """Counts for ``spec``, cached per spec object."""
    hit = _CACHE.get(id(spec))
    if hit is not None and hit[0] is spec:
        return hit[1]
    index: dict = {}
    kinds: list = []
    seq = []
    for layer in spec.main_layers:
        c = _counts(layer.groups)
        key = (c, layer.attention, layer.mlp)
        if key not in index:
            index[key] = len(kinds)
            kinds.append((c, layer))
        seq.append(index[key])
    prefix = []
    for k in range(len(kinds)):
        acc, row = 0, [0]
        for s in seq:
            acc += s == k
            row.append(acc)
        prefix.append(tuple(row))
    out = ModelCounts(
        tuple(kinds),
        tuple(prefix),
        tuple((_counts(x.groups), x) for x in spec.mtp_layers),
        _counts(spec.pre),
        _counts(spec.post),
    )
    _CACHE[id(spec)] = (spec, out)
    return out


@dataclass(slots=True)
class StageParams:
    """Parameters held by one pipeline rank (all its virtual stages)."""

    pp_rank: int
    """Pipeline rank."""
    dense: float
    """Dense parameters on the rank (optimizer-sharded over DP x CP)."""
    expert: float
    """Routed-expert parameters on the rank (optimizer-sharded over EDP)."""
    layers: int
    """Main decoder layers on the rank."""
    mtp_layers: int
    """MTP layers on the rank."""
    has_embedding: bool
    """Holds the input embedding."""
    has_head: bool
    """Holds the output layer and loss."""
    max_layer: float
    """Largest single layer's local parameters (the FSDP2 unit that is all-gathered at once)."""
    layer_kinds: list
    """(representative layer, count) of the layers it runs, MTP layers included."""
    tensors: int = 0
    """Tensors it holds (for buffer padding)."""
    embedding_copy: bool = False
    """Keeps a copy of the embedding it does not own (tied output layer or MTP on a later stage)."""
    max_layer_dense: float = 0.0
    """Largest single layer's local parameters without its routed experts."""
    max_layer_expert: float = 0.0
    """Largest single layer's local routed-expert parameters."""

    @property
    def total(self) -> float:
        return self.dense + self.expert


_STAGE_CACHE: dict = {}


def stage_params(spec, plan) -> list[StageParams]:
    """Per pipeline rank parameter counts for a resolved mesh (cached: they depend on the stages, TP, EP x ETP)."""
    p = plan.parallel
    key = (id(spec), tuple(plan.stages), p.pp, p.tp, p.ep * p.etp_size)
    hit = _STAGE_CACHE.get(key)
    if hit is not None and hit[0] is spec:
        return hit[1]
    if len(_STAGE_CACHE) > 8192:
        _STAGE_CACHE.clear()
    out = _stage_params(spec, plan)
    _STAGE_CACHE[key] = (spec, out)
    return out


def _stage_params(spec, plan) -> list[StageParams]:
    p = plan.parallel
    tp, ep_etp = p.tp, p.ep * p.etp_size
    vocab_scale = pad_vocab(spec.vocab_size, tp) / spec.vocab_size
    mc = model_counts(spec)
    emb_local = spec.vocab_size * spec.hidden_size * vocab_scale / tp
    locals_ = [c.local(tp, ep_etp, vocab_scale) for c, _ in mc.kinds]
    out = []
    by_rank: dict[int, list] = {}
    for st in plan.stages:
        by_rank.setdefault(st.index % p.pp, []).append(st)
    for r in range(p.pp):
        dense = expert = 0.0
        n_layers = n_mtp = tensors = 0
        emb = head = False
        max_layer = max_dense = max_expert = 0.0
        kinds: dict = {}
        for st in by_rank.get(r, []):
            if st.layers:
                lo, hi = st.layers[0], st.layers[-1] + 1
                for k, (c, layer) in enumerate(mc.kinds):
                    n = mc.prefix[k][hi] - mc.prefix[k][lo]
                    if n:
                        d, e = locals_[k]
                        dense, expert = dense + n * d, expert + n * e
                        max_layer = max(max_layer, d + e)
                        max_dense, max_expert = max(max_dense, d), max(max_expert, e)
                        kinds[id(layer)] = (layer, kinds.get(id(layer), (layer, 0))[1] + n)
                        tensors += n * c.tensors
            for j in st.mtp:
                c, layer = mc.mtp[j]
                d, e = c.local(tp, ep_etp, vocab_scale)
                dense, expert, max_layer = dense + d, expert + e, max(max_layer, d + e)
                max_dense, max_expert = max(max_dense, d), max(max_expert, e)
                kinds[id(layer)] = (layer, kinds.get(id(layer), (layer, 0))[1] + 1)
                tensors += c.tensors
            n_layers += len(st.layers)
            n_mtp += len(st.mtp)
            if st.embedding:
                emb = True
                dense += mc.pre.local(tp, ep_etp, vocab_scale)[0] + (spec.vision_params or 0)
                tensors += mc.pre.tensors
            if st.head:
                head = True
                dense += mc.post.local(tp, ep_etp, vocab_scale)[0]
                tensors += mc.post.tensors
        copy = p.pp > 1 and not emb and ((head and spec.tie_word_embeddings) or n_mtp > 0)
        if copy:
            dense += emb_local
            tensors += 1
        out.append(
            StageParams(
                r,
                dense,
                expert,
                n_layers,
                n_mtp,
                emb,
                head,
                max_layer,
                list(kinds.values()),
                tensors,
                copy,
                max_dense,
                max_expert,
            )
        )
    return out
