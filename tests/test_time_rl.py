"""The RL step's time phase by phase (mlite.time.rl, ``mlite time --rl``)."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from dataclasses import replace

import pytest

from mlite.memory.rl_options import RolloutOptions
from mlite.mesh import ParallelConfig, resolve
from mlite.models import from_hf_config
from mlite.options import TrainingOptions
from mlite.paths import REPO_ROOT
from mlite.time import load_hardware, predict
from mlite.time.rl import VERL_TIMING, rl_step_time


def _job(**kw):
    spec = from_hf_config("Qwen3-8B")
    r = RolloutOptions(
        tensor_model_parallel_size=2,
        prompt_length=512,
        response_length=1024,
        n=8,
        train_batch_size=64,
        gpu_memory_utilization=0.6,
        **kw,
    )
    o = TrainingOptions(seq_len=r.seq_tokens, num_microbatches=16, gpu_memory_gib=80.0)
    plan = resolve(spec, 8, ParallelConfig(tp=2), seq_len=o.seq_len)
    return spec, plan, o, r


def test_phases_are_verls_and_add_up():
    spec, plan, o, r = _job()
    hw = load_hardware("H100")
    t = rl_step_time(spec, plan, o, r, hw)
    assert set(t.phases) <= set(VERL_TIMING) and {"generate", "old_log_prob", "ref", "update_actor"} <= set(t.phases)
    assert t.step_s == pytest.approx(sum(t.phases.values()))
    # the update is whole optimizer steps of micro_batch_size x num_microbatches x DP sequences
    seqs, mini = r.train_batch_size * r.n, o.micro_batch_size * o.num_microbatches * plan.dp
    assert t.update_steps == -(-seqs // mini)
    assert t.phases["update_actor"] == pytest.approx(t.update_steps * predict(spec, plan, o, hw).step_s)
    # a log-prob forward costs about a third of a training step's compute over the same tokens
    assert 0.2 < t.phases["old_log_prob"] / t.phases["update_actor"] < 0.5


def test_decode_is_memory_bound_and_grows_with_the_response():
    spec, plan, o, r = _job()
    hw = load_hardware("H100")
    short = rl_step_time(spec, plan, o, r, hw)
    long = rl_step_time(spec, plan, o, replace(r, response_length=2 * r.response_length), hw)
    assert long.phases["generate"] > 1.9 * short.phases["generate"]
    g = short.generation
    # each decode step at least reads the GPU's weight shard at the HBM rate
    assert g["decode_step_s"] >= g["weights_gib_per_gpu"] * 2**30 / hw.hbm_bytes_per_s
    more = rl_step_time(spec, plan, o, replace(r, max_num_seqs=16), hw)
    assert more.generation["waves"] > g["waves"] and more.phases["generate"] > short.phases["generate"]


def test_context_offload_moves_what_the_flags_name():
    spec, plan, o, r = _job()
    hw = load_hardware("H100")
    none = rl_step_time(spec, plan, o, r, hw)
    both = rl_step_time(spec, plan, replace(o, param_offload=True, optimizer_offload=True), r, hw)
    params = rl_step_time(spec, plan, replace(o, param_offload=True), r, hw)
    assert "context_offload" not in none.phases
    assert both.phases["context_offload"] > params.phases["context_offload"] > 0
    assert "ref" not in rl_step_time(spec, plan, o, replace(r, ref="none"), hw).phases


def _cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "mlite", "time", *args],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin"},
        cwd="/",
    )


def test_cli_rl_json_and_missing_flags():
    common = shlex.split("Qwen3-8B --ngpu 8 --tp 2 --hardware H100 --gpu-mem H100 --num-microbatches 16")
    rl = "--rl --rollout vllm --rollout-tp 2 --prompt-len 512 --response-len 1024 --rollout-n 8 --rollout-batch 64"
    r = _cli(*common, *shlex.split(rl), "--gpu-memory-utilization", "0.6", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["rl_step_s"] == pytest.approx(sum(d["rl_phases"].values()))
    assert d["verl_timing_keys"]["generate"] == "timing_s/gen"
    assert d["step_s"] > 0 and "parts" in d  # the training step keeps its keys and meaning
    bad = _cli(*common, "--rl", "--prompt-len", "512")
    assert bad.returncode == 2 and "--rl needs" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
