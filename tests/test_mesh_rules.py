"""Each mesh rule of :data:`mlite.mesh.checks.RULES` alone: a mesh it flags, one it passes, and its fixes (dicts of
fields -> values) applied to the mesh clear the finding. Model numbers come from the configs in data/models/."""

from __future__ import annotations

import dataclasses

import pytest

from mlite.mesh import ParallelConfig, fix_label, resolve
from mlite.mesh import checks as C
from mlite.mesh.checks import Inherited, MeshContext
from mlite.models import from_hf_config

Q30 = from_hf_config("Qwen3-30B-A3B")  # 32 heads, 4 KV heads, 128 experts, 48 layers, expert FFN 768
Q35 = from_hf_config("Qwen3.5-35B-A3B")  # GDN 16 key / 32 value heads, 40 layers, 1 MTP
DSV3 = from_hf_config("DeepSeek-V3")  # 61 layers + 1 MTP
V4 = from_hf_config("DeepSeek-V4-Flash")
L8 = from_hf_config("Llama-3.1-8B")  # dense, 8 KV heads, 32 layers, FFN 14336, vocab 128256
TINY = from_hf_config(dict(from_hf_config("tiny-dense").config, intermediate_size=100))


def ctx(spec, ngpu, seq_len=4096, gpus_per_node=8, inherited=None, train_mtp=None, **mesh):
    return MeshContext(
        spec=spec,
        ngpu=ngpu,
        parallel=ParallelConfig(**mesh),
        seq_len=seq_len,
        gpus_per_node=gpus_per_node,
        inherited=inherited or {},
        train_mtp=train_mtp,
    )


# rule, level, bad context, good context
CASES = [
    (C.rule_world_dense, "error", ctx(Q30, 32, tp=3), ctx(Q30, 32, tp=4)),
    (C.rule_world_expert, "error", ctx(Q30, 24, ep=16), ctx(Q30, 24, ep=8)),
    (C.rule_heads, "error", ctx(Q30, 32, tp=16), ctx(Q30, 32, tp=4)),
    (C.rule_gdn_heads, "error", ctx(Q35, 64, tp=32), ctx(Q35, 64, tp=2)),
    (C.rule_experts, "error", ctx(Q30, 96, ep=3), ctx(Q30, 96, ep=4)),
    (C.rule_ffn, "error", ctx(TINY, 8, tp=8), ctx(TINY, 8, tp=2)),
    (C.rule_model, "error", ctx(V4, 16, tp=2), ctx(V4, 16, tp=1)),  # DeepSeek-V4's own rule (mesh_rules.json)
    (C.rule_vpp, "error", ctx(Q30, 8, vpp=2), ctx(Q30, 8, pp=2, vpp=2)),
    (C.rule_layers, "error", ctx(Q30, 16, pp=5), ctx(Q30, 16, pp=4)),
    (C.rule_seq_len, "error", ctx(Q30, 16, cp=16, seq_len=4112), ctx(Q30, 16, cp=8, seq_len=4112)),
    (C.rule_tp_span, "warning", ctx(Q30, 32, tp=16), ctx(Q30, 32, tp=8)),
    (C.rule_ep_span, "warning", ctx(Q30, 64, ep=16), ctx(Q30, 64, ep=8)),
    (C.rule_launcher_rule, "warning", ctx(Q30, 32, cp=2, ep=8), ctx(Q30, 32, cp=8, ep=8)),
    (C.rule_sequence_parallel, "warning", ctx(Q30, 8, tp=2), ctx(L8, 8, tp=2)),
    (C.rule_gdn_cp, "warning", ctx(Q35, 8, cp=2), ctx(Q35, 8, cp=1)),
    (C.rule_vocab, "info", ctx(Q30, 8, tp=4), ctx(L8, 8, tp=2)),
    (C.rule_mtp, "info", ctx(DSV3, 64, pp=2, train_mtp=False), ctx(DSV3, 64, pp=2)),
    (
        C.rule_inherited,
        "info",
        ctx(Q30, 8, tp=4, etp=4, inherited={"etp": Inherited("ETP inherited from TP = 4")}),
        ctx(Q30, 8, tp=4, etp=4),
    ),
]


def test_every_rule_has_a_case():
    assert {c[0] for c in CASES} == set(C.RULES)


@pytest.mark.parametrize("rule, level, bad, good", CASES, ids=[c[0].__name__ for c in CASES])
def test_rule_alone(rule, level, bad, good):
    found = rule(bad)
    assert found and {f.level for f in found} == {level}, found
    assert rule(good) == []
    for f in found:
        for fix in f.fixes:  # each fix, applied, clears this rule
            fixed = dataclasses.replace(
                bad,
                parallel=dataclasses.replace(
                    bad.parallel,
                    **{k: v for k, v in fix.items() if k in ("tp", "pp", "vpp", "cp", "ep", "etp", "pp_layout")},
                ),
                **{k: v for k, v in fix.items() if k in ("ngpu", "seq_len")},
            )
            assert not [g for g in rule(fixed) if g.level == "error"], (fix, rule(fixed))


def test_two_field_fixes_are_one_dict():
    (f,) = C.rule_model(ctx(V4, 16, tp=2, etp=2))
    assert f.fixes == ({"tp": 1, "etp": 1},) and fix_label(f.fixes[0]) == "tp = etp = 1"
    (f,) = C.rule_experts(ctx(L8, 8, ep=2, etp=2))
    assert f.fixes == ({"ep": 1, "etp": 1},) and fix_label(f.fixes[0]) == "ep = etp = 1"
    (f,) = C.rule_layers(ctx(DSV3, 64, pp=8))
    assert f.fixes[-1] == {"pp_layout": "E,t*7|t*8|t*8|t*8|t*8|t*8|t*8|t*6,m,L"}
    assert fix_label(f.fixes[-1]) == "uneven layout" and fix_label({"pp_layout": ""}) == "clear pp_layout"


def test_dense_model_is_not_held_to_expert_rules():
    # ETP 2 on a dense model (Megatron-Core's ETP = TP): no expert rule fires, as long as ETP*EP*PP divides
    plan = resolve(L8, 16, ParallelConfig(tp=2, etp=2))
    assert plan.valid and (plan.dp, plan.edp) == (8, 8)
    bad = resolve(L8, 8, ParallelConfig(tp=2, pp=2, etp=8))  # 8 % (8*1*2): the expert world rule still holds
    assert [f.rule for f in bad.errors] == ["world"]


def test_inherited_size_is_explained_in_the_error():
    key = "actor_rollout_ref.actor.megatron.expert_tensor_parallel_size"
    inh = {
        "etp": Inherited("ETP inherited from TP = 4 because the launcher does not set expert_tensor_parallel_size", key)
    }
    plan = resolve(Q30, 8, ParallelConfig(tp=4, pp=2, ep=2, etp=4), inherited=inh)
    (err,) = plan.errors
    assert err.rule == "world" and "ngpu 8 is not divisible by ETP*EP*PP = 4*2*2 = 16" in err.message
    assert (
        "ETP inherited from TP = 4 because the launcher does not set expert_tensor_parallel_size; set "
        "actor_rollout_ref.actor.megatron.expert_tensor_parallel_size to 2 or 1"
    ) in err.message
    assert err.fixes[0] == {"etp": 2}
    assert any(f.rule == "inherited" for f in plan.infos)


def test_mtp_rules_follow_training():
    layout = "Et*6|t*6|t*6|t*5|t*5|t*5|t*5|t*5L"  # 43 layers, no MTP stage
    v4 = from_hf_config("DeepSeek-V4-Flash")
    assert v4.num_mtp_layers == 1 and v4.num_layers == 43
    p = ParallelConfig(pp=8, ep=8, pp_layout=layout)
    assert not resolve(v4, 64, p).valid  # the model's MTP layer is trained: the layout must place it
    plan = resolve(v4, 64, p, train_mtp=False)
    assert plan.valid and any(f.rule == "mtp" for f in plan.infos)
