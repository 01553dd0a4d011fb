"""The whole-mesh table's fast paths against the reference paths.

* :class:`mlite.mesh.resolve_many.Resolver` (each rule's findings memoised by the sizes it reads) against
  :func:`mlite.mesh.resolve` on every planner candidate and on a grid of meshes most of which the rules refuse
  (world sizes that do not divide, heads, experts, FFN, VPP, layers, sequence length, the models' own rules), for
  several models, GPU counts and sequence lengths: the same ``to_dict()`` (every finding: rule, level, message,
  fixes), stages, DP and EDP.
* :func:`mlite.memory.mesh_table` against the table built the reference way (``resolve`` per candidate, the
  reference ``estimate`` per mesh, sorted by :func:`mlite.mesh.enumerate.rank_key`): the same meshes in the same
  order with the same ``to_dict()``.
"""

from __future__ import annotations

import itertools

import pytest

from mlite.errors import MliteError
from mlite.memory import TrainingOptions, estimate, mesh_table
from mlite.mesh import ParallelConfig, resolve
from mlite.mesh.enumerate import RankedMesh, candidate_configs, mesh_score, rank_key
from mlite.mesh.resolve_many import Resolver
from mlite.models import from_hf_config
from mlite.options.rules import precision_mesh

CASES = [  # model, GPU count, sequence length: MLA MoE, GQA MoE, dense, Gated DeltaNet, the models' own rules
    ("Kimi-K2-Instruct", 256, 4096),
    ("Qwen3-235B-A22B", 48, 4096),
    ("Llama-3.1-70B", 64, 6144),
    ("Qwen3-Next-80B-A3B-Thinking", 32, 4096),
    ("DeepSeek-V4-Flash", 64, 4096),
    ("DeepSeek-V4.1-Flash-derived", 32, 4096),
]

SPECS = {name: from_hf_config(name) for name, _, _ in CASES}

GRID = [  # sizes that break each rule somewhere
    ParallelConfig(tp=tp, pp=pp, vpp=vpp, cp=cp, ep=ep, etp=etp)
    for tp, pp, vpp, cp, ep, etp in itertools.product(
        (1, 2, 3, 8), (1, 2, 3, 4), (1, 2, 3), (1, 3, 4), (1, 3, 8), (1, 2, 3)
    )
]


def same_plan(got, want) -> None:
    assert got.to_dict() == want.to_dict(), (got.parallel.sizes(), got.to_dict(), want.to_dict())
    assert (got.stages, got.dp, got.edp, got.layout_source) == (want.stages, want.dp, want.edp, want.layout_source)


@pytest.mark.parametrize("name,ngpu,seq_len", CASES)
def test_resolver_equals_resolve(name, ngpu, seq_len):
    spec = SPECS[name]
    for uneven in (True, False):
        fast = Resolver(spec, ngpu, seq_len=seq_len, gpus_per_node=8, auto_uneven=uneven)
        cands = [c for c in candidate_configs(spec, ngpu, seq_len=seq_len) if (c.vpp == 1) == uneven]
        refused = 0
        for cfg in [*cands, *GRID]:  # the candidates, then the grid on the same (already taught) resolver
            want = resolve(spec, ngpu, cfg, seq_len=seq_len, gpus_per_node=8, auto_uneven=uneven)
            same_plan(fast(cfg), want)
            refused += not want.valid
        assert refused > len(GRID) // 3  # the grid reaches the refusals (their reasons compared above)
    # a resolver that meets the refused meshes first, then the candidates
    fast = Resolver(spec, ngpu + 8, seq_len=seq_len + 2)
    for cfg in [*GRID, *candidate_configs(spec, ngpu, seq_len=seq_len)]:
        same_plan(fast(cfg), resolve(spec, ngpu + 8, cfg, seq_len=seq_len + 2))


def reference_table(spec, ngpu, o):
    """The mesh table the reference way: resolve, precision_mesh and estimate per mesh, sorted by rank_key."""
    out = []
    for cfg in candidate_configs(spec, ngpu, seq_len=o.seq_len):
        plan = resolve(spec, ngpu, cfg, seq_len=o.seq_len, gpus_per_node=o.gpus_per_node, auto_uneven=cfg.vpp == 1)
        if not plan.valid:
            continue
        try:
            precision_mesh(o, plan.parallel)
        except MliteError:  # the precision profile refuses the mesh: not in the table
            continue
        est = estimate(spec, plan, o, explain=False)
        w = est.worst
        extra = {
            "total_bytes": round(w.total),
            "peak_bytes": round(w.peak),
            "static_bytes": round(w.static),
            "host_bytes": round(w.host_total),
        }
        out.append(RankedMesh(plan, mesh_score(plan, o.num_microbatches), est.fits, extra))
    out.sort(key=rank_key)
    return out


TABLES = [
    ("Kimi-K2-Instruct", 64, TrainingOptions(gpu_memory_gib=141)),
    ("Qwen3-235B-A22B", 32, TrainingOptions(optimizer="fsdp2", recompute="full", gpu_memory_gib=80)),
    ("Llama-3.1-70B", 64, TrainingOptions(optimizer="mfsdp", offload_fraction=0.5, num_microbatches=4)),
    ("DeepSeek-V4.1-Flash-derived", 16, TrainingOptions(param_offload=True, optimizer_offload=True, seq_len=8192)),
    ("Qwen3-Next-80B-A3B-Thinking", 16, TrainingOptions(precision="mxfp8_fp8_weight", optimizer="fsdp2")),
]


@pytest.mark.parametrize("name,ngpu,o", TABLES, ids=[t[0] for t in TABLES])
def test_mesh_table_equals_reference(name, ngpu, o):
    spec = from_hf_config(name)
    got, want = mesh_table(spec, ngpu, o), reference_table(spec, ngpu, o)
    assert len(got) == len(want) >= 10
    assert [m.to_dict() for m in got] == [m.to_dict() for m in want]
    assert [m.plan.to_dict() for m in got] == [m.plan.to_dict() for m in want]  # findings included ("rules")
