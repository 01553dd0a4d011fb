"""``mlite run --from-plan``: a plan larger than this node is shrunk onto it (TP, CP, EP and DP within ``--nproc``,
each shrink said, the mesh checked for the cut model by the planner), the newest plan is the one notebook 02 takes,
and the export writes what was imported or chosen (MTP training, the optimizer of the lite engine's target).

Oracles: the planner (:func:`mlite.mesh.resolve`, through :meth:`RunConfig.check_mesh`) for the shrunk mesh, the
divisibility of the cut model's heads and experts written out, file modification times set by the test, and the
launcher text ``mlite export`` writes.
"""

from __future__ import annotations

import json
import os

import pytest

from mlite.cli import main
from mlite.export import ExportPlan, import_launcher, write
from mlite.launch.from_plan import config_from_plan, mesh_candidates, newest_plan
from mlite.mesh import ParallelConfig

NOTEBOOK_LAUNCHER = "verl/main/examples/grpo_trainer/run_qwen3_5_35b_megatron.sh"
"""The launcher notebook 01 reads by default (its LAUNCHER)."""


def _plan(tmp_path, model="Qwen3-30B-A3B", **mesh):
    d = tmp_path / f"plan-{model}-{'-'.join(f'{k}{v}' for k, v in mesh.items())}"
    write(ExportPlan(model=model, target="verl-mlite-sft", parallel=ParallelConfig(**mesh)), d)
    return d / "plan.json"


@pytest.mark.parametrize("nproc", [1, 2, 4])
def test_a_plan_larger_than_the_node_is_shrunk_axis_by_axis(tmp_path, nproc):
    """TP 4, CP 2, EP 8 of a Qwen3-30B-A3B plan on 1, 2 or 4 processes: each axis a divisor of the plan's that fits,
    TP kept first, then CP, then EP; each change said with the limit; a mesh the planner accepts."""
    plan = _plan(tmp_path, tp=4, cp=2, ep=8)
    cfg, said = config_from_plan(plan, nproc=nproc, steps=2, device="cpu", tokens_per_microbatch=64)
    tp, cp, ep = cfg.tp, cfg.cp, cfg.ep
    assert tp * cp <= nproc and ep <= nproc and cfg.nproc <= nproc
    assert 4 % tp == 0 and 2 % cp == 0 and 8 % ep == 0
    assert tp == min(4, nproc) and cp == (nproc // tp if 2 % (nproc // tp) == 0 else 1)
    assert ep == nproc  # EP = 1, 2, 4: the largest divisor of 8 within nproc
    spec = cfg.model_spec()
    assert spec.num_attention_heads % tp == 0 and spec.num_key_value_heads % tp == 0
    assert spec.num_experts % ep == 0 and spec.num_experts == cfg.experts
    cfg.check_mesh()  # the planner's rule for the cut model: raises on an invalid mesh
    for name, old in (("tp", 4), ("cp", 2), ("ep", 8)):
        new = getattr(cfg, name)
        line = f"{name} {old} -> {new} (nproc {nproc})"
        assert (line in said) == (new != old), (line, said)
    assert said.index(f"ep 8 -> {ep} (nproc {nproc})") < said.index(
        next(s for s in said if s.startswith("data parallel"))
    )


def test_a_cut_the_shrunk_ep_does_not_divide_takes_the_next_mesh(tmp_path):
    """--experts 3 with the plan's EP 8 on 2 processes: EP 2 would leave 3 experts on 2 ranks (the planner's
    ``experts`` rule), so EP goes to 1 -- the next candidate -- and TP stays."""
    plan = _plan(tmp_path, tp=2, ep=8)
    cfg, said = config_from_plan(plan, nproc=2, steps=2, device="cpu", tokens_per_microbatch=64, experts=3)
    assert (cfg.tp, cfg.ep, cfg.experts, cfg.nproc) == (2, 1, 3, 2)
    assert "ep 8 -> 1 (nproc 2)" in said
    with pytest.raises(Exception, match="experts"):
        cfg.updated(ep=2).check_mesh()


def test_mesh_candidates_keep_tp_then_cp_then_ep_and_end_at_one():
    got = list(mesh_candidates(4, 2, 8, 2))
    assert got[0] == (2, 1, 2) and got[-1] == (1, 1, 1)
    assert all(t * c <= 2 and e <= 2 for t, c, e in got)
    assert list(mesh_candidates(1, 1, 1, 8)) == [(1, 1, 1)]


def test_from_plan_on_the_command_line_shrinks_ep_and_cp_instead_of_refusing(tmp_path, capsys):
    """The CLI path (``mlite run --from-plan --dry-run``): EP 8 and CP 8 plans on --nproc 2, exit 0, each shrink a
    ``plan shrunk:`` line, the worker command printed."""
    for mesh, lines in (({"ep": 8}, ["ep 8 -> 2 (nproc 2)"]), ({"cp": 8}, ["cp 8 -> 2 (nproc 2)"])):
        plan = _plan(tmp_path, **mesh)
        argv = ["run", "--from-plan", str(plan), "--steps", "2", "--nproc", "2", "--device", "cpu"]
        rc = main([*argv, "--out", str(tmp_path / "r"), "--dry-run"])
        out = capsys.readouterr().out
        assert rc == 0, out
        for line in lines:
            assert f"plan shrunk: {line}" in out
        assert "mlite.launch.worker" in out


def test_newest_plan_is_the_last_written_not_the_alphabetically_last(tmp_path):
    assert newest_plan(tmp_path) is None
    for i, name in enumerate(("zz-old", "aa-new")):
        d = tmp_path / name
        d.mkdir()
        (d / "plan.json").write_text("{}")
        os.utime(d / "plan.json", ns=(10**18 + i * 10**9, 10**18 + i * 10**9))
    assert newest_plan(tmp_path) == tmp_path / "aa-new" / "plan.json"


def test_runs_and_exports_go_beside_the_working_directory_or_mlite_runs(tmp_path, monkeypatch):
    from mlite.launch import RunConfig
    from mlite.launch.config import export_root, runs_root
    from widgets.export_view import ExportView

    monkeypatch.delenv("MLITE_RUNS", raising=False)
    monkeypatch.chdir(tmp_path)
    assert runs_root() == tmp_path.resolve() / "runs" and export_root() == runs_root() / "export"
    assert RunConfig().resolved_out().parent == tmp_path.resolve() / "runs"
    view = ExportView("tiny-moe")
    assert view._out.value == str(tmp_path.resolve() / "runs" / "export")
    res = view.export()
    assert res.paths[-1].startswith(str(tmp_path.resolve() / "runs" / "export"))
    assert newest_plan() == tmp_path.resolve() / "runs" / "export" / view.plan().name / "plan.json"
    monkeypatch.setenv("MLITE_RUNS", str(tmp_path / "elsewhere"))
    assert export_root() == (tmp_path / "elsewhere").resolve() / "export"


def test_runs_folders_are_git_ignored_wherever_they_are():
    from pathlib import Path

    lines = (Path(__file__).resolve().parents[1] / ".gitignore").read_text().splitlines()
    assert "runs/" in lines  # no leading slash: notebooks/runs/ too


# ---------------------------------------------------------------------------------------------- export faithfulness
def test_export_of_an_imported_launcher_that_does_not_train_mtp_writes_no_mtp_training(tmp_path):
    """Notebook 01's default launcher (Qwen3.5-35B-A3B, a model with an MTP layer, MTP not trained): the export
    writes neither ``mtp.enable`` nor ``enable_train``, and plan.json says so."""
    from widgets.launcher_view import EXAMPLES

    imp = import_launcher(EXAMPLES / NOTEBOOK_LAUNCHER)
    assert imp.train_mtp is False and imp.plan()[0].valid
    plan = imp.to_export_plan()
    assert plan.train_mtp is False
    res = write(plan, tmp_path / "out")
    assert "mtp" not in res.files[res.launcher]
    assert json.loads(res.files["plan.json"])["train_mtp"] is False


def test_export_of_a_chosen_plan_trains_mtp_by_default(tmp_path):
    res = write(ExportPlan(model="Qwen3-Next-80B-A3B-Thinking", target="verl-mlite-grpo", nodes=1), tmp_path / "o")
    launcher = res.files[res.launcher]
    assert "actor_rollout_ref.model.mtp.enable=True" in launcher and "mtp.enable_train=True" in launcher
    assert json.loads(res.files["plan.json"])["train_mtp"] is None


def test_export_view_takes_the_planners_mtp_choice(tmp_path):
    """Notebook 01's path: read launcher -> planner.assume(train_mtp=...) -> the export view follows the planner."""
    from widgets.export_view import ExportView
    from widgets.planner import MeshPlanner

    planner = MeshPlanner("Qwen3-Next-80B-A3B-Thinking", ngpu=8, ep=8)
    view = ExportView("Qwen3-Next-80B-A3B-Thinking", out=str(tmp_path))
    view.follow(planner)
    assert view.plan().train_mtp is None
    planner.assume({}, train_mtp=False)
    assert view.plan().train_mtp is False
    assert "mtp.enable" not in view.export().files["run_verl_mlite_grpo.sh"]


def test_lite_sft_target_takes_the_optimizer_the_lite_engine_builds(tmp_path, capsys):
    out = tmp_path / "lite"
    assert main(["export", "tiny-moe", "--target", "verl-lite-sft", "--nodes", "1", "--out", str(out)]) == 0
    capsys.readouterr()
    assert json.loads((out / "plan.json").read_text())["options"]["optimizer"] == "fsdp2"
    assert main(["export", "tiny-moe", "--target", "verl-mlite-sft", "--nodes", "1", "--out", str(tmp_path / "m")]) == 0
    capsys.readouterr()
    assert json.loads((tmp_path / "m" / "plan.json").read_text())["options"]["optimizer"] == "dist_opt"
    rc = main(
        [
            "export",
            "tiny-moe",
            "--target",
            "verl-lite-sft",
            "--nodes",
            "1",
            "--optimizer",
            "dist_opt",
            "--out",
            str(tmp_path / "x"),
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2 and "dist_opt is not run by verl's lite engine" in err and not (tmp_path / "x").exists()


def test_notebook_01_read_launcher_then_write_files_gives_a_plan_debug_this_plan_takes(tmp_path, monkeypatch):
    """Notebook 01's cells with their own arguments: read the default launcher, *Write files* (the export view
    following the planner and the memory view), then notebook 02's cell's call: the newest plan, shrunk to 2
    processes (the launcher's EP 8 -> 2), a mesh the planner accepts, no MTP training exported."""
    from widgets.export_view import ExportView
    from widgets.launcher_view import LauncherView
    from widgets.memory_view import MemoryView
    from widgets.model_explorer import ModelExplorer
    from widgets.planner import MeshPlanner

    monkeypatch.delenv("MLITE_RUNS", raising=False)
    monkeypatch.chdir(tmp_path)
    explorer = ModelExplorer("Qwen3-30B-A3B")
    planner = MeshPlanner(explorer, ngpu=16, ep=8)
    memory = MemoryView(planner, gpu="H100")
    launcher = LauncherView(planner, memory, explorer=explorer)
    launcher.pick.value = NOTEBOOK_LAUNCHER
    launcher.load()
    export = ExportView(planner.model_ref)
    export.follow(planner, memory)
    res = export.export()
    assert "mtp" not in res.files[res.launcher]
    plan = newest_plan()
    assert plan is not None and str(plan) == res.paths[-1]
    doc = json.loads(plan.read_text())
    assert (doc["model"], doc["mesh"]["tp"], doc["mesh"]["ep"]) == ("Qwen3.5-35B-A3B", 2, 8)
    cfg, said = config_from_plan(plan, nproc=2, steps=2, device="cpu", tokens_per_microbatch=64)
    assert (cfg.tp, cfg.ep, cfg.nproc) == (2, 2, 2) and "ep 8 -> 2 (nproc 2)" in said
    cfg.check_environment()  # what mlite.launch.start checks before a process starts


def test_a_cut_real_model_trains_with_the_from_plan_defaults(tmp_path, capsys):
    """A cut Qwen3-30B-A3B from its plan (EP 2, 2 CPU processes, 64 tokens), no --lr: after the first update
    (step 1 is the warmup's lr 0) the loss never rises above where it started and ends lower (the run's 3e-3
    went 9.03 -> 12.9 -> 17.3 here)."""
    plan = _plan(tmp_path, ep=2)
    out = tmp_path / "run"
    argv = ["run", "--from-plan", str(plan), "--steps", "5", "--nproc", "2", "--device", "cpu"]
    rc = main([*argv, "--tokens-per-microbatch", "64", "--out", str(out)])
    stdout = capsys.readouterr().out
    assert rc == 0, (out / "train.log").read_text()
    assert "plan shrunk: lr 0.0003" in stdout
    loss = [json.loads(line)["data"]["train/loss"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(loss) == 5 and max(loss[2:]) < loss[1] and loss[-1] < loss[1] - 1.0, loss
