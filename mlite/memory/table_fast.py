"""The mesh table's estimates, many meshes of one model and option set at a time: :class:`TableEstimator`.

The whole-mesh table (:func:`mlite.memory.mesh_table`: ``mlite mesh --list --gpu-mem``, the planner's and the
memory view's tables) shows five figures per mesh, those of its most loaded pipeline rank: fits, total, peak, static
and host bytes. :func:`mlite.memory.estimate` builds the whole :class:`~mlite.memory.estimate.MemoryEstimate` (every
dict of every rank) for each mesh; this computes only those figures, with what does not depend on the mesh taken
once per table (the option set's state bytes, backend, step temporaries, framework overhead, usable memory, the
activation dimensions per TP x CP x ETP) and the Megatron activation parts of a rank (:func:`~mlite.memory.estimate.
_megatron_parts`, the costly half) memoised by what they read: the rank's layer kinds, embedding and head, its
pipeline position and the activation dimensions, so meshes that differ only in EP (or DP) share them.
What a rank's figures take from its parameters alone (params + grads + optimizer state, the step's gradient copies
and temporaries, buffer padding, host bytes) is computed once per :func:`~mlite.memory.params.stage_params` list and
shard divisors (DP x CP, EDP), shared by the meshes of one layout, PP, TP and EP x ETP.

Every number comes from the same functions, in the same order of floating-point operations, as the reference
(:func:`~mlite.memory.estimate.transient_peak`, :func:`~mlite.memory.estimate.peak_bytes`,
:func:`~mlite.memory.estimate.padding_bytes`, :func:`~mlite.memory.estimate.runtime_offload`,
``_optimizer_host``, ``_megatron_parts``, :func:`~mlite.memory.params.stage_params`), so the figures are
bit-identical to ``estimate(spec, plan, o).worst``'s; ``tests/test_table_fast.py`` holds them to it on every mesh of
several models and option sets. Option sets outside its scope (:attr:`TableEstimator.applies` False: the lite
activation model, FP8 weights, chunked optimizer-state offload, n-gram tables) go through ``estimate`` itself.
"""

from __future__ import annotations

from ..mesh import MeshPlan
from ..options import TrainingOptions
from ..options.optimizers import ALGORITHMS, BACKENDS
from ..options.precision import profile
from ..units import GIB
from .estimate import (
    _act_dims,
    _layer_cache,
    _megatron_parts,
    _optimizer_host,
    estimate,
    padding_bytes,
    pads,
    peak_bytes,
    runtime_offload,
    transient_peak,
)
from .optimizer import state_bytes
from .params import stage_params


class TableEstimator:
    """The table figures of many meshes of ``spec`` under ``training`` (module docstring)."""

    def __init__(self, spec, training: TrainingOptions):
        o = training
        self.spec, self.o = spec, o
        self.applies = (
            o.activation_model == "megatron"
            and not profile(o.precision).fp8_weights
            and not o.chunked_optimizer_state_offload
            and not spec.ngram_tables
        )
        self.sb = sb = state_bytes(o)
        self.backend = backend = BACKENDS.entry(o.optimizer)
        self.f = float(o.offload_fraction)
        self.step = ALGORITHMS.entry(o.optimizer_algorithm).step_bytes if backend.step_temporaries else None
        self.framework = o.framework_overhead_gib * GIB
        self.pad_per_elem = sb.param + sb.grad if pads(o) else 0
        self.usable = o.gpu_memory_gib * GIB * (1 - o.headroom)
        self.unit_read = backend.fp32_main_buffers or backend.unit_gather  # _megatron_parts reads sp.max_layer
        self.runtime = o.param_offload or o.optimizer_offload or o.grad_offload  # runtime_offload adds host bytes
        self._dims: dict[tuple, tuple] = {}
        self._stage_info: dict = {}
        self._pkeys: dict = {}

    def _rows(self, plan: MeshPlan) -> list[tuple]:
        """Per pipeline rank of ``plan``, what does not depend on CP or ETP apart (only on the :func:`stage_params` list,
        shared by the meshes of one layout, PP, TP and EP x ETP, and on the shard divisors DP x CP and EDP):
        ``(params + grads + state, step_grads, {optimizer_step}, other, host_total, parts key, StageParams)``, each
        computed as :func:`~mlite.memory.estimate.estimate` computes it."""
        p = plan.parallel
        key = (p.pp, p.vpp, p.tp, p.ep * p.etp_size, plan.dp * p.cp, plan.edp, plan.padded_vocab, *map(id, plan.stages))
        hit = self._stage_info.get(key)  # the entry holds the stages, so their ids are theirs while it lives
        if hit is not None:
            return hit[1]
        spec, o, sb, backend, f = self.spec, self.o, self.sb, self.backend, self.f
        d_dense = plan.dp * p.cp if sb.shard_optimizer else 1
        d_exp = plan.edp if sb.shard_optimizer else 1
        owners = plan.dp * p.cp
        stages = stage_params(spec, plan)
        vocab_local = plan.padded_vocab / p.tp
        step = self.step
        rows = []
        for sp in stages:
            local = sp.total
            kinds = tuple((id(layer), n) for layer, n in sp.layer_kinds)
            shard = sp.dense / d_dense + sp.expert / d_exp
            held = shard if sb.params_sharded else local
            params = held * sb.param
            grads = held * sb.grad
            kept = (1 - f) * shard  # estimate's ((1 - f) * shard * x for x in ...), the same products
            master, m, v = kept * sb.master, kept * sb.exp_avg, kept * sb.exp_avg_sq
            unit = sp.max_layer if self.unit_read else None
            pkey = (p.pp, p.vpp, sp.pp_rank, kinds, sp.has_embedding, sp.has_head, vocab_local, unit)
            pkey = self._pkeys.setdefault(pkey, len(self._pkeys))  # a small int: hashed once
            step_t = {} if step is None else {"optimizer_step": step * (1 - f) * shard}  # never in parts' dict
            other = self.framework
            if self.pad_per_elem:
                pad = padding_bytes(sp.tensors, local, owners, self.pad_per_elem)
                if pad:
                    other = 0 + other + pad  # sum(other.values()), as RankMemory adds them
            state = master + m + v
            host = _optimizer_host(o, sb, backend, shard, f, None) if f else {}
            if self.runtime:
                runtime_offload(o, backend, host, 0.0, params, grads, state, 0.0)
            step_grads = kept * sb.step_grad_copy
            rows.append((params + grads + state, step_grads, step_t, other, sum(host.values()), pkey, sp))
        self._stage_info[key] = (tuple(plan.stages), rows)
        return rows

    def figures(self, plan: MeshPlan) -> tuple[bool, float, float, float, float]:
        """``(fits, total, peak, static, host_total)`` of the most loaded rank, as ``estimate(spec, plan, o)``
        gives them (``fits``; ``worst.total``, ``.peak``, ``.static``, ``.host_total``)."""
        if not self.applies:
            est = estimate(self.spec, plan, self.o, explain=False)
            w = est.worst
            return est.fits, w.total, w.peak, w.static, w.host_total
        p = plan.parallel
        dkey = (p.tp, p.cp, p.etp_size)
        hit = self._dims.get(dkey)
        if hit is None:
            dims = _act_dims(self.spec, plan, self.o)
            hit = self._dims[dkey] = (dims, _layer_cache(self.spec, dims), {})
        dims, cache, memo = (
            hit[0],
            hit[1],
            hit[2],
        )  # memo: the Megatron activation parts of a rank per parts key, for these dims
        best = None
        for state, step_grads, step_t, other, host_total, pkey, sp in self._rows(plan):
            parts = memo.get(pkey)
            if parts is None:
                vocab_local = plan.padded_vocab / p.tp
                acts, trans, persistent = _megatron_parts(
                    self.spec, plan, self.o, sp, cache, dims, vocab_local, self.sb
                )
                parts = memo[pkey] = (sum(acts.values()), transient_peak(trans, False), sum(persistent.values()))
            act_total, peak_t, persist = parts
            static = state + persist + step_grads  # params + grads + state + persist + step_grads, left to right
            peak = peak_bytes(static, step_grads, 0.0, act_total, peak_t, step_t)
            total = peak + other
            if best is None or total > best[0]:
                best = (total, peak, static, host_total)
        assert best is not None, "a valid mesh has at least one pipeline rank"
        total, peak, static, host_total = best
        return total <= self.usable, total, peak, static, host_total
