"""Which FSDP2 unit holds the routed experts (issue 31, :mod:`mlite.mesh.fsdp_units`): the rule on rank layouts,
and the lite runtime on 1, 2 and 4 CPU ranks (the session's shared groups) built with the rule and with the
experts forced into units of their own (the layout before): unit counts, collectives per micro-batch, loss,
gradients and the updated weights bitwise equal, and the largest block unit equal to the memory estimator's."""

from __future__ import annotations

import itertools

import pytest
from runtime_workers import mesh_config, shares_group, synthetic_microbatches, worker_name

from mlite.memory import TrainingOptions, estimate
from mlite.memory.lite import unit_transient
from mlite.memory.params import stage_params
from mlite.mesh import ParallelConfig, RankLayout, resolve
from mlite.mesh.fsdp_units import experts_share_block_unit, largest_block_unit
from mlite.models import from_hf_config

MESHES = {1: [{}], 2: [{}, {"ep": 2}, {"tp": 2}], 4: [{"tp": 2, "ep": 2}]}
"""Meshes per world size: shared (EP = TP), own expert units (EP != TP)."""


def test_experts_share_the_block_unit_exactly_when_ep_equals_tp():
    """Megatron-Core's rank order (TP fastest, then CP, DP; ETP = 1, then EP, EDP): an EDP group is a DP x CP
    group iff EP = TP, for every split of up to 16 ranks."""
    seen = set()
    for tp, cp, ep, world in itertools.product((1, 2, 4), (1, 2), (1, 2, 4, 8), (1, 2, 4, 8, 16)):
        if world % (tp * cp) or world % ep:
            continue
        lay = RankLayout(tp=tp, cp=cp, dp=world // (tp * cp), pp=1, ep=ep, etp=1, edp=world // ep)
        shared = experts_share_block_unit(lay)
        assert shared == (ep == tp), (tp, cp, ep, world)
        seen.add(shared)
    assert seen == {True, False}


@shares_group
def _units_worker(rank: int, world: int) -> dict:
    import torch.distributed as dist
    from torch.distributed.fsdp import FSDPModule

    from mlite.runtime.fsdp import expert_modules
    from mlite.runtime.optim import backends
    from mlite.runtime.runtime import create_runtime

    out: dict = {}
    for par in MESHES.get(world, []):
        runs = {}
        for mode in ("rule", "own"):
            rule = backends.experts_own_unit
            if mode == "own":  # the layout before issue 31: every experts module its own unit
                backends.experts_own_unit = lambda pstate: True
            try:
                rt = create_runtime(mesh_config("tiny-moe", par, param_dtype="fp32", clip_grad=0.0))
                h = rt.build_model()
            finally:
                backends.experts_own_unit = rule
            units = [m for m in h.model.modules() if isinstance(m, FSDPModule) and m is not h.model]
            sizes = [
                sum(fp._orig_size.numel() for fp in m._get_fsdp_state()._fsdp_param_group.fsdp_params) for m in units
            ]
            calls = {"all_gather_single": 0, "reduce_scatter_single": 0}
            saved = {k: getattr(dist, k) for k in calls}

            def counted(k, calls=calls, orig=saved):
                def f(*a, **kw):
                    calls[k] += 1
                    return orig[k](*a, **kw)

                return f

            for k in calls:
                setattr(dist, k, counted(k))
            try:
                m = rt.forward_backward(h, synthetic_microbatches(0, rt.pstate.dp_rank, num_microbatches=2))
            finally:
                for k, orig_fn in saved.items():
                    setattr(dist, k, orig_fn)
            grads = {n: p.grad.full_tensor() for n, p in h.model.named_parameters()}
            ok, norm, _ = rt.optimizer_step(h)
            runs[mode] = {
                "own_units": backends.experts_own_unit(rt.pstate) if mode == "rule" else True,
                "units": len(units) + 1,
                "blocks": len(h.model.blocks),
                "experts": len(expert_modules(h.model)),
                "largest_unit": max(sizes),
                "calls": dict(calls),
                "loss": m["loss"],
                "norm": float(norm),
                "ok": ok,
                "grads": grads,
                "params": {n: p.full_tensor() for n, p in h.model.named_parameters()},
            }
        out[str(par)] = runs
    return out


@pytest.fixture(scope="module")
def units(shared_groups):
    return {w: [r[worker_name(_units_worker)] for r in shared_groups[w]] for w in MESHES}


@pytest.mark.slow
@pytest.mark.parametrize("world, par", [(w, p) for w, ps in MESHES.items() for p in ps])
def test_unit_layout_changes_nothing_but_the_units(units, world, par):
    import torch

    spec = from_hf_config("tiny-moe")
    for r in units[world]:
        rule, own = r[str(par)]["rule"], r[str(par)]["own"]
        shared = par.get("ep", 1) == par.get("tp", 1)
        assert rule["own_units"] is not shared
        assert rule["experts"] == own["experts"] > 0
        assert own["units"] == own["blocks"] + own["experts"] + 1
        assert rule["units"] == rule["blocks"] + 1 + (0 if shared else rule["experts"])
        if shared and world // par.get("tp", 1) > 1:  # DP x CP > 1 (FSDP2 skips the collective on one rank)
            for run, n in ((rule, rule["blocks"]), (own, own["blocks"] + own["experts"])):
                # one reduce-scatter per unit and micro-batch (2), the root's included
                assert run["calls"]["reduce_scatter_single"] == 2 * (n + 1)
            assert rule["calls"]["all_gather_single"] < own["calls"]["all_gather_single"]
        # the same numbers, to the bit: the same ranks reduce the same gradients in the same order
        assert rule["loss"] == own["loss"] and rule["norm"] == own["norm"] and rule["ok"] and own["ok"]
        for n, g in own["grads"].items():
            assert torch.equal(rule["grads"][n], g), n
            assert torch.equal(rule["params"][n], own["params"][n]), n
        if par.get("tp", 1) == 1:  # the estimator's unit (local = global numel without TP)
            plan = resolve(spec, world, ParallelConfig(**par))
            sp = stage_params(spec, plan)[0]
            for run, sh in ((rule, shared), (own, False)):
                assert run["largest_unit"] == largest_block_unit(
                    sp.max_layer, sp.max_layer_dense, sp.max_layer_expert, sh
                )
            if world == 1:  # the lite estimate's FSDP2 unit gather is the runtime's unit
                o = TrainingOptions(optimizer="fsdp2", activation_model="lite", framework_overhead_gib=0)
                est = estimate(spec, plan, o)
                assert est.worst.transients["fsdp2_unit"] == unit_transient(rule["largest_unit"], 1)
                assert rule["largest_unit"] > own["largest_unit"]  # whole layer vs its larger part
