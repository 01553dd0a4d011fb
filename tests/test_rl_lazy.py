"""Which training state exists at phase P of step k (mlite/memory/rl_lazy.py). Oracles: torch itself (AdamW creates
``exp_avg`` / ``exp_avg_sq`` at the first ``step()``; ``zero_grad()`` frees the gradients, as verl's
``update_policy`` / ``update_critic`` end with it: ``verl/workers/actor/dp_actor.py`` line 555 and
``verl/workers/critic/dp_critic.py`` line 262 @ v0.7.0 f9c855f7), verl's step order (``RayPPOTrainer.fit``), and the
engine's own start-up rule (``start_engine``) fed what exists before the first update."""

from __future__ import annotations

import pytest
import torch
from conftest import assert_one_line_error, run_cli

from mlite.errors import MliteError
from mlite.memory.estimate import GIB
from mlite.memory.rl import rl_estimate
from mlite.memory.rl_critic import CriticOptions
from mlite.memory.rl_engine import start_engine
from mlite.memory.rl_fsdp import FsdpOptions
from mlite.memory.rl_lazy import ENGINE_START, FSDP_GRADS_BETWEEN_UPDATES, absent, moments_exist
from mlite.memory.rl_metrics import ALLOCATED, predicted_metrics
from mlite.memory.rl_options import RolloutOptions
from mlite.mesh import ParallelConfig, resolve
from mlite.models import from_hf_config
from mlite.options import TrainingOptions

MODEL = "Qwen2.5-Math-7B-derived"


def test_torch_adamw_state_is_lazy_and_zero_grad_frees_the_gradients():
    """The two torch facts the rule stands on, checked against torch: no AdamW state before the first step(), both
    moments after it; ``zero_grad()`` (verl calls it bare) leaves ``.grad`` None."""
    lin = torch.nn.Linear(8, 4)
    opt = torch.optim.AdamW(lin.parameters(), lr=1e-3)
    assert len(opt.state) == 0 and all(p.grad is None for p in lin.parameters())
    lin(torch.randn(3, 8)).sum().backward()
    assert len(opt.state) == 0 and all(p.grad is not None for p in lin.parameters())
    opt.step()
    assert {k for p in lin.parameters() for k in opt.state[p]} >= {"exp_avg", "exp_avg_sq"}
    opt.zero_grad()
    assert all(p.grad is None for p in lin.parameters()) is (not FSDP_GRADS_BETWEEN_UPDATES)


def test_moments_follow_the_step_order():
    """Step 1 runs weight sync, rollout, old_log_prob, ref, critic values, critic update, actor update (the read):
    each owner's moments from its own update on; never at the engine's start-up; always from step 2."""
    before = ("weight_sync", "rollout", "old_log_prob", "ref", "critic_values")
    for ph in before:
        assert not moments_exist("actor", ph, 1) and not moments_exist("critic", ph, 1)
    assert not moments_exist("actor", "critic_update", 1) and moments_exist("critic", "critic_update", 1)
    assert moments_exist("actor", "actor_update", 1) and moments_exist("critic", "actor_update", 1)
    for k in (None, 2, 101):
        assert all(moments_exist(o, ph, k) for o in ("actor", "critic") for ph in (*before, "actor_update"))
    assert not moments_exist("actor", ENGINE_START) and not moments_exist("critic", ENGINE_START, 5)
    assert absent(3.0, "actor", "rollout", 1) == 3.0 and absent(3.0, "actor", "rollout", 2) == 0.0
    for bad in (0, -1, True, 1.5, "1"):
        with pytest.raises(MliteError, match="--logged-step"):
            moments_exist("actor", "rollout", bad)


def _ppo(strategy="fsdp", vllm="0.8.5", **fkw):
    spec = from_hf_config(MODEL)
    plan = resolve(spec, 8, ParallelConfig(), seq_len=2048)
    o = TrainingOptions(seq_len=2048, gpu_memory_gib=79.19)
    r = RolloutOptions(
        prompt_length=1024, response_length=1024, n=4, train_batch_size=64, vllm_version=vllm, verl_version="0.5"
    )
    f = FsdpOptions(strategy=strategy, **fkw)
    c = CriticOptions(adv_estimator="gae", strategy=strategy if strategy != "megatron" else "megatron")
    return spec, r, o, rl_estimate(spec, plan, o, r, f, c)


def test_step_one_phases_lack_exactly_the_moments_not_created_yet():
    """phases_at(1) = the steady phases less each owner's moments before its update; step >= 2 = the steady ones."""
    _spec, _r, _o, est = _ppo()
    am, cm = est.step.actor_moments, est.critic.moments
    assert am == pytest.approx(est.step.actor.exp_avg + est.step.actor.exp_avg_sq) and am > 0 and cm > 0
    steady, one = est.phases, est.phases_at(1)
    assert est.phases_at(2) is steady and est.phases_at(None) is steady
    for ph in ("rollout", "old_log_prob", "ref", "critic_values", "weight_sync"):
        if ph in steady:
            assert steady[ph].gpu_total - one[ph].gpu_total == pytest.approx(am + cm), ph
    assert steady["critic_update"].gpu_total - one["critic_update"].gpu_total == pytest.approx(am)
    assert one["actor_update"].gpu == steady["actor_update"].gpu
    pm1, pm = predicted_metrics(est, logged_step=1), predicted_metrics(est)
    assert pm1[ALLOCATED] <= pm[ALLOCATED] and predicted_metrics(est, logged_step=7) == pm


def test_global_kv_rule_sizes_the_pool_on_the_state_before_the_first_update():
    """vLLM's global rule (0.8.5: util x card less everything on the device) profiles before any update: the FSDP
    actor's and critic's fp32 parameters and the process's framework, no gradients, no moments."""
    spec, r, o, est = _ppo()
    act, crit = est.step.actor, est.critic.rank
    resident = act.params + est.step.framework + crit.params
    assert est.engine.kv == pytest.approx(start_engine(spec, r, o.gpu_memory_gib * GIB, resident).kv)
    assert est.engine.free_at_start == pytest.approx(o.gpu_memory_gib * GIB - resident)


def test_megatron_start_up_keeps_grad_buffer_and_main_params_not_the_moments():
    """Megatron-Core's DDP grad buffer and DistributedOptimizer main-param shards exist from the build, Adam's state
    from the first step (distrib_optimizer.py @ 00119989): the engine starts beside idle less the moments."""
    spec = from_hf_config(MODEL)
    plan = resolve(spec, 8, ParallelConfig(tp=2), seq_len=2048)
    o = TrainingOptions(seq_len=2048, gpu_memory_gib=79.19)
    r = RolloutOptions(prompt_length=1024, response_length=1024, n=4, train_batch_size=64, vllm_version="0.8.5")
    est = rl_estimate(spec, plan, o, r, FsdpOptions())
    s = est.step
    assert s.actor.grads > 0 and s.actor.master > 0 and s.actor_moments == s.actor.exp_avg + s.actor.exp_avg_sq > 0
    held = s.actor.idle_gpu - s.actor_moments + s.ref_gpu + s.framework
    assert est.engine.free_at_start == pytest.approx(o.gpu_memory_gib * GIB - held)
    off = rl_estimate(spec, plan, TrainingOptions(seq_len=2048, optimizer_offload=True), r, FsdpOptions())
    assert off.step.actor_moments == 0  # on the host between steps: nothing to be missing on the GPU


def test_cli_logged_step_adds_keys_and_keeps_the_others():
    base = ["rl-memory", MODEL, "--ngpu", "8", "--strategy", "fsdp", "--rollout", "vllm", "--rollout-tp", "2", "--prompt-len", "1024",
            "--response-len", "1024", "--rollout-n", "4", "--rollout-batch", "64", "--adv-estimator", "gae",
            "--json"]  # fmt: skip
    plain, at1 = run_cli(*base), run_cli(*base, "--logged-step", "1")
    a, b = plain.json(), at1.json()
    assert "logged_step" not in a and b["logged_step"] == 1
    assert set(b) - set(a) == {"logged_step", "phases_at_logged_step", "predicted_metrics_at_logged_step"}
    assert all(a[k] == b[k] for k in a)
    assert b["predicted_metrics_at_logged_step"][ALLOCATED] <= a["predicted_metrics"][ALLOCATED]
    assert b["phases_at_logged_step"]["rollout"]["gpu"] < a["phases"]["rollout"]["gpu"]
    assert_one_line_error(run_cli(*base, "--logged-step", "0"), "--logged-step")
