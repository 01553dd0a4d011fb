"""The log-prob forwards' sizing and PPO's critic through ``mlite export`` and ``mlite import-launcher``: one table of
keys (the rows of mlite/options/rl_fsdp.py and rl_critic.py) both ways, real launchers read, and the critic counted
in the actor's process (verl's fused WorkerDict). Oracles: the launch commands' own text, read with regexes."""

from __future__ import annotations

import re

import pytest
from conftest import REPO

from mlite.errors import MliteError
from mlite.export import ExportPlan, write
from mlite.export.importer import import_launcher
from mlite.memory.rl import rl_estimate
from mlite.memory.rl_critic import CriticOptions
from mlite.memory.rl_fsdp import FsdpOptions
from mlite.memory.rl_metrics import ALLOCATED, predicted_metrics
from mlite.memory.rl_options import RolloutOptions
from mlite.mesh import ParallelConfig, resolve
from mlite.models import from_hf_config
from mlite.options import TrainingOptions
from mlite.validation.rl_runs import launcher_text, load_runs

RL = REPO / "tests" / "data" / "rl"
PPO_MEGATRON = REPO / "tests/data/launchers/verl/main/examples/ppo_trainer/run_qwen3_8b_megatron.sh"


def _plan(**kw) -> ExportPlan:
    return ExportPlan(model="Qwen3-8B", target="verl-megatron-grpo", parallel=ParallelConfig(tp=4), **kw)


def test_export_then_import_gives_the_same_log_prob_and_critic_options(tmp_path):
    plan = _plan(
        log_prob_knobs={
            "log_prob_micro_batch_size_per_gpu": 16,
            "ref_log_prob_micro_batch_size_per_gpu": 12,
            "log_prob_max_token_len_per_gpu": 20480,
            "ref_log_prob_max_token_len_per_gpu": 10240,
        },
        critic=CriticOptions(
            adv_estimator="gae",
            model="tiny-qwen2",
            tp=2,
            pp=2,
            param_offload=True,
            optimizer_offload=True,
            ppo_micro_batch_size_per_gpu=4,
            ppo_max_token_len_per_gpu=16384,
            forward_max_token_len_per_gpu=40960,
        ),
    )
    write(plan, tmp_path)
    text = (tmp_path / "run_verl_megatron_grpo.sh").read_text()
    assert '"algorithm.adv_estimator=gae"' in text and '"critic.megatron.tensor_model_parallel_size=2"' in text
    imp = import_launcher(str(tmp_path / "run_verl_megatron_grpo.sh"))
    assert imp.critic_options() == plan.critic
    assert FsdpOptions(**imp.log_prob) == plan.log_prob_options
    assert not [k for k in imp.ignored if k.startswith("critic.") or "log_prob" in k]
    back = imp.to_export_plan()
    assert back.critic == plan.critic and back.log_prob_knobs == plan.log_prob_knobs


def test_a_grpo_export_writes_no_critic_and_reads_back_verls_default(tmp_path):
    write(_plan(), tmp_path)
    text = (tmp_path / "run_verl_megatron_grpo.sh").read_text()
    assert "critic." not in text and "log_prob" not in text
    imp = import_launcher(str(tmp_path / "run_verl_megatron_grpo.sh"))
    assert imp.critic_options() == CriticOptions() and not imp.critic_options().active


def test_a_critic_on_the_mlite_target_is_refused_naming_the_target():
    with pytest.raises(MliteError, match="verl-megatron-grpo"):
        ExportPlan(model="Qwen3-8B", target="verl-mlite-grpo", critic=CriticOptions(adv_estimator="gae"))
    with pytest.raises(MliteError, match="log_prob_knobs"):
        _plan(log_prob_knobs={"use_dynamic_bsz": False})


@pytest.mark.parametrize("run_id", ["grpo_qwen3_8b_megatron_8xc550_tuned", "grpo_qwen3_8b_megatron_8xc550_max"])
def test_the_c550_megatron_launchers_log_prob_micro_batches_are_read(run_id):
    run = next(r for r in load_runs(RL) if r["id"] == run_id)
    text = launcher_text(run, RL)
    imp = import_launcher(run_id, text=text)
    assert imp.target == "verl-megatron-grpo"
    for field, key in (
        ("log_prob_micro_batch_size_per_gpu", "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu"),
        ("ref_log_prob_micro_batch_size_per_gpu", "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu"),
    ):
        said = re.findall(rf"{re.escape(key)}=(\d+)", text)
        assert imp.log_prob[field] == int(said[-1])  # the last one wins, as in Hydra
        assert key not in imp.ignored
    assert imp.log_prob["log_prob_micro_batch_size_per_gpu"] in (16, 12)


def test_verls_ppo_megatron_example_reads_its_critic():
    text = PPO_MEGATRON.read_text()
    imp = import_launcher(str(PPO_MEGATRON))
    c = imp.critic_options()
    assert c.active and c.adv_estimator == "gae" and c.model is None  # CRITIC_MODEL_PATH defaults to MODEL_PATH
    assert c.tp == int(re.search(r"CRITIC_TP:-(\d+)", text)[1]) and c.pp == int(re.search(r"CRITIC_PP:-(\d+)", text)[1])
    assert not [k for k in imp.ignored if k.startswith("critic.megatron.") or k == "critic.ppo_max_token_len_per_gpu"]


def test_the_critic_counts_in_the_actors_allocated_figure_and_its_fsdp_state_is_lazy():
    """verl fuses the colocated critic into the actor's WorkerDict process: its parts are in the allocated figure
    (an oracle: the PPO estimate's allocated is at least the GRPO one's plus the critic's resident state); an FSDP
    critic holds only its weights when the engine sizes its KV cache."""
    spec = from_hf_config(str(RL / "models" / "Qwen2.5-0.5B-Instruct.json"))
    plan = resolve(spec, 1, ParallelConfig(), seq_len=768)
    o = TrainingOptions(seq_len=768, micro_batch_size=4, gpu_memory_gib=80)
    r = RolloutOptions(
        verl_version="0.9.0",
        tensor_model_parallel_size=1,
        prompt_length=256,
        response_length=512,
        gpu_memory_utilization=0.4,
    )
    f = FsdpOptions(strategy="fsdp")
    grpo = rl_estimate(spec, plan, o, r, f)
    ppo = rl_estimate(spec, plan, o, r, f, CriticOptions(adv_estimator="gae", strategy="fsdp"))
    k = ppo.critic
    assert k.plan is None and k.at_engine_start == pytest.approx(k.rank.params) and k.rank.params < k.rank.idle_gpu
    assert "logits" not in k.rank.activations and "values" in k.rank.activations
    gap = predicted_metrics(ppo)[ALLOCATED] - predicted_metrics(grpo)[ALLOCATED]
    assert gap >= k.rank.idle_gpu * 0.99
