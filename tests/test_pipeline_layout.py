"""The pipeline layer split as Megatron-Core builds it: one rule (:func:`mlite.mesh.layout.split_layout`, the layers
rule of :mod:`mlite.mesh.checks`) for ``mlite mesh``, the planner (:func:`mlite.mesh.resolve`) and
``mlite import-launcher``.

Held against megatron-core 0.16.1 itself on CPU (``TransformerConfig.__post_init__`` and ``get_num_layers_to_build``),
against real public launchers (verl's examples under tests/data/launchers/verl/, hicann/cann-recipes-train's
DeepSeek-V3 launcher with ``pipeline_parallel_num_layer_list``; provenance in tests/data/launchers/README.md), and
``mlite mesh`` against ``import-launcher`` on the same meshes: the same verdict with the same reasons.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
from conftest import REPO, assert_one_line_error, run_cli

from mlite.cli import main
from mlite.errors import MliteError
from mlite.export import import_launcher
from mlite.mesh import ParallelConfig, PipelineSplit, resolve, split_layout
from mlite.models import from_hf_config

LAUNCHERS = REPO / "tests" / "data" / "launchers"
VERL = LAUNCHERS / "verl" / "main" / "examples"
QWEN3_235B = VERL / "grpo_trainer" / "run_qwen3_235b_a22b_megatron.sh"
CANN_DSV3 = LAUNCHERS / "cann-recipes-train" / "train_grpo_deepseekv3_256die_random_init.sh"


def _counts(stages) -> list[int]:
    return [len(s.layers) for s in stages]


# ------------------------------------------------------------------------------------------ Megatron-Core oracle
def _mcore_counts(num_layers, pp, vpp, first=None, last=None, emb=False, loss=False) -> list[int] | None:
    """Decoder layers per virtual stage (virtual order) as megatron-core builds them, or None where it refuses:
    ``TransformerConfig`` raises, ``get_num_layers_to_build`` asserts, or its counts are negative or do not sum to
    the model's layers (a model it cannot build)."""
    import torch
    from megatron.core.transformer.transformer_block import get_num_layers_to_build
    from megatron.core.transformer.transformer_config import TransformerConfig

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            cfg = TransformerConfig(
                num_layers=num_layers,
                hidden_size=64,
                num_attention_heads=4,
                pipeline_model_parallel_size=pp,
                virtual_pipeline_model_parallel_size=vpp if vpp > 1 else None,
                pipeline_dtype=torch.bfloat16,
                num_layers_in_first_pipeline_stage=first,
                num_layers_in_last_pipeline_stage=last,
                account_for_embedding_in_pipeline_split=emb,
                account_for_loss_in_pipeline_split=loss,
            )
            counts = [
                get_num_layers_to_build(cfg, vp_stage=(i // pp) if vpp > 1 else None, pp_rank=i % pp)
                for i in range(pp * vpp)
            ]
        except (ValueError, AssertionError):
            return None
    return counts if min(counts) >= 0 and sum(counts) == num_layers else None


def _mlite_counts(num_layers, pp, vpp, first=None, last=None, emb=False, loss=False) -> list[int] | None:
    split = PipelineSplit(first=first, last=last, account_for_embedding=emb, account_for_loss=loss)
    try:
        return _counts(split_layout(num_layers, 0, pp, vpp, split))
    except MliteError:
        return None


def test_the_oracle_is_megatron_cores_own_code():
    assert _mcore_counts(94, 8, 1, 11, 11) == [11] + [12] * 6 + [11]
    assert _mcore_counts(94, 8, 1, 11, 12) is None  # 71 middle layers over 6 stages
    assert _mcore_counts(94, 8, 1, emb=True, loss=True) == [11] + [12] * 6 + [11]
    assert _mcore_counts(94, 3, 1) is None  # num_layers should be divisible by pipeline_model_parallel_size


def test_split_equals_megatron_core_on_a_grid():
    checked = accepted = 0
    for layers in (8, 10, 12, 27, 61, 94):
        for pp in (1, 2, 3, 4, 8):
            for vpp in (1, 2) if pp > 1 else (1,):  # VPP with PP 1 is the vpp rule's error
                for first in (None, 0, 2, 3, 4, 11):
                    for last in (None, 2, 4, 6, 11):
                        if pp == 1 and first is not None and last is not None:
                            continue  # one rank cannot be first and last stage with two counts (mlite refuses)
                        for emb, loss in ((False, False), (True, True), (True, False)):
                            want = _mcore_counts(layers, pp, vpp, first, last, emb, loss)
                            got = _mlite_counts(layers, pp, vpp, first, last, emb, loss)
                            assert got == want, (layers, pp, vpp, first, last, emb, loss)
                            checked += 1
                            accepted += want is not None
    assert checked > 2000 and 100 < accepted < checked  # both verdicts are exercised


def test_layer_list_is_one_count_per_rank_summing_to_the_layers():
    assert _counts(split_layout(61, 0, 8, 1, PipelineSplit(layer_list=(7, 7, 8, 8, 8, 8, 8, 7)))) == [
        7,
        7,
        8,
        8,
        8,
        8,
        8,
        7,
    ]
    for bad, words in (((7, 7, 8), "must list 8 positive counts"), ((7, 7, 8, 8, 8, 8, 8, 6), "summing to 60")):
        with pytest.raises(MliteError, match=words):
            split_layout(61, 0, 8, 1, PipelineSplit(layer_list=bad))
    with pytest.raises(MliteError, match="cannot be used with VPP 2"):
        split_layout(64, 0, 4, 2, PipelineSplit(layer_list=(16, 16, 16, 16)))


# ------------------------------------------------------------------------------------------ real launchers
def test_first_last_counts_of_verls_qwen3_235b_launcher_are_the_stages():
    imp = import_launcher(QWEN3_235B)
    assert imp.split == PipelineSplit(first=11, last=11)
    doc = imp.to_dict()
    assert doc["layout_source"] == "split" and doc["pipeline_split"].startswith("num_layers_in_first_pipeline_stage=11")
    mp, _ = imp.plan()
    assert _counts(mp.stages) == [11] + [12] * 6 + [11]
    assert not any("layer" in w for w in doc["warnings"])  # no planner-chosen layout any more


def test_a_first_stage_count_megatron_core_refuses_is_refused(tmp_path):
    text = QWEN3_235B.read_text().replace(
        "num_layers_in_first_pipeline_stage=11", "num_layers_in_first_pipeline_stage=12"
    )
    bad = tmp_path / "run.sh"
    bad.write_text(text)
    res = run_cli("import-launcher", bad, "--env", "ACTOR_TP=2", "--env", "ACTOR_EP=4", "--json")
    doc = res.json()
    assert res.rc == 1 and not doc["valid"]
    assert any("leaves 71 middle layers, not divisible by the 6 middle pipeline stages" in e for e in doc["errors"])
    assert _mcore_counts(94, 8, 1, 12, 11) is None  # and Megatron-Core refuses it too


def test_94_layers_at_pp3_without_split_keys_is_rejected_like_mlite_mesh(tmp_path):
    # verl's Qwen3-235B launcher without its two split lines, at PP 3 on 6 nodes: the GPU-count rules hold
    text = "\n".join(ln for ln in QWEN3_235B.read_text().splitlines() if "pipeline_stage=" not in ln)
    src = tmp_path / "run.sh"
    src.write_text(text + "\n")
    imp = import_launcher(src, env={"ACTOR_PP": "3", "NNODES": "6"})
    doc = imp.to_dict()
    layers = [e for e in doc["errors"] if "layers" in e]
    assert not doc["valid"] and layers and layers[0].startswith("94 layers do not split evenly into PP*VPP = 3*1")
    rc = main(["mesh", "Qwen3-235B-A22B", "--ngpu", "48", "--tp", "4", "--pp", "3", "--ep", "4", "--etp", "4"])
    assert rc == 1
    mp = resolve(from_hf_config("Qwen3-235B-A22B"), 48, ParallelConfig(tp=4, pp=3, ep=4, etp=4))
    assert [f.message for f in mp.errors] == doc["errors"]
    # with the launcher's own first/last counts, PP 3 is what Megatron-Core builds: 11 | 72 | 11
    imp = import_launcher(QWEN3_235B, env={"ACTOR_PP": "3", "NNODES": "6"})
    assert imp.to_dict()["valid"] and _counts(imp.plan()[0].stages) == [11, 72, 11]


@pytest.mark.parametrize(
    ("path", "counts"),
    [
        (VERL / "grpo_trainer" / "run_deepseek_v3_671b_megatron.sh", [5] * 11 + [6]),  # last stage 6
        (VERL / "ascend_extras" / "grpo_trainer" / "run_qwen3_235b_256k_megatron.sh", [5] + [6] * 14 + [5]),
        (VERL / "grpo_trainer" / "run_qwen3_vl_235b_a22b_megatron.sh", [11] + [12] * 6 + [11]),  # account_for_*
        (CANN_DSV3, [7, 7, 8, 8, 8, 8, 8, 7]),  # pipeline_parallel_num_layer_list
    ],
    ids=["dsv3-last", "qwen3-235b-256k-first-last", "qwen3-vl-account-for", "cann-dsv3-layer-list"],
)
def test_real_launchers_split_is_the_plans_stages(path, counts):
    imp = import_launcher(path)
    mp, _ = imp.plan()
    assert mp.layout_source == "split" and _counts(mp.stages) == counts, mp.layout


def test_the_estimate_uses_the_launchers_split():
    imp = import_launcher(CANN_DSV3)
    mp, est = imp.estimate()
    assert est is not None and _counts(mp.stages) == [7, 7, 8, 8, 8, 8, 8, 7]
    # the same mesh with the planner's own split is another estimate: the launcher's split is the one used
    auto = resolve(from_hf_config("DeepSeek-V3"), imp.ngpu, imp.parallel, auto_uneven=True, train_mtp=False)
    assert _counts(auto.stages) != _counts(mp.stages)
    from mlite.memory import estimate

    other = estimate(from_hf_config("DeepSeek-V3"), auto, imp.training_options())
    assert est.to_dict() != other.to_dict()


def test_a_layer_list_that_does_not_sum_to_the_layers_is_refused(tmp_path):
    bad = tmp_path / "run.sh"
    bad.write_text(CANN_DSV3.read_text().replace("[7,7,8,8,8,8,8,7]", "[7,7,8,8,8,8,8,6]"))
    res = run_cli("import-launcher", bad, "--json")
    assert res.rc == 1
    assert any("summing to the model's 61 layers (it has 8 summing to 60)" in e for e in res.json()["errors"])


def test_the_planner_gets_the_launchers_split_as_its_layout():
    values = import_launcher(QWEN3_235B).planner_values()
    assert values["pp"] == 8 and values["pp_layout"] == "E,t*11|" + "t*12|" * 6 + "t*11,L"
    mp = resolve(
        from_hf_config("Qwen3-235B-A22B"), 64, ParallelConfig(tp=4, pp=8, ep=4, etp=1, pp_layout=values["pp_layout"])
    )
    assert mp.valid and mp.layout_source == "pp_layout"


def test_an_export_of_an_imported_split_writes_its_stages():
    p = import_launcher(VERL / "grpo_trainer" / "run_deepseek_v3_671b_megatron.sh").to_export_plan().parallel
    assert p.pp_layout == "E," + "t*5|" * 11 + "t*6,L"  # the launcher's last stage of 6 layers, as a layout


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ("num_layers_in_first_pipeline_stage=eleven", "not an integer layer count"),
        ("num_layers_in_first_pipeline_stage=${FIRST}", "could not expand $FIRST"),
    ],
)
def test_a_split_key_that_is_not_a_count_exits_2_in_one_line(tmp_path, line, words):
    bad = tmp_path / "run.sh"
    bad.write_text(QWEN3_235B.read_text().replace("num_layers_in_first_pipeline_stage=11", line))
    assert_one_line_error(run_cli("import-launcher", bad), "num_layers_in_first_pipeline_stage", words)


def test_mesh_flag_bad_layer_list_exits_2_in_one_line():
    assert_one_line_error(
        run_cli("mesh", "DeepSeek-V3", "--ngpu", "8", "--pp", "8", "--num-layer-list", "7,x"), "--num-layer-list"
    )


# ------------------------------------------------------------------------------------------ consistency
MODELS = ("Qwen3-235B-A22B", "DeepSeek-V3", "Qwen3-8B", "Moonlight-16B-A3B-Instruct")
# (pp, vpp, first, last, account_for_embedding, account_for_loss, layer list, pp_layout)
CASES = [
    (2, 1, None, None, False, False, None, None),
    (3, 1, None, None, False, False, None, None),
    (4, 1, None, None, False, False, None, None),
    (4, 2, None, None, False, False, None, None),
    (8, 1, 11, 11, False, False, None, None),
    (8, 1, 11, 12, False, False, None, None),
    (3, 1, 11, 11, False, False, None, None),
    (4, 2, 22, 24, False, False, None, None),
    (4, 2, 21, None, False, False, None, None),
    (2, 1, None, 10, False, False, None, None),
    (1, 1, 5, None, False, False, None, None),
    (16, 1, 5, 5, False, False, None, None),
    (8, 1, 0, None, False, False, None, None),
    (8, 1, None, None, True, True, None, None),
    (4, 2, None, None, True, True, None, None),
    (3, 1, None, None, True, False, None, None),
    (8, 1, 11, None, True, False, None, None),
    (8, 1, None, None, False, False, (7, 7, 8, 8, 8, 8, 8, 7), None),
    (4, 1, None, None, False, False, (23, 24, 24, 23), None),
    (4, 1, None, None, False, False, (9, 9, 9, 9), None),
    (4, 1, None, None, False, False, None, "E,t*23|t*24|t*24|t*23,L"),
    (4, 1, 23, None, False, False, None, "E,t*23|t*24|t*24|t*23,L"),
]


def _launcher_text(model: str, spec, case) -> str:
    pp, vpp, first, last, emb, loss, layer_list, layout = case
    m, o = "actor_rollout_ref.actor.megatron", "actor_rollout_ref.actor.megatron.override_transformer_config"
    words = [
        "python3 -m verl.trainer.main_ppo --config-name=ppo_megatron_trainer",
        f"actor_rollout_ref.model.path=/models/{model}",
        f"{m}.tensor_model_parallel_size=1",
        f"{m}.pipeline_model_parallel_size={pp}",
        f"{m}.virtual_pipeline_model_parallel_size={vpp if vpp > 1 else 'null'}",
        f"{m}.context_parallel_size=1",
        f"{m}.expert_model_parallel_size=1",
        f"{m}.expert_tensor_parallel_size=1",
        "trainer.nnodes=1",
        f"trainer.n_gpus_per_node={2 * pp}",
    ]
    if spec.num_mtp_layers:  # MTP trained, so both place it with the loss
        words += ["actor_rollout_ref.model.mtp.enable=True"]
    for key, v in (("num_layers_in_first_pipeline_stage", first), ("num_layers_in_last_pipeline_stage", last)):
        if v is not None:
            words.append(f"+{o}.{key}={v}")
    for key, v in (("account_for_embedding_in_pipeline_split", emb), ("account_for_loss_in_pipeline_split", loss)):
        if v:
            words.append(f"+{o}.{key}=True")
    if layer_list:
        words.append(f"+{m}.pipeline_parallel_num_layer_list=[{','.join(map(str, layer_list))}]")
    if layout:
        words.append(f"+{o}.pipeline_model_parallel_layout='{layout}'")
    return " \\\n    ".join(words) + "\n"


def _mesh_args(model: str, case) -> list[str]:
    pp, vpp, first, last, emb, loss, layer_list, layout = case
    args = ["mesh", model, "--ngpu", str(2 * pp), "--pp", str(pp), "--vpp", str(vpp), "--engine", "megatron-core"]
    args += ["--json"]
    args += ["--num-layers-in-first-pipeline-stage", str(first)] if first is not None else []
    args += ["--num-layers-in-last-pipeline-stage", str(last)] if last is not None else []
    args += ["--account-for-embedding-in-pipeline-split"] if emb else []
    args += ["--account-for-loss-in-pipeline-split"] if loss else []
    args += ["--num-layer-list", ",".join(map(str, layer_list))] if layer_list else []
    args += ["--pp-layout", layout] if layout else []
    return args


@pytest.mark.parametrize("model", MODELS)
def test_mlite_mesh_and_import_launcher_agree(model, capsys, tmp_path):
    spec = from_hf_config(model)
    verdicts = set()
    for case in CASES:
        rc_mesh = main(_mesh_args(model, case))
        mesh = json.loads(capsys.readouterr().out)
        src = Path(tmp_path / "run.sh")
        src.write_text(_launcher_text(model, spec, case))
        rc_imp = main(["import-launcher", str(src), "--json"])
        imp = json.loads(capsys.readouterr().out)
        assert imp["model_config"] == model
        assert (rc_mesh, mesh["valid"], mesh["errors"]) == (rc_imp, imp["valid"], imp["errors"]), case
        assert (mesh["pp_layout"], mesh["layout_source"]) == (imp["pp_layout"], imp["layout_source"]), case
        verdicts.add(mesh["valid"])
    assert verdicts == {True, False}


# Megatron Lite launchers: written by ``mlite export`` once per model and target, the mesh then set through the
# launcher's own knobs (TP=, PP=, ... as a user would), read back by import-launcher and judged by
# ``mlite mesh --engine megatron-lite`` (verl's mlite engine balances uneven layers itself; the rule is
# mlite.mesh.engine, the one both apply). (ngpu, tp, pp, vpp, cp, ep, etp)
LITE_MESHES = [
    (8, 1, 1, 1, 1, 1, 1),
    (6, 1, 3, 1, 1, 1, 1),  # 94 / 61 / 27 layers: uneven over 3
    (8, 1, 4, 2, 1, 1, 1),
    (16, 1, 8, 2, 1, 1, 1),
    (10, 1, 5, 1, 1, 1, 1),
    (14, 1, 7, 1, 1, 1, 1),
    (16, 16, 1, 1, 1, 1, 1),  # TP 16: more than the KV heads (Megatron Lite splits them, no replication)
    (16, 2, 2, 1, 1, 4, 2),
    (12, 1, 8, 1, 1, 1, 1),  # 12 GPUs do not divide by PP 8
    (32, 1, 32, 1, 1, 1, 1),  # 27 / 36 layers cannot fill 32 stages
    (8, 1, 2, 1, 4, 1, 1),
    (64, 4, 8, 1, 1, 2, 1),
]


def _lite_env(case) -> dict:
    ngpu, tp, pp, vpp, cp, ep, etp = case
    sizes = {"TP": tp, "PP": pp, "VPP": vpp, "CP": cp, "EP": ep, "ETP": etp, "NNODES": 1, "NDEVICES_PER_NODE": ngpu}
    return {k: str(v) for k, v in sizes.items()} | {"HOME": "/home/u", "PWD": "/work"}


@pytest.mark.parametrize("target", ["verl-mlite-grpo", "verl-mlite-sft"])
@pytest.mark.parametrize("model", MODELS)
def test_mlite_mesh_and_import_launcher_agree_on_megatron_lite_launchers(model, target, capsys, tmp_path):
    assert main(["export", model, "--target", target, "--nodes", "1", "--out", str(tmp_path), "--json"]) == 0
    capsys.readouterr()
    (launcher,) = tmp_path.glob("run_verl_mlite_*.sh")
    verdicts, sources = set(), set()
    for case in LITE_MESHES:
        ngpu, tp, pp, vpp, cp, ep, etp = case
        sizes = ["--tp", tp, "--pp", pp, "--vpp", vpp, "--cp", cp, "--ep", ep, "--etp", etp]
        mesh_args = ["mesh", model, "--ngpu", ngpu, "--gpus-per-node", ngpu, *sizes, "--engine", "megatron-lite"]
        rc_mesh = main([str(a) for a in mesh_args] + ["--json"])
        mesh = json.loads(capsys.readouterr().out)
        env = [w for k, v in _lite_env(case).items() for w in ("--env", f"{k}={v}")]
        rc_imp = main(["import-launcher", str(launcher), *env, "--json"])
        imp = json.loads(capsys.readouterr().out)
        assert (imp["model_config"], imp["target"]) == (model, target)
        assert [imp[k] for k in ("tp", "pp", "vpp", "cp", "ep", "etp", "ngpu")] == [tp, pp, vpp, cp, ep, etp, ngpu]
        assert (rc_mesh, mesh["valid"], mesh["errors"]) == (rc_imp, imp["valid"], imp["errors"]), case
        assert (mesh["pp_layout"], mesh["layout_source"]) == (imp["pp_layout"], imp["layout_source"]), case
        verdicts.add(mesh["valid"])
        sources.add(mesh["layout_source"])
    assert verdicts == {True, False} and "auto" in sources


def test_plain_mlite_mesh_refuses_the_uneven_split_megatron_lite_balances(capsys):
    """What disagreed before ``--engine``: a verl-mlite launcher at PP 3 for 94 layers is valid (Megatron Lite
    balances the layers), ``mlite mesh`` (the mlite planner's rule) refuses it and names the layout that works."""
    args = ["mesh", "Qwen3-235B-A22B", "--ngpu", "6", "--pp", "3", "--json"]
    assert main(args) == 1
    plain = json.loads(capsys.readouterr().out)
    assert main([*args, "--engine", "megatron-lite"]) == 0
    lite = json.loads(capsys.readouterr().out)
    assert "an uneven layout would work: --pp-layout 'E,t*31|t*32|t*31,L'" in plain["errors"][0]
    assert (lite["pp_layout"], lite["layout_source"]) == ("E,t*31|t*32|t*31,L", "auto")
    # Megatron-Core refuses it too, and replicates KV heads where the mlite runtime cannot
    assert main([*args, "--engine", "megatron-core"]) == 1
    capsys.readouterr()
    kv = ["mesh", "Qwen3-8B", "--ngpu", "16", "--tp", "16", "--json"]
    assert main(kv) == 1 and main([*kv, "--engine", "megatron-core"]) == 0
    capsys.readouterr()


def test_a_zero_first_stage_count_is_megatron_cores_error_not_unset(capsys):
    rc = main(["mesh", "Qwen3-8B", "--ngpu", "8", "--pp", "4", "--num-layers-in-first-pipeline-stage", "0", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 1 and doc["errors"] == ["num_layers_in_first_pipeline_stage must be larger than 0 (got 0)"]
    assert _mcore_counts(36, 4, 1, first=0) is None
