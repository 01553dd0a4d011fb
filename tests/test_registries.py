"""A new optimizer algorithm is one registry entry: a toy (plain SGD: no state, one refusal rule, a runtime class)
registered by one small module appears in ``mlite memory --help``, the options table's choices, the verl keys the
export writes, the memory view's control, the estimator's state bytes and ``mlite run`` (a 2-step CPU run with it
completes; ``$MLITE_PLUGINS`` carries the entry into the run's worker processes). Nothing else is edited; the entry
is removed after the test."""

from __future__ import annotations

import importlib
import json
import os
import sys

import pytest
from conftest import assert_one_line_error, run_cli

from mlite.export import ExportPlan, render
from mlite.launch import RunConfig
from mlite.memory import estimate, state_bytes
from mlite.mesh import ParallelConfig, resolve
from mlite.models import from_hf_config
from mlite.options import ALGORITHMS, RUN, TRAINING, TrainingOptions
from mlite.options.table import rows_by_field

TOY = "toy_sgd"
TOY_MODULE = '''
"""A test's toy optimizer: plain SGD without state, on the lite runtime's fsdp2 backend."""

import torch

from mlite.errors import MliteError
from mlite.options.optimizers import ALGORITHMS, Algorithm
from mlite.runtime.optim.optimizer import ShardedAdamW


def on_the_device_only(o):
    """The toy's one refusal rule."""
    if o.offload_fraction:
        raise MliteError("offload_fraction: toy_sgd keeps no state to offload; use offload_fraction 0")


class ToySGD(ShardedAdamW):
    """p -= lr * clip * grad on every local shard (no state)."""

    def init_state(self):
        pass

    @torch.no_grad()
    def step_async(self, lr, scale):
        self.step_count += 1
        clip, finite = scale.tolist()
        zeros = {False: 0, True: 0}
        for s in self.slots:
            g = self._grad(s)
            if g is None:
                continue
            zeros[s.expert] += int(g.numel() - torch.count_nonzero(g))
            if finite:
                self._shard(s).add_(g.to(s.param.dtype), alpha=-lr * clip)
        return zeros[False], zeros[True]


ALGORITHMS.register(
    Algorithm(
        "toy_sgd",
        "plain SGD (a test's toy)",
        lambda o: (0, 0),
        runtime={"fsdp2": __name__ + ":ToySGD"},
        refuses=(on_the_device_only,),
    )
)
'''
MODEL = "Qwen3-8B"


@pytest.fixture
def toy(tmp_path, monkeypatch):
    """The toy's module on sys.path and imported (its entry registered); unregistered afterwards."""
    (tmp_path / "toy_sgd_plugin.py").write_text(TOY_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert TOY not in ALGORITHMS
    importlib.import_module("toy_sgd_plugin")
    env = {"MLITE_PLUGINS": "toy_sgd_plugin"}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])
    try:
        yield env
    finally:
        ALGORITHMS.unregister(TOY)
        sys.modules.pop("toy_sgd_plugin", None)


def test_the_toy_is_a_choice_of_the_table_the_help_and_the_memory_view(toy):
    assert TOY in rows_by_field(TRAINING)["optimizer_algorithm"].choices
    assert TOY in rows_by_field(RUN)["optimizer_algorithm"].choices
    for command in ("memory", "run"):
        res = run_cli(command, "--help", env=toy)
        assert res.rc == 0 and "{adam,sgd,muon,toy_sgd}" in res.out, res.err
    from widgets.memory_view import MemoryView
    from widgets.planner import MeshPlanner

    view = MemoryView(MeshPlanner(MODEL, ngpu=8), optimizer="fsdp2")
    control = view.controls["optimizer_algorithm"]
    assert TOY in [v for _, v in control.options]
    adam = view.estimate.worst.optimizer
    control.value = TOY
    assert view.options().optimizer_algorithm == TOY and view.errors.message == ""
    assert view.estimate.worst.exp_avg == 0 and view.estimate.worst.optimizer < adam  # its state bytes
    view.controls["offload_fraction"].value = 0.5  # its refusal, inline in one line
    assert view.errors.message.endswith("toy_sgd keeps no state to offload; use offload_fraction 0")


def test_the_estimator_reads_the_toys_state_bytes_and_rule(toy):
    sb = state_bytes(TrainingOptions(optimizer="fsdp2", optimizer_algorithm=TOY))
    assert (sb.exp_avg, sb.exp_avg_sq) == (0, 0) and sb.host_per_offloaded == sb.master
    spec = from_hf_config(MODEL)
    plan = resolve(spec, 8, ParallelConfig(), seq_len=4096)
    adam = estimate(spec, plan, TrainingOptions(optimizer="dist_opt"))
    mine = estimate(spec, plan, TrainingOptions(optimizer="dist_opt", optimizer_algorithm=TOY))
    assert mine.worst.exp_avg == mine.worst.exp_avg_sq == 0 < adam.worst.exp_avg
    res = run_cli("memory", MODEL, "--ngpu", "8", "--optimizer-algorithm", TOY, "--offload-fraction", "0.5", env=toy)
    assert_one_line_error(res, "offload_fraction: toy_sgd keeps no state to offload")


def test_the_export_writes_the_toy_as_verls_megatron_optimizer(toy):
    o = TrainingOptions(optimizer_algorithm=TOY)
    plan = ExportPlan(model=MODEL, target="verl-megatron-grpo", parallel=ParallelConfig(), options=o, nodes=1)
    res = render(plan)
    assert "actor_rollout_ref.actor.optim.optimizer=toy_sgd" in res.files[res.launcher]
    default = render(ExportPlan(model=MODEL, target="verl-megatron-grpo", parallel=ParallelConfig(), nodes=1))
    assert "optim.optimizer=" not in default.files[default.launcher]  # adam is verl's default: not written


def test_mlite_run_trains_two_cpu_steps_with_the_toy(toy, tmp_path):
    out = tmp_path / "run"
    args = ("--model", "tiny-dense", "--steps", "2", "--nproc", "1", "--device", "cpu", "--out", str(out))
    res = run_cli("run", *args, "--optimizer-algorithm", TOY, "--json", env=toy, timeout=600)
    assert res.rc == 0, (res.err, (out / "train.log").read_text()[-2000:] if (out / "train.log").exists() else "")
    doc = res.json()
    assert doc["status"] == "completed" and doc["steps"] == 2
    assert json.loads((out / "config.json").read_text())["optimizer_algorithm"] == TOY
    assert RunConfig.from_dict(json.loads((out / "config.json").read_text())).optimizer_algorithm == TOY
    bad = tmp_path / "bad"
    res = run_cli("run", *args[:-1], str(bad), "--optimizer-algorithm", TOY, "--offload-fraction", "1", env=toy)
    assert_one_line_error(res, "offload_fraction: toy_sgd keeps no state to offload")
    assert not bad.exists()


def test_a_plugin_that_does_not_import_is_one_line_and_exit_2(tmp_path):
    """``$MLITE_PLUGINS`` naming a module that is not there: every command says so in one line, no traceback."""
    res = run_cli("params", "tiny-dense", env={"MLITE_PLUGINS": "no_such_mlite_plugin"})
    assert_one_line_error(res, "MLITE_PLUGINS: cannot import no_such_mlite_plugin")
