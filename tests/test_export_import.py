"""import-launcher: existing verl command lines back into a plan, and the bash reader under it.

Expected meshes of the fixtures (tests/data/launchers/) are worked out by hand in the comments from the runtime's
rule (dense ranks = TP*CP*DP*PP, expert ranks = ETP*EP*EDP*PP). The bash reader is checked against real bash.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest
from conftest import assert_one_line_error, run_cli

from mlite.errors import MliteError
from mlite.export import import_launcher
from mlite.export.validate import validate_command
from mlite.mesh import ParallelConfig
from mlite.shell.script import run_script, uses_launcher_rule

DATA = Path(__file__).resolve().parent / "data" / "launchers"


def _mesh(doc):
    return tuple(doc[k] for k in ("ngpu", "tp", "pp", "vpp", "cp", "ep", "etp", "dp", "edp"))


def test_resolved_dry_run_command_megatron():
    doc = import_launcher(DATA / "grpo_qwen3_30b_megatron_dryrun.txt").to_dict()
    # 4 x 8 = 32 GPUs; TP2 PP2 CP2 -> DP = 32/(2*2*2) = 4; expert_tensor_parallel_size absent (verl: null = TP):
    # ETP2 EP8 PP2 -> EDP = 32/(2*8*2) = 1
    assert _mesh(doc) == (32, 2, 2, 1, 2, 8, 2, 4, 1)
    assert doc["valid"] and doc["target"] == "verl-megatron-grpo" and doc["config_name"] == "ppo_megatron_trainer"
    assert doc["model_config"] == "Qwen3-30B-A3B"  # from model.path /shared/models/Qwen/Qwen3-30B-A3B
    o = doc["options"]
    assert (o["seq_len"], o["micro_batch_size"]) == (1024 + 3072, 2)
    assert o["use_precision_aware_optimizer"] and o["exp_avg_dtype"] == o["exp_avg_sq_dtype"] == "bf16"
    assert o["offload_fraction"] == 0.5 and o["param_offload"] and o["optimizer_offload"]
    assert (o["recompute"], o["recompute_modules"]) == ("selective", ["moe_act"])
    assert doc["unresolved"] == {}  # '${oc.env:HOME}' is a Hydra interpolation, single-quoted in bash
    assert any("actor_rollout_ref.ref.megatron.tensor_model_parallel_size" in w for w in doc["warnings"])
    assert not doc["launcher_rule"]["used"]


def test_script_with_arrays_case_and_verl_rule():
    imp = import_launcher(DATA / "grpo_kimi_mlite_arrays.sh")
    doc = imp.to_dict("Kimi-K2.6")
    # kimi_k2_6 branch: PP8; TP=2 sits in an if-block (not run): TP1. 32 x 8 = 256 GPUs;
    # DP = 256/(1*4*8) = 8, EDP = 256/(1*8*8) = 4; the script's own rule gives 256/8/(1*8) = 4
    assert _mesh(doc) == (256, 1, 8, 1, 4, 8, 1, 8, 4)
    assert doc["launcher_rule"] == {"used": True, "dp": 4}
    assert doc["layout_source"] == "auto"  # 61 layers over PP8
    w = " | ".join(doc["warnings"])
    assert "could not resolve $HOME (used in data.train_files, data.val_files)" in w
    assert "TP is also assigned inside an if/loop block" in w
    assert "computes DP with verl's rule" in w and "DP = 8" in w
    assert doc["options"]["optimizer"] == "fsdp2" and doc["options"]["recompute"] == "full"
    assert doc["options"]["offload_fraction"] == 1.0
    assert "HOME" in doc["unresolved"]
    # the other case branch sets PP=16; ${TP:-1} takes the environment's value
    other = import_launcher(
        DATA / "grpo_kimi_mlite_arrays.sh", env={"MODEL_VARIANT": "glm5_1", "TP": "2", "HOME": "/home/u"}
    ).to_dict("Kimi-K2.6")
    # TP2 CP4 PP16 -> DP = 256/(2*4*16) = 2; ETP1 EP8 PP16 -> EDP = 256/(1*8*16) = 2
    assert _mesh(other) == (256, 2, 16, 1, 4, 8, 1, 2, 2)
    assert other["unresolved"] == {}


def test_torchrun_sft_script():
    doc = import_launcher(DATA / "sft_qwen35_mlite_torchrun.sh").to_dict()
    # 2 x 8 = 16 GPUs; TP2 CP2 PP1 -> DP = 16/4 = 4; EP = $((NPROC)) = 8, ETP unset (mlite: 1) -> EDP = 16/8 = 2
    assert _mesh(doc) == (16, 2, 1, 1, 2, 8, 1, 4, 2)
    assert doc["target"] == "verl-mlite-sft" and doc["model_config"] == "Qwen3.5-35B-A3B"
    o = doc["options"]
    assert o["seq_len"] == 8192 and o["micro_batch_size"] == 2  # MAX_LENGTH=$((4096 * 2))
    assert o["optimizer"] == "dist_opt" and o["use_precision_aware_optimizer"]
    assert (o["recompute"], o["recompute_modules"]) == ("selective", ["mlp"])
    assert doc["unresolved"] == {"HOME": ["data.train_files"]}


def test_cli_json_contract_and_exit_codes(tmp_path):
    res = run_cli("import-launcher", DATA / "grpo_kimi_mlite_arrays.sh", "--config", "Kimi-K2.6", "--json")
    assert res.rc == 0, res.err
    doc = res.json()
    for k in ("ngpu", "valid", "errors", "warnings", "tp", "pp", "vpp", "cp", "ep", "etp", "dp", "edp"):
        assert k in doc
    bad = tmp_path / "bad.sh"
    bad.write_text(
        "#!/bin/bash\nTP=3\npython3 -m verl.trainer.main_ppo actor_rollout_ref.actor.megatron."
        "tensor_model_parallel_size=${TP} trainer.nnodes=1 trainer.n_gpus_per_node=8\n"
    )
    res = run_cli("import-launcher", bad, "--config", "Qwen3-8B", "--json")
    assert res.rc == 1 and not res.json()["valid"] and res.json()["tp"] == 3
    empty = tmp_path / "empty.sh"
    empty.write_text("#!/bin/bash\necho hello\n")
    assert_one_line_error(run_cli("import-launcher", empty), "launches nothing: it only prints 'hello'")
    other = tmp_path / "other.sh"
    other.write_text("#!/bin/bash\nTP=2\npython3 train.py --tp $TP\n")
    assert_one_line_error(run_cli("import-launcher", other), "no verl launch line")
    assert_one_line_error(run_cli("import-launcher", tmp_path / "missing.sh"), "no such file")
    assert_one_line_error(run_cli("import-launcher", bad, "--env", "NOEQUALS"), "--env")
    with pytest.raises(MliteError):
        import_launcher("x", text="torchrun --nnodes=2 train.py")


def test_without_model_config_only_the_gpu_rule_is_checked():
    text = (
        "python3 -m verl.trainer.main_ppo --config-name=ppo_megatron_trainer trainer.nnodes=2 "
        "trainer.n_gpus_per_node=8 actor_rollout_ref.actor.megatron.context_parallel_size=3"
    )
    doc = import_launcher("t", text=text).to_dict()
    assert not doc["valid"] and doc["cp"] == 3 and any("--config" in w for w in doc["warnings"])


@pytest.mark.parametrize(
    "snippet",
    [
        'A=${A:-${B:-x y}}; W=("$A")',
        "N=4; W=($((N * 8 + 2)) $(( (7 - 10) / 2 )) $((N % 3)))",
        'X=""; W=("${X:-empty}" "${X-unset}" "${Y:=set}" "$Y" "${X:+alt}" "${N:+alt}")',
        'ARR=(a "b c" \'d $e\'); W=("${ARR[@]}" pre"${ARR[1]}"post)',
        "V=1; case \"$V\" in 2|3) W=(two);; 1) W=(one 'x|y');; *) W=(other);; esac",
        'P=E,t*7; W=("+k.layout=\'${P}|t*6\'" k=\\[a\\,b\\] "q=\\"x\\"")',
    ],
)
def test_bash_reader_agrees_with_bash(snippet):
    want = subprocess.run(
        ["bash", "-c", snippet + '; printf "%s\\n" "${W[@]}"'],
        capture_output=True,
        text=True,
        env={"PATH": os.environ.get("PATH", "")},
    ).stdout.splitlines()
    res = run_script(snippet + '\npython3 -m verl.trainer.main_ppo "${W[@]}"\n')
    launch = res.launches[-1]
    assert launch.words[launch.entry + 1 :] == want


def test_reader_finds_a_launch_inside_an_if_when_none_is_outside():
    text = (
        'TP=${TP:-4}\nif [[ "$DRY" == 1 ]]; then\n  echo skip\nelse\n  python3 -m verl.trainer.main_ppo '
        "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=$TP\nfi\n"
    )
    res = run_script(text)
    assert res.launches and res.launches[0].in_block
    assert res.launches[0].words[-1].endswith("=4")


def test_launcher_rule_warning_says_when_verls_rule_does_not_divide():
    from mlite.export.importer import _launcher_rule_warning

    [w] = _launcher_rule_warning(ParallelConfig(tp=2, ep=8), 8)  # verl: 8/(2*8); the runtime: 8/2 = 4
    assert "computes DP with verl's rule ngpu/PP = TP*EP*DP, which does not divide" in w and "DP = 4" in w
    assert "0.5" not in w
    [w] = _launcher_rule_warning(ParallelConfig(cp=2, ep=8), 32)
    assert "which gives DP 4;" in w and "DP = 16" in w


def test_launcher_rule_detection():
    assert uses_launcher_rule("DP=$((NGPU_PER_PP / (TP * EP)))")
    assert uses_launcher_rule("#   ngpu / pp = tp * ep * dp = etp * ep * edp")
    # our own headers mention verl's rule without using it
    assert not uses_launcher_rule("# verl's example launchers write ngpu/PP = TP*EP*DP, which gives DP = 2")


def test_fixture_launchers_use_keys_verl_and_the_mlite_key_list_accept():
    """The fixtures follow verl's example launchers; their overrides (with $HOME given) pass the validator."""
    for name, cfg_name in (
        ("grpo_kimi_mlite_arrays.sh", "ppo_trainer"),
        ("sft_qwen35_mlite_torchrun.sh", "sft_trainer_engine"),
    ):
        res = run_script((DATA / name).read_text(), {"HOME": "/home/u"})
        launch = res.launches[-1]
        v = validate_command(launch.words)
        assert v.config_name == cfg_name and v.mlite
        assert v.ok, v.problems


def test_validator_catches_wrong_plus_prefixes_and_unknown_keys():
    base = [
        "python3",
        "-m",
        "verl.trainer.main_ppo",
        "hydra.searchpath=[pkg://verl_mlite.config]",
        "actor@actor_rollout_ref.actor=mlite_actor",
    ]
    assert validate_command(base + ["+actor_rollout_ref.actor.engine.impl_cfg.optimizer=fsdp2"]).ok
    for wrong, needle in (
        ("actor_rollout_ref.actor.engine.impl_cfg.optimizer=fsdp2", "+engine.impl_cfg.optimizer"),
        ("+actor_rollout_ref.actor.engine.tp=2", "drop the '+'"),
        ("actor_rollout_ref.actor.ppo_mini_batch_sizee=8", "Could not override"),
    ):
        v = validate_command(base + [wrong])
        assert not v.ok and any(needle in p for p in v.problems), (wrong, v.problems)


def test_sbatch_starts_ray_waits_for_gpus_and_runs_the_launcher(tmp_path):
    """The job script run under stand-ins for srun / scontrol / ray / hostname / python3 (they log and return)."""
    from mlite.export import ExportPlan, write
    from mlite.mesh import ParallelConfig

    out = tmp_path / "job"
    res = write(
        ExportPlan(model="Qwen3-30B-A3B", target="verl-megatron-grpo", nodes=2, parallel=ParallelConfig(ep=8, cp=2)),
        out,
    )
    fake = tmp_path / "bin"
    fake.mkdir()
    log = tmp_path / "calls.log"
    stubs = {
        "scontrol": 'printf "node-a\\nnode-b\\n"',
        "hostname": 'echo "fe80::1 10.0.0.5"',
        "srun": 'while [[ $# -gt 0 ]]; do case "$1" in -w) shift 2;; -*) shift;; *) break;; esac; done\n'
        'echo "srun $*" >> "$FAKE_LOG"; exec "$@"',
        "ray": 'echo "ray $*" >> "$FAKE_LOG"',
        "python3": 'echo "$FAKE_GPUS"',
    }
    for name, body in stubs.items():
        (fake / name).write_text(f"#!/bin/bash\n{body}\n")
        (fake / name).chmod(0o755)
    env = {
        "PATH": f"{fake}:{os.environ.get('PATH', '')}",
        "HOME": "/home/u",
        "FAKE_LOG": str(log),
        "SLURM_JOB_NODELIST": "node-[a-b]",
        "SLURM_JOB_NUM_NODES": "2",
        "SLURM_CPUS_PER_TASK": "64",
        "SLURM_JOB_NAME": "qwen",
        "SLURM_JOB_ID": "77",
        "SLURM_SUBMIT_DIR": str(out),
        "SLURM_GPUS_ON_NODE": "8",
        "RAY_HEAD_STARTUP": "0",
        "RAY_POLL": "0",
        "RAY_WAIT_TIMEOUT": "2",
        "DRY_RUN": "1",
        "FAKE_GPUS": "16",
    }
    p = subprocess.run(["bash", str(out / res.job)], env=env, capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert p.returncode == 0, p.stderr
    calls = log.read_text()
    assert "ray start --head --node-ip-address=10.0.0.5 --port=6379" in calls
    assert "ray start --address=10.0.0.5:6379" in calls  # one worker: node-b
    argv = shlex.split(p.stdout.strip().splitlines()[-1])
    assert "trainer.nnodes=2" in argv and "trainer.n_gpus_per_node=8" in argv
    jsonl = tmp_path / "runs" / "slurm" / "qwen-77.jsonl"
    assert f"+ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH='{jsonl}'" in argv
    # not every GPU joins: a clear error, exit 1
    env["FAKE_GPUS"] = "8"
    p = subprocess.run(["bash", str(out / res.job)], env=env, capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert p.returncode == 1 and "Ray cluster incomplete: 8 of 16 GPUs joined" in p.stderr


@pytest.mark.parametrize("target", ["verl-mlite-grpo", "verl-megatron-grpo"])
def test_rollout_knobs_round_trip(tmp_path, target):
    """Every rollout knob of the RL estimate goes out in the launcher and comes back through import-launcher (the one
    key table, mlite.memory.rl_keys), so the per-phase RL estimate of the launcher is the one of the plan."""
    from dataclasses import replace

    from mlite.export import ExportPlan, write
    from mlite.memory import TrainingOptions
    from mlite.memory.rl_options import RolloutOptions
    from mlite.mesh import ParallelConfig

    knobs = {
        "name": "sglang",
        "free_cache_engine": False,
        "max_model_len": 6144,
        "max_num_batched_tokens": 16384,
        "max_num_seqs": 64,
        "enforce_eager": True,
        "update_weights_bucket_megabytes": 512,
        "data_parallel_size": 2,
        "expert_parallel_size": 8,
    }
    plan = ExportPlan(
        model="Qwen3-30B-A3B",
        target=target,
        nodes=2,
        parallel=ParallelConfig(tp=2, ep=8),
        options=TrainingOptions(seq_len=6144),
        rollout_n=4,
        rollout_tp=4,
        rollout_gpu_memory_utilization=0.45,
        max_prompt_length=2048,
        rollout_knobs=knobs,
    )
    res = write(plan, tmp_path)
    from mlite.export.validate import validate_command

    p = subprocess.run(
        ["bash", str(tmp_path / res.launcher)],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/home/tester", "DRY_RUN": "1"},
    )
    assert p.returncode == 0, p.stderr
    v = validate_command(shlex.split(p.stdout))  # every rollout key is one verl's own config has
    assert v.ok, v.problems
    imp = import_launcher(tmp_path / res.launcher)
    want = plan.rollout_options
    got = RolloutOptions(**imp.rollout)
    for f in list(knobs) + [
        "n",
        "tensor_model_parallel_size",
        "gpu_memory_utilization",
        "prompt_length",
        "response_length",
        "ref",  # the launcher writes use_kl_loss=False, use_kl_in_reward=False: no reference, as the plan says
    ]:
        assert getattr(got, f) == getattr(want, f), f
    assert got.ref == "none"
    again = imp.to_export_plan()
    assert again.rollout_knobs == knobs
    assert again.rollout_options == replace(want, train_batch_size=again.rollout_options.train_batch_size)


def test_rollout_knobs_refuse_owned_and_unknown_fields():
    from mlite.errors import MliteError
    from mlite.export import ExportPlan

    with pytest.raises(MliteError, match="'n' is not a rollout knob of its own"):
        ExportPlan(model="Qwen3-8B", rollout_knobs={"n": 4})
    with pytest.raises(MliteError, match="'temperature' is not a rollout knob"):
        ExportPlan(model="Qwen3-8B", rollout_knobs={"temperature": 1.0})


@pytest.mark.parametrize("pao", [False, True])
def test_bf16_grads_reach_megatron_core_with_and_without_pao(tmp_path, pao):
    """bf16 main grads without PAO are Megatron-Core's grad_reduce_in_fp32=False (verl: override_ddp_config); with
    PAO verl derives it from optim.main_grads_dtype. Both compose against verl's config and read back as bf16."""
    from mlite.export import ExportPlan, write
    from mlite.export.validate import validate_command
    from mlite.memory import TrainingOptions

    opts = TrainingOptions(main_grads_dtype="bf16", use_precision_aware_optimizer=pao)
    res = write(ExportPlan(model="Qwen3-8B", target="verl-megatron-grpo", options=opts), tmp_path)
    p = subprocess.run(
        ["bash", str(tmp_path / res.launcher)],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/home/tester", "DRY_RUN": "1"},
    )
    v = validate_command(shlex.split(p.stdout))
    assert v.ok, v.problems
    cfg = v.config.actor_rollout_ref.actor
    if pao:
        assert cfg.optim.main_grads_dtype == "bf16" and "grad_reduce_in_fp32" not in cfg.megatron.override_ddp_config
    else:
        assert cfg.megatron.override_ddp_config.grad_reduce_in_fp32 is False
    got = import_launcher(tmp_path / res.launcher).options
    assert got.get("main_grads_dtype") == "bf16" and bool(got.get("use_precision_aware_optimizer")) == pao
