"""``mlite export``: files written, the mesh as ``mlite mesh`` resolves it, exit codes 0 / 1 / 2."""

from __future__ import annotations

import json

from conftest import assert_one_line_error, run_cli

MESH = ("Qwen3-30B-A3B", "--tp", "2", "--pp", "2", "--cp", "2", "--ep", "8", "--gpus-per-node", "8")


def test_export_json_lists_files_and_the_resolved_mesh(tmp_path):
    res = run_cli(
        "export",
        *MESH,
        "--nodes",
        "4",
        "--target",
        "verl-megatron-grpo",
        "--out",
        tmp_path / "x",
        "--pao",
        "--moment-dtype",
        "bf16",
        "--offload-fraction",
        "0.5",
        "--json",
    )
    assert res.rc == 0, res.err
    doc = res.json()
    assert [p.split("/")[-1] for p in doc["files"]] == [
        "run_verl_megatron_grpo.sh",
        "job_megatron_grpo.sbatch",
        "plan.json",
    ]
    for p in doc["files"]:
        assert (tmp_path / "x" / p.split("/")[-1]).is_file()
    mesh = run_cli("mesh", *MESH, "--ngpu", "32", "--json").json()
    for k in ("valid", "errors", "warnings", "tp", "pp", "vpp", "cp", "ep", "etp", "dp", "edp", "pp_layout"):
        assert doc["mesh"][k] == mesh[k], k
    plan = json.loads((tmp_path / "x" / "plan.json").read_text())
    assert plan["options"]["use_precision_aware_optimizer"] and plan["options"]["exp_avg_dtype"] == "bf16"
    text = (tmp_path / "x" / "run_verl_megatron_grpo.sh").read_text()
    assert '"actor_rollout_ref.actor.optim.exp_avg_dtype=bf16"' in text
    assert (
        '"+actor_rollout_ref.actor.optim.override_optimizer_config.optimizer_offload_fraction=${OFFLOAD_FRACTION}"'
        in text
    )
    # the launcher reads back to the same mesh through the CLI
    back = run_cli("import-launcher", tmp_path / "x" / "run_verl_megatron_grpo.sh", "--json").json()
    assert {k: back[k] for k in ("tp", "pp", "cp", "ep", "etp", "dp", "edp", "ngpu")} == {
        k: mesh[k] for k in ("tp", "pp", "cp", "ep", "etp", "dp", "edp", "ngpu")
    }


def test_text_output_names_the_files_and_the_submit_line(tmp_path):
    res = run_cli("export", "Qwen3-8B", "--nodes", "1", "--target", "verl-mlite-sft", "--out", tmp_path)
    assert res.rc == 0, res.err
    assert "wrote" in res.out and "sbatch job_mlite_sft.sbatch" in res.out


def test_invalid_mesh_is_bad_input_with_the_reasons(tmp_path):
    """Nothing can be exported for an invalid mesh: exit 2, the planner's reasons in one line (mlite.cli.EXIT_CODES)."""
    args = (
        "export",
        "Qwen3-30B-A3B",
        "--nodes",
        "4",
        "--pp",
        "3",
        "--target",
        "verl-mlite-grpo",
        "--out",
        tmp_path / "y",
    )
    for extra in ((), ("--json",)):
        assert_one_line_error(run_cli(*args, *extra), "invalid mesh", "not divisible by TP*CP*PP")
        assert not (tmp_path / "y").exists()


def test_bad_usage_is_one_line_exit_2(tmp_path):
    assert_one_line_error(run_cli("export", "Qwen3-8B", "--nodes", "1", "--out", tmp_path), "--target")
    assert_one_line_error(
        run_cli("export", "Qwen3-8B", "--nodes", "1", "--target", "verl-sft", "--out", tmp_path), "--target"
    )
    f = tmp_path / "file"
    f.write_text("x")
    assert_one_line_error(
        run_cli("export", "Qwen3-8B", "--nodes", "1", "--target", "verl-mlite-sft", "--out", f), "--out"
    )
    assert_one_line_error(
        run_cli("export", "NoSuchModel", "--nodes", "1", "--target", "verl-mlite-sft", "--out", tmp_path), "NoSuchModel"
    )
    assert_one_line_error(
        run_cli("export", "Qwen3-8B", "--nodes", "0", "--target", "verl-mlite-sft", "--out", tmp_path), "nodes"
    )


def test_console_says_when_the_plan_does_not_fit(tmp_path):
    """A plan that does not fit in GPU memory is written, and the console says so with the launcher header's own
    line, instead of a bare "submit:" (issue 30: Kimi-K2 at 166.7 GiB per GPU on 80 GiB printed only "submit")."""
    mesh = ["--pp", "8", "--ep", "8", "--cp", "8"]
    args = ["Kimi-K2-Instruct", "--nodes", "32", *mesh, "--target", "verl-megatron-grpo"]
    res = run_cli("export", *args, "--out", tmp_path / "k")
    assert res.rc == 0, res.err
    header = (tmp_path / "k" / "run_verl_megatron_grpo.sh").read_text()
    (line,) = [ln[2:] for ln in header.splitlines() if ln.startswith("# Memory estimate")]
    assert "does NOT fit in 80 GiB" in line and f"  {line}" in res.out.splitlines()
    assert any(ln.startswith("  DOES NOT FIT:") for ln in res.out.splitlines())
    assert not any(ln.startswith("  submit:") for ln in res.out.splitlines())
    assert "  submit once it fits: cd " in res.out
    doc = run_cli("export", *args, "--out", tmp_path / "j", "--json").json()
    layout = doc["mesh"]["pp_layout"]
    oracle = run_cli("memory", "Kimi-K2-Instruct", "--ngpu", "256", *mesh, "--pp-layout", layout, "--json")
    assert oracle.rc == 1 and oracle.json()["fits"] is False
    assert doc["memory"]["fits"] is False and doc["memory"]["line"] == line
    assert doc["memory"]["per_gpu_bytes"] == oracle.json()["per_gpu"]["total"]
    # the same mesh with PAO and bf16 gradients on an H200 fits, and is offered for submission
    ok = run_cli("export", *args, "--gpu-mem", "H200", "--pao", "--grad-dtype", "bf16", "--out", tmp_path / "f")
    assert ok.rc == 0 and "fits in 141 GiB" in ok.out and "DOES NOT FIT" not in ok.out
    assert any(ln.startswith("  submit: cd ") for ln in ok.out.splitlines())
