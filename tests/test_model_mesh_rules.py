"""Per-model mesh rules as data (``mlite/models/mesh_rules.json``): one rule (:func:`mlite.mesh.checks.rule_model`)
refuses through ``mlite mesh`` / ``mlite export`` / the planner with the reason, the error code and the source, and
the enumeration (``mlite mesh --list``) never lists a mesh the rules refuse.

Oracles: the fork's limits as its docs state them (ISEEKYAN/Megatron-LM ``experimental/lite/docs/deepseek_v41.md`` @
04baccf4: CP>1 with EP>1 raises ``CP_AND_EP_NOT_SIMULTANEOUSLY_SUPPORTED``; TP/VPP/ETP and PP other than 1 or 2
raise ``V4.1_UNSUPPORTED_PARALLELISM``; PP2 only at layer 20), written out again below as a predicate independent of
the JSON.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
from conftest import assert_one_line_error, run_cli

from mlite.mesh import ParallelConfig, enumerate_meshes, resolve
from mlite.mesh import checks as C
from mlite.mesh.checks import MeshContext
from mlite.mesh.enumerate import candidate_configs
from mlite.models import from_hf_config
from mlite.models.mesh_rules import RULES_FILE, families, rules_for

V41 = "DeepSeek-V4.1-Flash-derived"
SPEC = from_hf_config(V41)
V4 = from_hf_config("DeepSeek-V4-Flash")


def _fork_refuses(p: ParallelConfig, first_stage_layers: int | None = None) -> bool:
    """DeepSeek-V4.1's limits as the fork's docs state them (independent of mesh_rules.json)."""
    s = p.sizes()
    if s["cp"] > 1 and s["ep"] > 1:
        return True
    if s["tp"] != 1 or s["vpp"] != 1 or s["etp"] != 1 or s["pp"] not in (1, 2):
        return True
    if s["pp"] == 2 and (s["ep"] > 1 or s["cp"] > 1):
        return True
    return s["pp"] == 2 and first_stage_layers not in (None, 20)


# mlite mesh flags, the rule id, the code its message names
REFUSED = [
    (["--cp", "2", "--ep", "2"], "deepseek_v41_cp_ep", "CP_AND_EP_NOT_SIMULTANEOUSLY_SUPPORTED"),
    (["--tp", "2"], "deepseek_v41_unsupported", "V4.1_UNSUPPORTED_PARALLELISM"),
    (["--pp", "2", "--vpp", "2"], "deepseek_v41_unsupported", "V4.1_UNSUPPORTED_PARALLELISM"),
    (["--etp", "2", "--ep", "2"], "deepseek_v41_unsupported", "V4.1_UNSUPPORTED_PARALLELISM"),
    (["--pp", "4"], "deepseek_v41_pp", "V4.1_UNSUPPORTED_PARALLELISM"),
    (["--pp", "2", "--pp-layout", "E,t*15|t*25,L"], "deepseek_v41_pp_split", "V4.1_PP_CSA2_PAYLOAD_UNSUPPORTED"),
    (["--pp", "2", "--ep", "2"], "deepseek_v41_pp_ep", "V4.1_PP_COMBINATION_UNSUPPORTED"),
    (["--pp", "2", "--cp", "2"], "deepseek_v41_pp_cp", "V4.1_PP_COMBINATION_UNSUPPORTED"),
]


def test_every_rule_names_its_source_and_every_v41_rule_has_a_case():
    doc = json.loads(RULES_FILE.read_text())
    assert set(doc["families"]) == set(families()) == {"deepseek_v4", "deepseek_v41"}
    for rules in families().values():
        for r in rules:
            assert "ISEEKYAN/Megatron-LM" in r.source or "shared/reference" in r.source, r
            assert "@" in r.source or "reference" in r.source  # a commit, or the reference notes' section
    assert {r.id for r in rules_for("deepseek_v41")} == {case[1] for case in REFUSED}
    assert rules_for("qwen3_moe") == ()


@pytest.mark.parametrize("flags, rule, code", REFUSED, ids=[c[1] + ":" + "".join(c[0]) for c in REFUSED])
def test_mlite_mesh_refuses_with_reason_code_and_source(flags, rule, code):
    res = run_cli("mesh", V41, "--ngpu", "16", *flags, "--json")
    assert res.rc == 1, res.err  # a verdict (mlite.cli.EXIT_CODES: an invalid mesh exits 1 from mlite mesh)
    doc = res.json()
    assert not doc["valid"]
    (r,) = [x for x in doc["rules"] if x["rule"] == rule]
    msg = next(m for m in doc["errors"] if code in m)
    assert "ISEEKYAN/Megatron-LM" in msg and "04baccf4" in msg and r["fixes"], doc
    # the first fix, applied, leaves no error of that rule
    fix = r["fixes"][0]
    args = dict(zip(flags[::2], flags[1::2]))
    for k, v in fix.items():
        args["--pp-layout" if k == "pp_layout" else f"--{k}"] = str(v)
    again = run_cli("mesh", V41, "--ngpu", "16", *[x for kv in args.items() for x in kv], "--json").json()
    assert rule not in {x["rule"] for x in again["rules"] if x["level"] == "error"}, again


def test_the_split_fix_is_the_layer_20_layout():
    plan = resolve(SPEC, 8, ParallelConfig(pp=2, pp_layout="E,t*15|t*25,L"))
    (f,) = [x for x in plan.errors if x.rule == "deepseek_v41_pp_split"]
    assert f.fixes == ({"pp_layout": "E,t*20|t*20,L"},)
    good = resolve(SPEC, 8, ParallelConfig(pp=2, pp_layout=f.fixes[0]["pp_layout"]))
    assert good.valid and [len(s.layers) for s in good.stages] == [20, 20]
    assert resolve(SPEC, 8, ParallelConfig(pp=2)).valid  # the even split is the layer-20 one


def test_export_refuses_with_exit_2_and_writes_nothing(tmp_path):
    out = tmp_path / "x"
    args = ("export", V41, "--nodes", "2", "--cp", "2", "--ep", "2", "--target", "verl-mlite-sft", "--out", out)
    assert_one_line_error(run_cli(*args), "invalid mesh", "CP_AND_EP_NOT_SIMULTANEOUSLY_SUPPORTED")
    assert not out.exists()


@pytest.mark.parametrize("ngpu", [8, 16, 24, 64])
def test_enumeration_never_lists_a_refused_mesh(ngpu):
    listed = enumerate_meshes(SPEC, ngpu)
    assert listed
    for m in listed:
        p = m.plan.parallel
        first = len(m.plan.stages[0].layers) if p.pp == 2 else None
        assert not _fork_refuses(p, first), p
        assert not C.rule_model(MeshContext(spec=SPEC, ngpu=ngpu, parallel=p)), p
    # and every candidate the divisibility rules allow but the fork refuses is absent
    seen = {dataclasses.astuple(m.plan.parallel) for m in listed}
    for cfg in candidate_configs(SPEC, ngpu):
        assert not _fork_refuses(cfg)
    assert any(m.plan.parallel.pp == 2 for m in listed) == (ngpu % 2 == 0)
    assert all(p[0] == 1 for p in seen)  # TP 1 everywhere


def test_cli_list_agrees_with_the_rule():
    res = run_cli("mesh", V41, "--ngpu", "16", "--list", "--json")
    assert res.rc == 0, res.err
    rows = res.json()["meshes"] if isinstance(res.json(), dict) else res.json()
    assert rows
    for row in rows:
        p = ParallelConfig(**{k: row[k] for k in ("tp", "pp", "vpp", "cp", "ep", "etp")})
        assert not _fork_refuses(p), row


def test_deepseek_v4_keeps_its_rule_through_the_data():
    (f,) = C.rule_model(MeshContext(spec=V4, ngpu=16, parallel=ParallelConfig(tp=2)))
    assert f.rule == "deepseek_v4" and f.fixes == ({"tp": 1, "etp": 1},) and "TP = ETP = 1" in f.message
    assert all(m.plan.parallel.tp == 1 and m.plan.parallel.etp_size == 1 for m in enumerate_meshes(V4, 16))


def test_planner_shows_the_model_rule_and_its_fix():
    from test_planner_widget import _buttons, _lines, _planner

    p = _planner(V41, ngpu=16)
    assert p.plan.valid, p.plan.errors
    p.apply(cp=2, ep=2)
    shown = _lines(p, "error")
    assert any("[deepseek_v41_cp_ep]" in s and "CP_AND_EP_NOT_SIMULTANEOUSLY_SUPPORTED" in s for s in shown), shown
    _buttons(p)["ep = 1"].click()
    assert p.plan.valid and p.parallel().ep == 1


def test_import_launcher_refuses_the_same_mesh(tmp_path):
    out = tmp_path / "ok"
    res = run_cli("export", V41, "--nodes", "1", "--ep", "8", "--target", "verl-mlite-sft", "--out", out)
    assert res.rc == 0, res.err
    (script,) = out.glob("run_*.sh")
    good = run_cli("import-launcher", script, "--json")
    assert good.rc == 0 and good.json()["valid"], good.out
    text = script.read_text()
    assert "CP=${CP:-1}" in text and "EP=${EP:-8}" in text
    bad = tmp_path / "bad.sh"
    bad.write_text(text.replace("CP=${CP:-1}", "CP=${CP:-2}").replace("EP=${EP:-8}", "EP=${EP:-2}"))
    res = run_cli("import-launcher", bad, "--json")
    assert res.rc == 1, res.err  # a verdict: the launcher's mesh is invalid (mlite.cli.EXIT_CODES)
    doc = res.json()
    assert not doc["valid"] and (doc["cp"], doc["ep"]) == (2, 2)
    assert any("CP_AND_EP_NOT_SIMULTANEOUSLY_SUPPORTED" in m for m in doc["errors"]), doc["errors"]
