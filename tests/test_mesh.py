"""Mesh planner: rank groups vs Megatron-Core's RankGenerator, every validity rule, layouts, CLI contract."""

from __future__ import annotations

import random
import re
import warnings

import pytest
from conftest import assert_one_line_error, run_cli

from mlite.errors import MliteError
from mlite.mesh import ParallelConfig, RankLayout, enumerate_meshes, parse_layout, resolve
from mlite.mesh.layout import auto_layout, layout_text
from mlite.models import from_hf_config

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from megatron.core.parallel_state import RankGenerator


def _random_meshes(n, seed=0):
    rng = random.Random(seed)
    out = []
    while len(out) < n:
        tp, cp, dp, pp = (rng.choice([1, 2, 3, 4, 8]) for _ in range(4))
        world = tp * cp * dp * pp
        if world > 512:
            continue
        # expert side: any ETP x EP dividing world / pp
        rest = world // pp
        divs = [d for d in range(1, rest + 1) if rest % d == 0]
        etp = rng.choice(divs)
        ep = rng.choice([d for d in divs if (rest // etp) % d == 0])
        edp = rest // (etp * ep)
        out.append(dict(tp=tp, cp=cp, dp=dp, pp=pp, etp=etp, ep=ep, edp=edp))
    return out


@pytest.mark.parametrize(
    "m", _random_meshes(300), ids=lambda m: "tp{tp}cp{cp}dp{dp}pp{pp}-etp{etp}ep{ep}edp{edp}".format(**m)
)
def test_groups_equal_rank_generator(m):
    lay = RankLayout(**m)
    dense = RankGenerator(tp=m["tp"], ep=1, dp=m["dp"], pp=m["pp"], cp=m["cp"], order="tp-cp-ep-dp-pp")
    expert = RankGenerator(tp=m["etp"], ep=m["ep"], dp=m["edp"], pp=m["pp"], cp=1, order="tp-cp-ep-dp-pp")
    for kind, (gen, token) in {
        "tp": (dense, "tp"),
        "cp": (dense, "cp"),
        "dp": (dense, "dp"),
        "pp": (dense, "pp"),
        "dp_cp": (dense, "dp-cp"),
        "tp_cp": (dense, "tp-cp"),
        "mp": (dense, "tp-pp"),
        "ep": (expert, "ep"),
        "etp": (expert, "tp"),
        "edp": (expert, "dp"),
        "ep_etp": (expert, "tp-ep"),
    }.items():
        want = sorted(sorted(g) for g in gen.get_ranks(token))
        assert lay.groups(kind) == want, kind
    # coordinates round-trip and the documented formula
    for r in range(lay.world):
        c = lay.coords(r)
        assert r == ((c["pp"] * m["dp"] + c["dp"]) * m["cp"] + c["cp"]) * m["tp"] + c["tp"]
        e = lay.coords(r, "expert")
        assert r == ((e["pp"] * m["edp"] + e["edp"]) * m["ep"] + e["ep"]) * m["etp"] + e["etp"]


def _rules(plan, level="error"):
    return {f.rule for f in plan.findings if f.level == level}


Q30 = from_hf_config("Qwen3-30B-A3B")  # 32 heads, 4 KV heads, 128 experts, 48 layers
Q35 = from_hf_config("Qwen3.5-35B-A3B")  # GDN 16 key / 32 value heads, 40 layers, 1 MTP
DSV3 = from_hf_config("DeepSeek-V3")  # 61 layers + 1 MTP
V4 = from_hf_config("DeepSeek-V4-Flash")
L8 = from_hf_config("Llama-3.1-8B")  # dense, 8 KV heads, 32 layers, FFN 14336


@pytest.mark.parametrize(
    "spec, ngpu, bad, good, rule",
    [
        (Q30, 32, dict(tp=3), dict(tp=4), "world"),
        (Q30, 24, dict(ep=16), dict(ep=8), "world"),
        (Q30, 32, dict(tp=16), dict(tp=4), "heads"),  # 32 heads ok, 4 KV heads not divisible by 16
        (L8, 48, dict(tp=3), dict(tp=2), "heads"),
        (Q35, 64, dict(tp=32), dict(tp=2), "gdn_heads"),  # 16 key heads
        (Q30, 96, dict(ep=3), dict(ep=4), "experts"),
        (L8, 8, dict(ep=2), dict(ep=1), "experts"),  # dense model
        (L8, 40, dict(tp=5), dict(tp=4), "heads"),
        (Q30, 16, dict(pp=5), dict(pp=4), "layers"),
        (Q30, 16, dict(pp=2, vpp=5), dict(pp=2, vpp=4), "layers"),
        (Q30, 8, dict(vpp=2), dict(pp=2, vpp=2), "vpp"),
        (Q30, 16, dict(cp=16), dict(cp=8), "seq_len"),
        (V4, 16, dict(tp=2), dict(tp=1), "deepseek_v4"),
        (DSV3, 64, dict(pp=8), dict(pp=8, pp_layout="E,t*7|t*8|t*8|t*8|t*8|t*8|t*8|t*6,m,L"), "layers"),
        (DSV3, 64, dict(pp=2, pp_layout="E,t*30|t*30,m,L"), dict(pp=2, pp_layout="E,t*30|t*31,m,L"), "layers"),
    ],
)
def test_each_rule_has_invalid_and_valid_case(spec, ngpu, bad, good, rule):
    seq = 4096 if rule != "seq_len" else 4112  # 4112 = 16 * 257: divisible by 2*8, not by 2*16
    b = resolve(spec, ngpu, ParallelConfig(**bad), seq_len=seq)
    g = resolve(spec, ngpu, ParallelConfig(**good), seq_len=seq)
    assert rule in _rules(b), [f.message for f in b.findings]
    assert rule not in _rules(g), [f.message for f in g.findings]


def test_ffn_rules():
    dense = from_hf_config(dict(from_hf_config("tiny-dense").config, intermediate_size=100))
    b = resolve(dense, 8, ParallelConfig(tp=8))
    assert "ffn" in _rules(b) and "dense FFN width 100" in b.errors[-1].message
    moe = from_hf_config(dict(from_hf_config("tiny-moe").config, moe_intermediate_size=30))
    b = resolve(moe, 8, ParallelConfig(etp=4))
    assert any(f.rule == "ffn" and "ETP 4" in f.message for f in b.errors)
    assert resolve(moe, 8, ParallelConfig(etp=2)).valid


def test_messages_name_numbers_and_nearest_values():
    plan = resolve(Q30, 32, ParallelConfig(tp=16))
    (err,) = plan.errors
    assert "num_key_value_heads (query groups) 4" in err.message and "TP 16" in err.message
    assert err.nearest == (4,) and "nearest valid tp: 4" in err.message
    plan = resolve(DSV3, 64, ParallelConfig(pp=8))
    msg = plan.errors[0].message
    assert "61 layers" in msg and "--pp-layout" in msg


def test_warnings():
    plan = resolve(Q30, 32, ParallelConfig(tp=16, ep=1), gpus_per_node=8)
    assert "tp_span" in _rules(plan, "warning")
    plan = resolve(Q30, 64, ParallelConfig(ep=16), gpus_per_node=8)
    assert plan.valid and "ep_span" in _rules(plan, "warning")
    # verl launcher rule vs runtime rule: agree when CP == EP, disagree otherwise
    agree = resolve(Q35, 8, ParallelConfig(cp=8, ep=8))
    assert agree.valid and "launcher_rule" not in _rules(agree, "warning")
    disagree = resolve(Q30, 32, ParallelConfig(cp=2, ep=8))
    w = next(f.message for f in disagree.warnings if f.rule == "launcher_rule")
    assert "gives DP 4," in w and "gives DP 16 " in w  # 32/(1*8) vs 32/(1*2*1)
    # TP2 EP8 on 8 GPUs: verl's rule 8/(2*8) does not divide: said so, never "DP 0.5"
    odd = resolve(Q30, 8, ParallelConfig(tp=2, ep=8))
    w = next(f.message for f in odd.warnings if f.rule == "launcher_rule")
    assert "does not divide (ngpu/PP = 8 is not a multiple of TP*EP = 16)" in w and "gives DP 4 " in w
    assert not re.search(r"DP \d*\.\d", w), w


def test_vocab_padding_reported():
    plan = resolve(Q30, 8, ParallelConfig(tp=4))
    assert plan.padded_vocab == 152064 and plan.padded_vocab % 512 == 0
    assert any(f.rule == "vocab" and "151936 to 152064" in f.message for f in plan.infos)
    assert resolve(L8, 8, ParallelConfig(tp=2)).padded_vocab == 128256  # already a multiple of 256


def test_dp_edp_accounting():
    plan = resolve(Q30, 64, ParallelConfig(tp=2, cp=2, pp=2, ep=8, etp=1))
    assert (plan.dp, plan.edp) == (8, 4)
    assert plan.parallel.tp * plan.parallel.cp * plan.dp * plan.parallel.pp == 64
    assert plan.parallel.etp_size * plan.parallel.ep * plan.edp * plan.parallel.pp == 64


def test_layouts():
    stages = parse_layout("E|t*5|t*6|t,m,L", 12, 1)
    assert [len(s.layers) for s in stages] == [0, 5, 6, 1] and stages[-1].mtp == (0,) and stages[-1].head
    assert layout_text(parse_layout(layout_text(stages), 12, 1)) == layout_text(stages)
    assert [len(s.layers) for s in parse_layout("Et*2|(t*3|)*2t,L", 9, 0)] == [2, 3, 3, 1]
    for bad, needle in [
        ("E|t*5|t*6|t,m", "loss L"),
        ("t*12,m,L", "embedding E"),
        ("E|t*4|q,L", "'q'"),
        ("E|t*5|t*5,m,L", "10 transformer layers"),
    ]:
        with pytest.raises(MliteError, match=needle):
            parse_layout(bad, 12, 1)
    for L, S in [(61, 8), (61, 4), (94, 16), (5, 5)]:
        st = auto_layout(L, 1, S)
        assert sum(len(s.layers) for s in st) == L and len(st) == S
        sizes = [len(s.layers) for s in st]
        assert max(sizes) - min(sizes) <= 2 and sizes[0] <= max(sizes) and sizes[-1] <= max(sizes)
        assert all(sizes[1:-1])
    plan = resolve(Q30, 16, ParallelConfig(pp=4, vpp=2))
    assert plan.valid and len(plan.stages) == 8
    assert [s.index for s in plan.stage_of_rank(1)] == [1, 5]


def test_enumerate_all_valid_and_ranked():
    meshes = enumerate_meshes(Q30, 16)
    assert meshes and all(m.plan.valid for m in meshes)
    keys = {
        (
            m.plan.parallel.tp,
            m.plan.parallel.pp,
            m.plan.parallel.vpp,
            m.plan.parallel.cp,
            m.plan.parallel.ep,
            m.plan.parallel.etp_size,
        )
        for m in meshes
    }
    assert len(keys) == len(meshes)
    # brute force over a box: every valid mesh appears
    for tp in (1, 2, 4, 8, 16):
        for pp in (1, 2, 4, 8, 16):
            for cp in (1, 2, 4):
                for ep in (1, 2, 4, 8, 16):
                    plan = resolve(Q30, 16, ParallelConfig(tp=tp, pp=pp, cp=cp, ep=ep), auto_uneven=True)
                    assert plan.valid == ((tp, pp, 1, cp, ep, 1) in keys), (tp, pp, cp, ep)
    scores = [m.score for m in meshes]
    assert scores == sorted(scores)
    # with a memory verdict, meshes that fit come first
    ranked = enumerate_meshes(Q30, 16, fits=lambda p: p.parallel.ep >= 8)
    flags = [m.fits for m in ranked]
    assert flags == sorted(flags, reverse=True) and flags[0] is True


def test_meshes_that_do_not_fit_rank_by_their_memory():
    """A mesh that does not fit is ranked by how much memory it needs, not by its score (issue 30: a 1 T model's
    list opened with TP1/PP1/EP8, 912 GiB per GPU)."""
    need = lambda p: 1000 // (p.parallel.tp * p.parallel.pp * p.parallel.ep)  # a stand-in per-GPU figure
    ranked = enumerate_meshes(Q30, 16, fits=lambda p: (need(p) <= 40, {"total_bytes": need(p)}))
    fit = [m for m in ranked if m.fits]
    over = [m.extra["total_bytes"] for m in ranked if not m.fits]
    assert fit and over and ranked[: len(fit)] == fit
    assert [m.score for m in fit] == sorted(m.score for m in fit)
    assert over == sorted(over) and over[0] < over[-1]


def test_cli_list_with_gpu_memory_puts_the_meshes_that_fit_first():
    from mlite.memory import TrainingOptions, estimate

    kimi = from_hf_config("Kimi-K2-Instruct")
    plain = run_cli("mesh", "Kimi-K2-Instruct", "--ngpu", "256", "--list", "--limit", "3")
    assert plain.rc == 0 and "--gpu-mem ranks the meshes that fit first" in plain.out.splitlines()[0]
    res = run_cli("mesh", "Kimi-K2-Instruct", "--ngpu", "256", "--list", "--gpu-mem", "H200", "--json")
    assert res.rc == 0, res.err
    meshes = res.json()["meshes"]
    flags = [m["fits"] for m in meshes]
    assert flags[0] is True and flags == sorted(flags, reverse=True) and False in flags
    first = meshes[0]
    cfg = ParallelConfig(**{k: first[k] for k in ("tp", "pp", "vpp", "cp", "ep", "etp")})
    est = estimate(kimi, resolve(kimi, 256, cfg, auto_uneven=True), TrainingOptions(gpu_memory_gib=141.0))
    assert est.fits and round(est.worst.total) == first["total_bytes"]
    # the score's favourite (TP 1, PP 1) does not fit a 1 T model on 141 GiB, and is not first
    top = enumerate_meshes(kimi, 256)[0].plan.parallel
    assert (first["tp"], first["pp"]) != (top.tp, top.pp)
    text = run_cli("mesh", "Kimi-K2-Instruct", "--ngpu", "256", "--list", "--gpu-mem", "H200", "--limit", "2")
    lines = text.out.splitlines()
    assert text.rc == 0 and "fit in 141 GiB" in lines[0] and "GiB/GPU" in lines[1] and lines[2].split()[-2] == "yes"
    bad = run_cli("mesh", "Kimi-K2-Instruct", "--ngpu", "256", "--list", "--gpu-mem", "lots")
    assert_one_line_error(bad, "--gpu-mem")


def test_enumerate_uneven_for_prime_layer_count():
    meshes = enumerate_meshes(DSV3, 64)
    uneven = [m for m in meshes if m.plan.layout_source == "auto"]
    assert uneven and all(m.plan.parallel.pp > 1 for m in uneven)
    assert any(m.plan.parallel.pp == 8 for m in uneven)


def test_cli_contract():
    res = run_cli(
        "mesh", "Qwen3-30B-A3B", "--ngpu", "32", "--tp", "2", "--cp", "2", "--ep", "8", "--rank", "5", "--json"
    )
    assert res.rc == 0, res.err
    doc = res.json()
    for k in ("valid", "errors", "warnings", "tp", "pp", "vpp", "cp", "ep", "etp", "dp", "edp", "groups"):
        assert k in doc
    assert doc["valid"] is True and doc["dp"] == 8 and doc["edp"] == 4 and doc["etp"] == 1
    assert set(doc["groups"]) == {"tp", "cp", "dp", "pp", "dp_cp", "ep", "etp", "edp"}
    assert doc["groups"]["tp"] == [4, 5] and doc["groups"]["cp"] == [5, 7]
    assert doc["groups"]["ep"] == list(range(8))
    bad = run_cli("mesh", "Qwen3-30B-A3B", "--ngpu", "32", "--tp", "3", "--json")
    assert bad.rc == 1 and bad.json()["valid"] is False and bad.json()["errors"]
    lst = run_cli("mesh", "Qwen3.5-35B-A3B", "--ngpu", "8", "--list", "--json")
    assert lst.rc == 0 and isinstance(lst.json()["meshes"], list) and lst.json()["meshes"][0]["valid"]


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--ngpu", "8", "--tp", "x"], "--tp"),
        (["--ngpu", "0"], "ngpu"),
        (["--ngpu", "8", "--tp", "0"], "tp must be a positive"),
        (["--ngpu", "8", "--rank", "9"], "--rank 9"),
        (["--ngpu", "8", "--seq-len", "0"], "--seq-len must be a positive integer, got 0"),
        (["--ngpu", "8", "--gpus-per-node", "-1"], "--gpus-per-node must be a positive integer, got -1"),
    ],
)
def test_cli_bad_usage(args, needle):
    res = run_cli("mesh", "Qwen3-8B", *args)
    assert_one_line_error(res, needle)
    other = {"--seq-len": "--gpus-per-node", "--gpus-per-node": "--seq-len"}.get(args[2] if len(args) > 2 else "")
    assert other is None or other not in res.err  # the line names the flag that is wrong, not its neighbour


@pytest.mark.slow
def test_build_device_mesh_on_cpu():
    """The groups follow Megatron-Core's rank order; a second runtime on the same layout gets the same meshes (no new
    process groups, no new threads), another layout its own, and a new default group new meshes."""
    from mlite.runtime.dist import run_local

    lay = RankLayout(tp=2, cp=1, dp=2, pp=1, ep=2, etp=1, edp=2)
    for r, d in enumerate(run_local(_device_mesh_worker, 4)):
        assert d["tp"] == lay.group("tp", r) and d["dp_cp"] == lay.group("dp_cp", r)
        assert d["ep"] == lay.group("ep", r) and d["edp"] == lay.group("edp", r)
        assert d["same_layout_same_meshes"] and d["other_layout_other_meshes"]
        assert d["threads_after_10_more"] == d["threads_after_first"]
        assert d["new_default_group_new_meshes"] and d["new_groups_work"] == 4.0


def _device_mesh_worker(rank, world):
    import os

    import torch
    import torch.distributed as dist

    from mlite.mesh import build_device_mesh
    from mlite.runtime.dist import destroy_distributed, free_port, init_distributed

    m = build_device_mesh(ParallelConfig(tp=2, ep=2), world, "cpu")
    out = {
        "tp": dist.get_process_group_ranks(m.dense["tp"].get_group()),
        "dp_cp": dist.get_process_group_ranks(m.dense["dp_cp"].get_group()),
        "ep": dist.get_process_group_ranks(m.expert["ep"].get_group()),
        "edp": dist.get_process_group_ranks(m.expert["edp"].get_group()),
    }
    out = {k: sorted(v) for k, v in out.items()}
    out["threads_after_first"] = len(os.listdir("/proc/self/task"))
    again = [build_device_mesh(ParallelConfig(tp=2, ep=2), world, "cpu") for _ in range(10)]
    out["threads_after_10_more"] = len(os.listdir("/proc/self/task"))
    out["same_layout_same_meshes"] = all(a is m for a in again)
    out["other_layout_other_meshes"] = build_device_mesh(ParallelConfig(ep=4), world, "cpu") is not m
    port = [free_port() if rank == 0 else 0]  # rank 0's store of the next group: a port free now, known to all
    dist.broadcast_object_list(port, src=0)
    destroy_distributed()
    os.environ["MASTER_PORT"] = str(port[0])
    init_distributed("cpu")
    fresh = build_device_mesh(ParallelConfig(tp=2, ep=2), world, "cpu")
    out["new_default_group_new_meshes"] = fresh is not m
    x = torch.ones(1)
    dist.all_reduce(x, group=fresh.dense["dp_cp"].get_group())
    dist.all_reduce(x, group=fresh.dense["tp"].get_group())
    out["new_groups_work"] = x.item()
    return out
