"""verl's SFT trainer with the lite engine (``mlite run --trainer verl-sft``) on CPU, 2 ranks.

Oracles: verl's own file logger (the losses it logs), ``mlite logs compare`` (bitwise verdict of two runs), the lite
runtime run directly on the batch verl fed to step 1 (same loss normalisation), and the CLI's exit codes.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
assert importlib.util.find_spec("verl"), "verl (the verl extra) is part of the test environment"


def _env(**extra) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    env.update(extra)
    return env


def _mlite(*args, **env):
    return subprocess.Popen(
        [sys.executable, "-m", "mlite", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(**env),
        cwd=str(REPO),
    )


RUN = (
    "run",
    "--trainer",
    "verl-sft",
    "--model",
    "tiny-dense",
    "--steps",
    "4",
    "--nproc",
    "2",
    "--device",
    "cpu",
    "--json",
)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The fp32-master run (bf16 params) and the same run with --pao, started together (one run per core)."""
    tmp = tmp_path_factory.mktemp("verl")
    master = _mlite(
        *RUN, "--param-dtype", "bf16", "--out", str(tmp / "master"), MLITE_VERL_DUMP_BATCH=str(tmp / "batch")
    )
    pao = _mlite(*RUN, "--pao", "--out", str(tmp / "pao"))
    docs = {}
    for name, p in (("master", master), ("pao", pao)):
        out, err = p.communicate(timeout=240)
        assert p.returncode == 0, f"{name}: {out[-2000:]}\n{err[-2000:]}"
        docs[name] = json.loads(out)
    return tmp, docs


def _losses(run_dir: Path) -> list[float]:
    recs = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r["data"]["train/loss"] for r in recs]


def test_verl_sft_completes_loss_falls_and_log_parses(runs):
    from mlite.logs import read_log

    tmp, docs = runs
    assert docs["master"]["status"] == "completed" and docs["master"]["steps"] == 4
    losses = _losses(tmp / "master")
    assert len(losses) == 4 and losses[-1] < losses[0]
    log = read_log(tmp / "master")
    assert (log.first_step, log.last_step, log.num_steps) == (1, 4, 4)
    assert list(log.series("train/loss").values) == pytest.approx(losses, rel=0, abs=0)
    jsonl = read_log(tmp / "master" / "metrics.jsonl")  # verl's file logger output, read like any verl log
    assert jsonl.num_steps == 4
    console = read_log(tmp / "master" / "console.log")  # verl's own console lines (step:N - train/loss:...)
    assert console.format == "verl" and list(console.series("train/loss").values) == pytest.approx(losses, rel=1e-6)
    assert "verl.trainer.sft_trainer" in (tmp / "master" / "command.txt").read_text()
    assert "engine=lite" in (tmp / "master" / "command.txt").read_text()


def test_pao_bitwise_equal_to_fp32_master(runs):
    tmp, _ = runs
    p = subprocess.run(
        [sys.executable, "-m", "mlite", "logs", "compare", "--strict", "--json", str(tmp / "pao"), str(tmp / "master")],
        capture_output=True,
        text=True,
        env=_env(),
        cwd=str(REPO),
    )
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-1000:]
    assert _losses(tmp / "pao") == _losses(tmp / "master")


def test_first_step_loss_equals_plain_lite_runtime_on_the_same_batch(runs):
    """The lite runtime alone (one process, both ranks' micro-batches) on the batch verl fed to step 1 gives verl's
    logged step-1 loss: the normalisation (sum of token losses / loss tokens of the global batch) is the same."""
    import torch

    from mlite.runtime import MegatronLiteConfig, OptimizerConfig, PackedBatch, RuntimeConfig, create_runtime

    tmp, _ = runs
    mbs = [PackedBatch(**d) for r in (0, 1) for d in torch.load(tmp / "batch" / f"first_batch_rank{r}.pt")]
    rt = create_runtime(
        RuntimeConfig(
            hf_path="tiny-dense",
            device="cpu",
            param_dtype="bf16",
            seed=0,
            backend_cfg=MegatronLiteConfig(optimizer=OptimizerConfig(lr=3e-3)),
        )
    )
    out = rt.forward_backward(rt.build_model(), mbs, forward_only=True)
    verl_loss = _losses(tmp / "master")[0]
    assert out["loss"] == pytest.approx(verl_loss, rel=1e-6)  # verl logs the float32 value


@pytest.mark.parametrize(
    "extra, field",
    [
        (("--verl-overrides", "engine.no_such_key=1"), "engine.no_such_key"),
        (("--nproc", "2", "--tp", "3"), "mesh"),
        (("--verl-overrides", "engine.tp=2"), "--tp"),
    ],
)
def test_bad_input_exits_2_with_one_line(tmp_path, extra, field):
    p = _mlite(
        "run",
        "--trainer",
        "verl-sft",
        "--model",
        "tiny-dense",
        "--steps",
        "4",
        "--nproc",
        "2",
        "--device",
        "cpu",
        *extra,
        "--out",
        str(tmp_path / "r"),
    )
    out, err = p.communicate(timeout=60)
    assert p.returncode == 2, out + err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and field in lines[0], err
    assert not (tmp_path / "r").exists()


def test_import_mlite_does_not_import_verl():
    code = (
        "import sys, mlite, mlite.options, mlite.launch, mlite.launch.verl_sft; "
        "print(any(m == 'verl' or m.startswith('verl.') for m in sys.modules))"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env())
    assert p.stdout.strip() == "False", p.stderr


def test_cpu_peak_memory_is_reported(runs):
    """The shim's peak counters are the process's peak RSS: a CPU run reports a peak, not 0."""
    _, docs = runs
    assert docs["master"]["peak_memory_bytes"] > 50 * 2**20


@pytest.mark.parametrize("steps, style, decay_steps", [(2, "constant", None), (3, "constant", None), (4, "cosine", 4)])
def test_verl_sft_lr_schedule_is_the_kit_trainers(tmp_path, steps, style, decay_steps):
    """verl-sft gets the schedule the kit's own trainer runs: a run no longer than its warmup plus one step is
    constant (verl's cosine needs decay steps beyond the warmup: ``--steps 2`` failed inside the worker)."""
    from mlite.launch.config import RunConfig
    from mlite.launch.verl_sft import hydra_overrides

    cfg = RunConfig(model="tiny-dense", steps=steps, trainer="verl-sft", nproc=2, device="cpu")
    over = hydra_overrides(cfg, tmp_path)
    assert f"optim.lr_decay_style={style}" in over
    assert f"optim.lr_decay_steps={'null' if decay_steps is None else decay_steps}" in over
    opt = cfg.runtime_config().optimizer
    assert (opt.lr_decay_style, opt.lr_decay_steps) == (style, decay_steps)


def test_verl_sft_data_workers_follow_the_device(tmp_path):
    """verl's dataloader tokenizes ahead in worker processes on a GPU run, in the trainer's process on a CPU run."""
    from mlite.launch.config import RunConfig
    from mlite.launch.verl_sft import DATA_WORKERS, hydra_overrides

    for device in ("cpu", "cuda"):
        cfg = RunConfig(model="tiny-dense", steps=3, trainer="verl-sft", nproc=1, device=device)
        over = [o for o in hydra_overrides(cfg, tmp_path) if o.startswith("data.num_workers=")]
        assert over == [f"data.num_workers={DATA_WORKERS[device]}"]
    assert DATA_WORKERS["cpu"] == 0 < DATA_WORKERS["cuda"]
