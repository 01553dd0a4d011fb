"""#27: the log-prob forwards' own micro-batch, PPO's critic and verl's Megatron offload in ``mlite rl-memory``.

Oracles are verl's code (verl-project/verl main = 1dda039b9c6311889a9c9a26040677e1254814f9, v0.7.0 = f9c855f7):
``need_critic`` (verl/trainer/ppo/utils.py), ``offload_megatron_model_to_cpu`` (verl/utils/megatron_utils.py),
``ActorRolloutRefWorker.init_model`` / ``compute_log_prob`` (verl/workers/engine_workers.py,
verl/workers/megatron_workers.py @ v0.7.0), ``CriticWorker.compute_values`` (verl/workers/megatron_workers.py
@ v0.7.0), and the kit's own training estimate for the value model."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from mlite.cli import main
from mlite.errors import MliteError
from mlite.memory.estimate import estimate
from mlite.memory.rl import rl_estimate
from mlite.memory.rl_critic import CriticOptions, value_spec
from mlite.memory.rl_fsdp import FsdpOptions
from mlite.memory.rl_options import RolloutOptions
from mlite.memory.rl_phases import CRITIC_PHASES, PHASES
from mlite.mesh import ParallelConfig, resolve
from mlite.models import from_hf_config
from mlite.options import TrainingOptions

Q8 = from_hf_config("Qwen3-8B")
PLAN = resolve(Q8, 8, ParallelConfig(tp=2), seq_len=1536)
OPTS = TrainingOptions(seq_len=1536, gpu_memory_gib=141.0)
R = RolloutOptions(tensor_model_parallel_size=2, prompt_length=512, response_length=1024, gpu_memory_utilization=0.3)
GAE = CriticOptions(adv_estimator="gae", tp=2)


def _gpu(est, ph, part=None):
    p = est.phases[ph]
    return p.gpu_total if part is None else p.gpu.get(part, 0.0)


def _no_grad_forward(w, tokens: int, entropy: bool) -> float:
    """The oracle of a forward-only pass under torch.no_grad (megatron_actor.py @ v0.7.0): one layer's input and
    the token ids held, then the larger of one layer's rebuild and the head: the final norm, the gathered bf16 hidden
    states and verl's fp32 logits over [tokens, V/TP] (Float16Module's fp32 output: 1 fp32 copy + its bf16 source;
    with the entropy the logits, their clone and vocab_parallel_entropy's shifted copy: 3 fp32)."""
    held = w.activations["layer_inputs"] / len(Q8.main_layers) + w.activations["embedding"]
    v_local = PLAN.padded_vocab / PLAN.parallel.tp
    logits = (3 * 4 if entropy else 4 + 2) * tokens * v_local
    head = w.activations["final_norm"] + 2 * tokens * Q8.hidden_size + logits
    return held + max(w.transients["recompute_layer"], head)


# ------------------------------------------------------------------------- log_prob_micro_batch_size_per_gpu
@pytest.mark.parametrize(
    "field, phase",
    [("log_prob_micro_batch_size_per_gpu", "old_log_prob"), ("ref_log_prob_micro_batch_size_per_gpu", "ref")],
)
def test_megatron_forward_sized_by_its_own_micro_batch(field, phase):
    """verl hands ``rollout.`` / ``ref.log_prob_micro_batch_size_per_gpu`` to the forward, not the update's."""
    r = replace(R, ref="colocated")
    base = rl_estimate(Q8, PLAN, OPTS, r)
    four = rl_estimate(Q8, PLAN, OPTS, r, FsdpOptions(**{field: 4}))
    other = "ref" if phase == "old_log_prob" else "old_log_prob"
    assert _gpu(four, phase, "forward_activations") > 3 * _gpu(base, phase, "forward_activations")
    assert _gpu(four, other, "forward_activations") == pytest.approx(_gpu(base, other, "forward_activations"))
    assert _gpu(four, "actor_update") == pytest.approx(_gpu(base, "actor_update"))
    # the oracle: the kit's forward estimate at those rows (the update's micro-batch is 1)
    fwd = estimate(Q8, PLAN, replace(OPTS, recompute="full", num_microbatches=1, micro_batch_size=4), explain=False)
    w = fwd.worst
    assert _gpu(four, phase, "forward_activations") == pytest.approx(
        _no_grad_forward(w, 4 * 1536, phase == "old_log_prob")
    )


def test_megatron_dynamic_forward_sized_by_log_prob_max_token_len():
    """With use_dynamic_bsz one packed micro-batch holds log_prob_max_token_len_per_gpu tokens (unset: the
    actor's ppo_max_token_len_per_gpu, verl's oc.select default)."""
    r = replace(R, ref="colocated")
    est = rl_estimate(Q8, PLAN, OPTS, r, FsdpOptions(use_dynamic_bsz=True, log_prob_max_token_len_per_gpu=3072))
    fwd = estimate(Q8, PLAN, replace(OPTS, recompute="full", num_microbatches=1, seq_len=3072), explain=False).worst
    assert _gpu(est, "old_log_prob", "forward_activations") == pytest.approx(_no_grad_forward(fwd, 3072, True))
    assert _gpu(est, "ref", "forward_activations") > _gpu(est, "old_log_prob", "forward_activations")  # 16384


def test_megatron_log_prob_head_entropy_and_fused_kernels():
    """old_log_prob computes the entropy (megatron_workers.py line 857 @ v0.7.0), the reference not (line 828): at the
    same rows the difference is 1.5 fp32 [tokens, V/TP] copies (the clone and the entropy's shifted copy against the
    cast's bf16 source); use_fused_kernels computes both from the hidden states, no logits."""
    r = replace(R, ref="colocated")
    f = FsdpOptions(log_prob_micro_batch_size_per_gpu=4, ref_log_prob_micro_batch_size_per_gpu=4)
    est = rl_estimate(Q8, PLAN, OPTS, r, f)
    tokens, v_local = 4 * 1536, PLAN.padded_vocab / PLAN.parallel.tp
    gap = _gpu(est, "old_log_prob", "forward_activations") - _gpu(est, "ref", "forward_activations")
    assert gap == pytest.approx(1.5 * 4 * tokens * v_local)
    fused = rl_estimate(Q8, PLAN, OPTS, r, replace(f, use_fused_kernels=True))
    assert _gpu(fused, "old_log_prob", "forward_activations") == pytest.approx(
        _gpu(fused, "ref", "forward_activations")
    )
    assert _gpu(fused, "ref", "forward_activations") < _gpu(est, "ref", "forward_activations") - 4 * tokens * v_local


# ----------------------------------------------------------------------------------------------- the critic
def test_grpo_has_no_critic_and_gae_adds_its_phases():
    grpo = rl_estimate(Q8, PLAN, OPTS, R)
    assert tuple(grpo.phases) == tuple(p for p in PHASES if p in grpo.phases) and grpo.critic is None
    assert not any(p in grpo.phases for p in CRITIC_PHASES) and "critic" not in grpo.to_dict()
    ppo = rl_estimate(Q8, PLAN, OPTS, R, critic=GAE)
    names = list(ppo.phases)
    assert (
        names.index("ref") < names.index("critic_values") < names.index("critic_update") < names.index("actor_update")
    )
    # verl's need_critic: critic.enable overrides the estimator
    assert rl_estimate(Q8, PLAN, OPTS, R, critic=CriticOptions(enable=True)).critic is not None
    assert rl_estimate(Q8, PLAN, OPTS, R, critic=CriticOptions(adv_estimator="gae", enable=False)).critic is None


def test_critic_state_is_the_value_models_training_estimate_and_sits_in_every_other_phase():
    ppo = rl_estimate(Q8, PLAN, OPTS, R, critic=GAE)
    grpo = rl_estimate(Q8, PLAN, OPTS, R)
    vs = value_spec(Q8)
    assert vs.total == Q8.total - Q8.lm_head + Q8.hidden_size  # the LM head becomes hidden -> 1
    vplan = resolve(vs, 8, ParallelConfig(tp=2), seq_len=1536)
    w = estimate(vs, vplan, OPTS, explain=False).worst
    assert ppo.critic.rank.params == pytest.approx(w.params)
    assert ppo.critic.rank.idle_gpu == pytest.approx(w.idle_gpu)  # no offload: everything stays
    assert "logits_grad" not in ppo.critic.rank.transients and ppo.critic.rank.peak < w.peak
    for ph in ("old_log_prob", "ref", "actor_update", "weight_sync"):
        if ph in grpo.phases:
            assert _gpu(ppo, ph) - _gpu(grpo, ph) == pytest.approx(w.idle_gpu)
    assert _gpu(ppo, "critic_update", "critic_training_peak") == pytest.approx(ppo.critic.rank.peak)


def test_critic_offload_frees_params_and_grad_buffer_outside_its_calls():
    off = rl_estimate(Q8, PLAN, OPTS, R, critic=replace(GAE, param_offload=True, optimizer_offload=True))
    on = rl_estimate(Q8, PLAN, OPTS, R, critic=GAE)
    k = on.critic.rank
    # offload_megatron_model_to_cpu: params to the host, grad_data resized to 0; optimizer to the host
    assert off.critic.rank.idle_gpu == pytest.approx(0.0, abs=1.0)
    assert _gpu(on, "old_log_prob") - _gpu(off, "old_log_prob") == pytest.approx(k.idle_gpu)
    # compute_values is eval mode: params back, no grads, no optimizer
    vals = off.phases["critic_values"].gpu
    assert vals["critic_params"] == pytest.approx(k.params) and vals.get("critic_resident", 0.0) < 1.0
    assert _gpu(off, "critic_update") == pytest.approx(_gpu(on, "critic_update"))
    assert off.phases["old_log_prob"].host["critic_offloaded_params"] == pytest.approx(k.params)


def test_critic_micro_batch_sizes_its_update_and_values_forward():
    one = rl_estimate(Q8, PLAN, OPTS, R, critic=GAE)
    four = rl_estimate(Q8, PLAN, OPTS, R, critic=replace(GAE, ppo_micro_batch_size_per_gpu=4))
    assert four.critic.forward > 3 * one.critic.forward
    assert four.critic.rank.activation_total > 3 * one.critic.rank.activation_total


def test_critic_options_given_with_grpo_warn_as_verl_does():
    est = rl_estimate(Q8, PLAN, OPTS, R, critic=CriticOptions(tp=2))
    assert est.critic is None
    assert any("Disabled critic" in w for w in est.warnings)


@pytest.mark.parametrize(
    "kw", [{"ppo_micro_batch_size_per_gpu": 0}, {"adv_estimator": "ppo"}, {"tp": 0}, {"strategy": "deepspeed"}]
)
def test_bad_critic_options_are_refused(kw):
    with pytest.raises(MliteError):
        CriticOptions(**kw)


ARGS = ["Qwen3-8B", "--ngpu", "8", "--tp", "2", "--gpu-mem", "H200", "--rollout", "vllm", "--rollout-tp", "2"]
ARGS += ["--prompt-len", "512", "--response-len", "1024", "--gpu-memory-utilization", "0.3"]
ARGS += ["--rollout-n", "8", "--rollout-batch", "128"]


def test_cli_critic_flags_and_bad_input_exit_2(capsys):
    rc = main(
        [
            "rl-memory",
            *ARGS,
            "--adv-estimator",
            "gae",
            "--critic-tp",
            "2",
            "--critic-micro-batch",
            "2",
            "--log-prob-micro-batch",
            "2",
            "--json",
        ]
    )
    d = json.loads(capsys.readouterr().out)
    assert rc == 0 and {"critic_values", "critic_update"} <= set(d["phases"])
    assert d["critic"]["options"]["ppo_micro_batch_size_per_gpu"] == 2
    rc = main(["rl-memory", *ARGS, "--adv-estimator", "gae", "--critic-micro-batch", "0"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "critic.ppo_micro_batch_size_per_gpu" in err and len(err.strip().splitlines()) == 1


def test_rl_view_shows_the_critic_rows_and_its_command_reproduces_them():
    from mlite.cli.rl_memory import estimate_command
    from widgets.memory_view import MemoryView
    from widgets.planner import MeshPlanner
    from widgets.rl_view import RLView

    memory = MemoryView(MeshPlanner("Qwen3-8B", ngpu=8, tp=2), gpu="H200")
    view = RLView(
        memory,
        critic=CriticOptions(adv_estimator="gae", tp=2),
        tensor_model_parallel_size=2,
        prompt_length=512,
        response_length=1024,
        n=8,
        train_batch_size=128,
        gpu_memory_utilization=0.3,
    )
    assert view.ppo_critic.value and set(CRITIC_PHASES) <= set(view.estimate.phases)
    assert all(f'data-phase="{p}"' in view.chart.value for p in CRITIC_PHASES)
    again = estimate_command(view.command())
    assert again.to_dict()["phases"] == view.estimate.to_dict()["phases"]
    view.ppo_critic.value = False
    assert not set(CRITIC_PHASES) & set(view.estimate.phases) and "--adv-estimator" not in view.command()
