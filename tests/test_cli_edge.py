"""Inputs checked at the edge, for every CLI command, run the way a user runs them: from their own directory (a tmp
folder, not the repository), with relative paths and their own model config copied there.

Good input works from there (relative paths are the caller's). Bad input (a missing file, a malformed config, an
invalid mesh for ``--nproc``, an unknown option value) exits 2 with one line on stderr and no traceback, before any
process starts, and leaves the directory exactly as it was: no run directory, no output file."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, CliResult, assert_one_line_error

from mlite.models import from_hf_config

SAMPLES = REPO / "data" / "logs"


def mlite(cwd: Path, *args, timeout: float = 300) -> CliResult:
    """``python -m mlite ARGS`` in ``cwd`` (this checkout's code; default runs go to ``cwd/../default-runs``)."""
    env = dict(os.environ, PYTHONWARNINGS="ignore", PYTHONPATH=str(REPO), MLITE_RUNS=str(cwd.parent / "default-runs"))
    p = subprocess.run(
        [sys.executable, "-m", "mlite", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env=env,
    )
    return CliResult(p.returncode, p.stdout, p.stderr)


def listing(root: Path) -> list[str]:
    """Every file and folder under ``root`` (relative), sorted."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.fixture
def home(tmp_path) -> Path:
    """A user's working directory: their own config (tiny-moe with 3 layers: not a shipped model), a malformed
    one, and copies of two sample runs under ``logs/``."""
    cwd = tmp_path / "work"
    cwd.mkdir()
    cfg = json.loads((REPO / "data" / "models" / "tiny-moe.json").read_text())
    cfg["num_hidden_layers"] = 3
    cfg.pop("mlp_only_layers", None)
    (cwd / "my-config.json").write_text(json.dumps(cfg))
    (cwd / "bad.json").write_text('{"model_type": "qwen3_moe", "hidden_size": ')
    (cwd / "bad.parquet").write_text("not a parquet file")
    for name in ("mlite_tiny_moe_fsdp2", "mlite_tiny_moe_pao"):
        shutil.copytree(SAMPLES / name, cwd / "logs" / name)
    return cwd


def _user_params(home: Path) -> int:
    return from_hf_config(home / "my-config.json").total


# ---------------------------------------------------------------------------------------------- good input
def test_params_mesh_memory_read_the_users_config_by_relative_path(home):
    total = _user_params(home)
    assert total != from_hf_config("tiny-moe").total  # the user's file, not the shipped model of that name
    res = mlite(home, "params", "my-config.json", "--json")
    assert res.rc == 0, res.err
    assert res.json()["total"] == total
    mesh = mlite(home, "mesh", "my-config.json", "--ngpu", "2", "--json")
    assert mesh.rc == 0 and mesh.json()["dp"] == 2, mesh.err
    mem = mlite(home, "memory", "my-config.json", "--ngpu", "2", "--seq-len", "512", "--json")
    assert mem.rc == 0 and mem.json()["fits"] is True, mem.err


def test_export_writes_where_the_user_is_and_import_launcher_reads_it_back(home):
    res = mlite(
        home,
        "export",
        "my-config.json",
        "--nodes",
        "1",
        "--gpus-per-node",
        "2",
        "--target",
        "verl-mlite-sft",
        "--out",
        "exported",
        "--json",
    )
    assert res.rc == 0, res.err
    launcher = res.json()["launcher"]
    assert (home / "exported" / launcher).is_file() and (home / "exported" / "plan.json").is_file()
    back = mlite(home, "import-launcher", f"exported/{launcher}", "--config", "my-config.json", "--json")
    assert back.rc == 0, back.err
    doc = back.json()
    assert (doc["ngpu"], doc["tp"], doc["dp"]) == (2, 1, 2)


ROLLOUT = ("--rollout", "vllm", "--rollout-tp", "1", "--prompt-len", "64", "--response-len", "64")
ROLLOUT += ("--rollout-n", "2", "--rollout-batch", "4")


def test_rl_memory_reads_the_users_config_by_relative_path(home):
    from mlite.cli.rl_memory import estimate_command

    before = listing(home)
    res = mlite(home, "rl-memory", "my-config.json", "--ngpu", "2", *ROLLOUT, "--json")
    assert res.rc == 0, res.err
    doc = res.json()
    # oracle: the same command through the library, with the config given by its absolute path
    want = estimate_command(" ".join(["mlite rl-memory", str(home / "my-config.json"), "--ngpu 2", *ROLLOUT]))
    assert doc["fits"] is True and doc == json.loads(json.dumps(want.to_dict(), default=str))
    assert listing(home) == before


def test_run_from_plan_reads_a_relative_plan_and_import_launcher_estimates(home):
    exp = mlite(
        home, "export", "my-config.json", "--nodes", "1", "--gpus-per-node", "2", "--target", "verl-mlite-sft",
        "--optimizer", "fsdp2", "--out", "exported", "--json",
    )  # fmt: skip
    assert exp.rc == 0, exp.err
    before = listing(home)
    res = mlite(
        home, "run", "--from-plan", "exported/plan.json", "--steps", "2", "--nproc", "2", "--device", "cpu",
        "--out", "runs/r1", "--dry-run",
    )  # fmt: skip
    assert res.rc == 0, res.err
    assert str(home / "runs" / "r1") in res.out and "mlite.launch.worker" in res.out
    est = mlite(
        home, "import-launcher", f"exported/{exp.json()['launcher']}", "--config", "my-config.json", "--estimate"
    )
    assert est.rc in (0, 1) and "Traceback" not in est.err, est.err  # a fit verdict, never bad input
    assert listing(home) == before and not (home.parent / "default-runs").exists()


def test_logs_commands_take_relative_paths(home):
    check = mlite(home, "logs", "check", "logs/", "--json")
    assert check.rc == 0, check.err
    runs = check.json()["runs"]
    assert sorted(r["path"] for r in runs) == ["logs/mlite_tiny_moe_fsdp2", "logs/mlite_tiny_moe_pao"]
    assert {(r["format"], r["num_steps"]) for r in runs} == {("mlite", 40)}
    assert mlite(home, "logs", "export", "logs/mlite_tiny_moe_fsdp2", "--csv", "out.csv").rc == 0
    assert (home / "out.csv").read_text().splitlines()[0] == "run,step,metric,value"
    assert mlite(home, "logs", "plot", "logs/mlite_tiny_moe_pao", "-o", "curves.png").rc == 0
    assert (home / "curves.png").read_bytes()[:4] == b"\x89PNG"
    cmp = mlite(home, "logs", "compare", "logs/mlite_tiny_moe_fsdp2", "logs/mlite_tiny_moe_pao", "--json")
    assert cmp.rc == 0 and cmp.json()["bitwise_equal"] is True


def test_run_dry_run_resolves_relative_paths_against_the_callers_directory(home):
    before = listing(home)
    res = mlite(
        home,
        "run",
        "--model",
        "my-config.json",
        "--steps",
        "2",
        "--nproc",
        "2",
        "--device",
        "cpu",
        "--out",
        "runs/r1",
        "--dry-run",
    )
    assert res.rc == 0, res.err
    assert str(home / "runs" / "r1") in res.out
    assert listing(home) == before and not (home.parent / "default-runs").exists()


@pytest.mark.slow
def test_run_from_another_directory_trains_the_users_relative_config(home):
    """The bug this guards: the workers start in the run directory, so a relative --model used to fail there."""
    res = mlite(
        home,
        "run",
        "--model",
        "my-config.json",
        "--steps",
        "2",
        "--nproc",
        "2",
        "--device",
        "cpu",
        "--out",
        "runs/r1",
        "--json",
        timeout=400,
    )
    assert res.rc == 0, (res.out, res.err)
    doc = res.json()
    assert doc["status"] == "completed" and doc["steps"] == 2 and doc["run_dir"] == str(home / "runs" / "r1")
    cfg = json.loads((home / "runs" / "r1" / "config.json").read_text())
    assert cfg["model"] == str(home / "my-config.json") and cfg["out"] == str(home / "runs" / "r1")
    world = next(ln for ln in (home / "runs" / "r1" / "train.log").read_text().splitlines() if "world:" in ln)
    assert f"{_user_params(home):,} parameters" in world  # the user's 3-layer model trained, not tiny-moe


# ---------------------------------------------------------------------------------------------- bad input
RUN = ("run", "--steps", "2", "--nproc", "2", "--device", "cpu", "--out", "runs/r1")
CFG = ("--model", "my-config.json")

BAD = [
    # missing file / malformed config
    (("params", "missing.json"), "missing.json"),
    (("params", "bad.json"), "invalid JSON"),
    (("mesh", "missing.json", "--ngpu", "2"), "missing.json"),
    (("mesh", "bad.json", "--ngpu", "2"), "invalid JSON"),
    (("memory", "bad.json", "--ngpu", "2"), "invalid JSON"),
    (("export", "missing.json", "--nodes", "1", "--target", "verl-mlite-sft", "--out", "exported"), "missing.json"),
    (("export", "bad.json", "--nodes", "1", "--target", "verl-mlite-sft", "--out", "exported"), "invalid JSON"),
    (("import-launcher", "missing.sh"), "missing.sh"),
    (("logs", "check", "missing.log"), "missing.log"),
    (("logs", "export", "missing.log", "--csv", "out.csv"), "missing.log"),
    (("logs", "compare", "logs/mlite_tiny_moe_fsdp2", "missing"), "missing"),
    ((*RUN, "--model", "missing.json"), "missing.json"),
    ((*RUN, "--model", "bad.json"), "invalid JSON"),
    ((*RUN, *CFG, "--dataset", "missing.parquet"), "missing.parquet"),
    ((*RUN, *CFG, "--dataset", "bad.parquet"), "not a readable parquet file"),
    # invalid mesh for --nproc / bad numbers
    (("run", *CFG, "--steps", "2", "--nproc", "5000", "--device", "cpu", "--out", "runs/r1"), "--nproc"),
    (("run", *CFG, "--steps", "2", "--nproc", "0", "--device", "cpu", "--out", "runs/r1"), "nproc"),
    (("mesh", "my-config.json", "--ngpu", "0"), "--ngpu"),
    ((*RUN, *CFG, "--offload-fraction", "2"), "offload_fraction"),
    (
        ("run", *CFG, "--steps", "5", "--nproc", "2", "--device", "cpu", "--out", "runs/r1", "--lr-warmup-steps", "9"),
        "lr_warmup_steps",
    ),
    # unknown option values
    (("run", *CFG, "--steps", "2", "--nproc", "2", "--device", "tpu", "--out", "runs/r1"), "--device"),
    ((*RUN, *CFG, "--recompute", "some"), "--recompute"),
    ((*RUN, *CFG, "--optimizer", "dist_opt", "--pao", "--no-distributed-optimizer"), "use_distributed_optimizer"),
    ((*RUN, *CFG, "--trainer", "verl-sft", "--optimizer", "dist_opt"), "is not run by verl's lite engine"),
    (("memory", "my-config.json", "--ngpu", "2", "--gpu-mem", "X1"), "--gpu-mem"),
    (("memory", "my-config.json", "--ngpu", "2", "--optimizer", "adam"), "--optimizer"),
    (("export", "my-config.json", "--nodes", "1", "--target", "nope", "--out", "exported"), "--target"),
    (  # the lite engine's target defaults to fsdp2 (tests/test_from_plan.py); dist_opt chosen is refused
        (
            "export",
            "my-config.json",
            "--nodes",
            "1",
            "--target",
            "verl-lite-sft",
            "--optimizer",
            "dist_opt",
            "--out",
            "exported",
        ),
        "dist_opt is not run by verl's lite engine",
    ),
    (("logs", "plot", "logs/mlite_tiny_moe_fsdp2", "-o", "p.png", "--metrics", "nope"), "nope"),
    (("logs", "check", "logs/", "--fail-on", "nope"), "--fail-on"),
    (("mesh", "my-config.json", "--ngpu", "2", "--list", "--limit", "0"), "--limit"),
    ((*RUN, *CFG, "--crash-at-step", "5"), "crash_at_step"),
    ((*RUN, *CFG, "--hf-checkpoint", "missing-dir"), "missing-dir"),
    (("run", "--from-plan", "missing-plan.json", *RUN[1:]), "missing-plan"),
    # dist_opt and its settings (the kit's trainer runs dist_opt; these combinations it does not)
    ((*RUN, *CFG, "--optimizer", "dist_opt", "--offload-fraction", "0.5"), "use --optimizer fsdp2 for an offloaded"),
    ((*RUN, *CFG, "--grad-dtype", "bf16"), "main_grads_dtype"),
    ((*RUN, *CFG, "--no-distributed-optimizer"), "is a dist_opt setting"),
    ((*RUN, *CFG, "--optimizer", "dist_opt", "--grad-dtype", "fp16"), "--grad-dtype"),
    # the verl-sft trainer: what it does not run is refused, not ignored
    ((*RUN, *CFG, "--trainer", "verl-sft", "--optimizer", "dist_opt", "--offload-fraction", "0.5"), "fsdp2 only"),
    ((*RUN, *CFG, "--trainer", "verl-sft", "--layers", "1"), "does not run --layers"),
    ((*RUN, *CFG, "--trainer", "verl-sft", "--num-microbatches", "2"), "does not run --num-microbatches"),
    ((*RUN, *CFG, "--trainer", "verl-sft", "--verl-overrides", "engine.nope=1"), "engine.nope"),
    ((*RUN, *CFG, "--trainer", "verl-sft", "--verl-overrides", "engine.tp=2"), "give --tp"),
    ((*RUN, *CFG, "--trainer", "nope"), "--trainer"),
    # rl-memory
    (("rl-memory", "missing.json", "--ngpu", "2", *ROLLOUT), "missing.json"),
    (("rl-memory", "bad.json", "--ngpu", "2", *ROLLOUT), "invalid JSON"),
    (("rl-memory", "my-config.json", "--ngpu", "2", *ROLLOUT[:1], "tgi", *ROLLOUT[2:]), "--rollout"),
    (("rl-memory", "my-config.json", "--ngpu", "2", *ROLLOUT, "--optimizer", "adam"), "--optimizer"),
    # an output that cannot be made
    ((*RUN[:-1], "bad.json/r1", *CFG), "bad.json"),
    (("logs", "plot", "logs/mlite_tiny_moe_fsdp2", "-o", "bad.json/p.png"), "bad.json"),
]


@pytest.mark.parametrize("args, needle", BAD, ids=[" ".join(a[:1] + a[-2:]) for a, _ in BAD])
def test_bad_input_exits_2_in_one_line_and_creates_nothing(home, args, needle):
    before = listing(home)
    res = mlite(home, *args)
    assert_one_line_error(res, needle)
    assert listing(home) == before
    assert not (home.parent / "default-runs").exists()


def test_dist_opt_on_cuda_passes_the_edge_as_the_worker_runs_it(monkeypatch):
    """The edge (``RunConfig.check_environment``) and the runtime agree: dist_opt on CUDA is accepted (the runtime
    implements it; bench/results/gpu_memory.csv has its H200 row), and only what CUDA lacks here is refused."""
    import torch

    from mlite.errors import MliteError
    from mlite.launch import RunConfig
    from mlite.runtime.config import check_backend

    cfg = RunConfig(
        model="tiny-moe", steps=2, nproc=2, device="cuda", optimizer="dist_opt", pao=True, grad_dtype="bf16"
    )
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    cfg.check_environment()
    opt = cfg.runtime_config().backend_cfg.optimizer
    check_backend("dist_opt", opt)  # the worker's own check of the same settings
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(MliteError, match="nproc: 2 processes but 1 GPU"):
        cfg.check_environment()


def test_the_workers_dataset_reader_names_the_file_and_column(tmp_path):
    """``load_sft_dataset`` (what a worker reads) turns pyarrow's refusals into one line naming the file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from mlite.errors import MliteError
    from mlite.runtime.data import load_sft_dataset

    pq.write_table(pa.table({"text": ["a"]}), tmp_path / "nocol.parquet")
    (tmp_path / "bad.parquet").write_text("not a parquet file")
    for name in ("nocol.parquet", "bad.parquet"):
        with pytest.raises(MliteError, match=f"dataset: cannot read column 'messages' of .*{name}"):
            load_sft_dataset(tmp_path / name)


def test_an_older_run_is_not_touched_without_overwrite(home):
    old = home / "runs" / "r1"
    old.mkdir(parents=True)
    (old / "train.log").write_text("# mlite-lab run log\n")
    before = listing(home)
    assert_one_line_error(mlite(home, *RUN, *CFG), "already holds a run", "--overwrite")
    assert listing(home) == before and (old / "train.log").read_text() == "# mlite-lab run log\n"


def test_invalid_mesh_is_a_verdict_for_the_judging_commands_and_bad_input_for_export(home):
    """``mlite mesh / memory`` judge a mesh (exit 1, reasons on stdout); ``mlite export`` cannot write a launcher for
    it (bad input: exit 2, one line) and writes no file (mlite.cli.EXIT_CODES)."""
    before = listing(home)
    for args in (
        ("mesh", "my-config.json", "--ngpu", "2", "--tp", "3"),
        ("memory", "my-config.json", "--ngpu", "2", "--tp", "3"),
    ):
        res = mlite(home, *args)
        assert res.rc == 1 and "not divisible by TP" in res.out and res.err == "", (args, res)
    export = ("export", "my-config.json", "--nodes", "1", "--gpus-per-node", "2", "--tp", "3")
    assert_one_line_error(
        mlite(home, *export, "--target", "verl-mlite-sft", "--out", "exported"), "not divisible by TP"
    )
    assert listing(home) == before


def test_validate_run_makes_every_path_absolute_from_the_callers_directory(home):
    from mlite.launch import RunConfig
    from mlite.launch.validate import validate_run

    (home / "my-data").mkdir()
    shutil.copy(REPO / "data" / "datasets" / "tiny_sft" / "train.parquet", home / "my-data" / "train.parquet")
    before = listing(home)
    cfg = validate_run(RunConfig(model="my-config.json", dataset="my-data", out="runs/r", steps=2), cwd=home)
    assert (cfg.model, cfg.dataset, cfg.out) == (
        str(home / "my-config.json"),
        str(home / "my-data"),
        str(home / "runs" / "r"),
    )
    named = validate_run(RunConfig(model="tiny-moe", out=str(home / "r2")), cwd=home)
    assert (named.model, named.dataset) == ("tiny-moe", "tiny_sft")  # names stay names (cwd-independent)
    assert listing(home) == before
