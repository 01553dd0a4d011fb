"""Export: the three launchers and the Slurm job for the acceptance plans compose against verl's packaged Hydra
config, pass ``bash -n`` and ``shellcheck``, and read back to the same mesh.

Oracles: real bash (``DRY_RUN=1`` prints the command exactly as bash expands it), Hydra's compose API over the
installed verl 0.9.1 configuration (unknown keys and wrong ``+`` prefixes fail), shellcheck, the planner
(:func:`mlite.mesh.resolve`) for the mesh the launchers must carry.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest

from mlite.export import TARGETS, ExportPlan, import_launcher, render, write
from mlite.export.validate import validate_command
from mlite.memory import TrainingOptions
from mlite.mesh import ParallelConfig

REPO = Path(__file__).resolve().parents[1]
SHELLCHECK = REPO / ".venv" / "bin" / "shellcheck"
MESH_KEYS = ("valid", "errors", "tp", "pp", "vpp", "cp", "ep", "etp", "dp", "edp", "ngpu", "pp_layout")

CASES = {
    # verl's run_qwen3_5_35b_megatron_lite.sh: 8 GPUs, PP1 EP8 CP8, fsdp2, all offload, recompute full
    "qwen35-8": (
        "Qwen3.5-35B-A3B",
        1,
        ParallelConfig(ep=8, cp=8),
        TrainingOptions(
            optimizer="fsdp2",
            offload_fraction=1.0,
            param_offload=True,
            optimizer_offload=True,
            grad_offload=True,
            recompute="full",
        ),
    ),
    # 4 nodes, CP != EP: verl's launcher rule and the runtime's disagree (DP 2 vs 8)
    "qwen3-32": (
        "Qwen3-30B-A3B",
        4,
        ParallelConfig(pp=2, cp=2, ep=8),
        TrainingOptions(
            optimizer="dist_opt",
            use_precision_aware_optimizer=True,
            exp_avg_dtype="bf16",
            exp_avg_sq_dtype="bf16",
            offload_fraction=0.5,
            recompute="selective",
            recompute_modules=("moe_act",),
        ),
    ),
    # verl's run_kimi_k2_6_glm5_1_megatron_lite.sh: 256 GPUs, PP8 EP8 CP8, fsdp2; 61 layers: uneven stages
    "kimi-256": (
        "Kimi-K2-Instruct",
        32,
        ParallelConfig(pp=8, ep=8, cp=8),
        TrainingOptions(
            optimizer="fsdp2", offload_fraction=1.0, param_offload=True, optimizer_offload=True, recompute="full"
        ),
    ),
}
PARAMS = [(c, t) for c in CASES for t in TARGETS]


def _env(**extra) -> dict:
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/home/tester", **extra}


def dry_run(script: Path, **env) -> tuple[list[str], str]:
    """The launch command as bash expands it (``DRY_RUN=1``), and stderr (the MLITE_MESH line)."""
    p = subprocess.run(
        ["bash", str(script)],
        env=_env(DRY_RUN="1", **env),
        capture_output=True,
        text=True,
        cwd=script.parent,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    return shlex.split(p.stdout), p.stderr


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    cache = {}

    def get(case: str, target: str):
        if (case, target) not in cache:
            model, nodes, par, opts = CASES[case]
            plan = ExportPlan(
                model=model,
                target=target,
                parallel=par,
                options=opts,
                nodes=nodes,
                gpus_per_node=8,
                model_path=f"/ckpt/{model}",
            )
            out = tmp_path_factory.mktemp(f"{case}-{target}")
            res = write(plan, out)
            argv, err = dry_run(out / res.launcher)
            cache[(case, target)] = (plan, res, out, argv, err)
        return cache[(case, target)]

    return get


@pytest.mark.parametrize("case,target", PARAMS)
def test_scripts_pass_bash_n_and_shellcheck(exported, case, target):
    _, res, out, _, _ = exported(case, target)
    files = [out / res.launcher, out / res.job]
    for f in files:
        p = subprocess.run(["bash", "-n", str(f)], capture_output=True, text=True)
        assert p.returncode == 0, p.stderr
    p = subprocess.run([str(SHELLCHECK), *map(str, files)], capture_output=True, text=True)
    assert p.returncode == 0 and not p.stdout.strip(), p.stdout


@pytest.mark.parametrize("case,target", PARAMS)
def test_launch_composes_against_verl_config(exported, case, target):
    plan, _, _, argv, _ = exported(case, target)
    v = validate_command(argv)
    assert v.ok, v.problems
    cfg = v.config
    _, mp = plan.resolve()
    p = mp.parallel
    assert list(cfg.trainer.logger) == ["console", "file"]
    assert cfg.trainer.nnodes * cfg.trainer.n_gpus_per_node == plan.ngpu
    if target == "verl-megatron-grpo":
        assert v.config_name == "ppo_megatron_trainer"
        m = cfg.actor_rollout_ref.actor.megatron
        got = (
            m.tensor_model_parallel_size,
            m.pipeline_model_parallel_size,
            m.context_parallel_size,
            m.expert_model_parallel_size,
            m.expert_tensor_parallel_size,
        )
        assert got == (p.tp, p.pp, p.cp, p.ep, p.etp_size)
        assert m.virtual_pipeline_model_parallel_size is None  # vpp 1: null, Megatron-Core rejects 1 with PP 1
        layout = m.override_transformer_config.get("pipeline_model_parallel_layout")
        assert layout == (mp.layout if mp.layout_source == "auto" else None)
        assert cfg.actor_rollout_ref.actor.strategy == "megatron"
    else:
        eng = cfg.engine if target == "verl-mlite-sft" else cfg.actor_rollout_ref.actor.engine
        assert (eng.tp, eng.pp, eng.vpp, eng.cp, eng.ep, eng.etp) == (p.tp, p.pp, p.vpp, p.cp, p.ep, p.etp_size)
        assert eng.impl_cfg.optimizer == plan.options.optimizer
        optim = cfg.optim if target == "verl-mlite-sft" else cfg.actor_rollout_ref.actor.optim
        if plan.options.offload_fraction:
            assert optim.override_optimizer_config.offload_fraction == plan.options.offload_fraction
    assert v.mlite == target.startswith("verl-mlite")


@pytest.mark.parametrize("case,target", PARAMS)
def test_round_trip_recovers_the_mesh(exported, case, target):
    plan, res, out, argv, err = exported(case, target)
    _, mp = plan.resolve()
    want = mp.to_dict()
    from_script = import_launcher(out / res.launcher).to_dict()
    from_dry_run = import_launcher("dry-run", text=shlex.join(argv)).to_dict()
    for got in (from_script, from_dry_run):
        assert {k: got[k] for k in MESH_KEYS} == {k: want[k] for k in MESH_KEYS}
        assert got["nnodes"] == plan.nodes and got["gpus_per_node"] == plan.gpus_per_node
        assert got["target"] == target
        # the planner's warnings come back (an explicit Megatron layout replaces the "uneven layout" notice)
        expected = [f.message for f in mp.warnings if not (f.rule == "layers" and got["layout_source"] != "auto")]
        assert set(expected) <= set(got["warnings"])
    # bash's own mesh line agrees with the runtime rule
    assert f"dp={mp.dp} edp={mp.edp}" in err
    opts = import_launcher(out / res.launcher).options
    o = plan.options
    assert opts["seq_len"] == o.seq_len and opts["micro_batch_size"] == o.micro_batch_size
    assert opts.get("offload_fraction", 0.0) == (
        o.offload_fraction or (1.0 if o.optimizer_offload and target != "verl-megatron-grpo" else 0.0)
    )
    assert opts.get("use_precision_aware_optimizer", False) == o.use_precision_aware_optimizer
    assert opts["recompute"] == o.recompute
    if target != "verl-megatron-grpo":
        assert opts["optimizer"] == o.optimizer


def test_launcher_rejects_a_mesh_changed_from_the_environment(exported):
    _plan, res, out, _, _ = exported("qwen3-32", "verl-mlite-grpo")
    p = subprocess.run(
        ["bash", str(out / res.launcher)], env=_env(DRY_RUN="1", TP="3"), capture_output=True, text=True, cwd=out
    )
    assert p.returncode == 1 and "Invalid mesh" in p.stderr and "TP*CP*PP=12" in p.stderr
    # a valid change: bash's DP follows the runtime rule, as the planner computes it
    from mlite.mesh import resolve
    from mlite.models import from_hf_config

    argv, err = dry_run(out / res.launcher, CP="4")
    mp = resolve(from_hf_config("Qwen3-30B-A3B"), 32, ParallelConfig(pp=2, cp=4, ep=8))
    assert f"dp={mp.dp} edp={mp.edp}" in err and "actor_rollout_ref.actor.engine.cp=4" in argv


def test_header_states_runtime_rule_and_launcher_rule_difference(exported):
    _plan, res, out, _, _ = exported("qwen3-32", "verl-megatron-grpo")
    job = (out / res.job).read_text()
    # 32 GPUs, TP1 CP2 PP2 EP8: runtime DP = 32/(1*2*2) = 8, EDP = 32/(1*8*2) = 2; verl's rule 32/2/(1*8) = 2
    assert "dense ranks  = TP*CP*DP*PP   = 1*2*8*2 = 32" in job
    assert "expert ranks = ETP*EP*EDP*PP = 1*8*2*2 = 32" in job
    assert "gives DP 2 here; the runtime" in job and "uses DP = 8" in job
    _plan8, res8, out8, _, _ = exported("qwen35-8", "verl-mlite-grpo")
    assert "gives the same DP = 1 here (CP = EP)" in (out8 / res8.job).read_text()


def test_plan_from_a_launcher_with_verl_rule_states_the_difference(tmp_path):
    imp = import_launcher(REPO / "tests/data/launchers/grpo_kimi_mlite_arrays.sh")
    plan = imp.to_export_plan(model="Kimi-K2.6", target="verl-megatron-grpo")
    res = write(plan, tmp_path)
    job = (tmp_path / res.job).read_text()
    # the fixture runs 256 GPUs with PP8 EP8 CP4 and computes DP = 256/8/(1*8) = 4; the runtime's DP = 256/(4*8) = 8
    assert "grpo_kimi_mlite_arrays.sh, which computes DP with verl's launcher rule" in job
    assert "DP = 4; the runtime's DP is 8 (difference +4" in job
    launcher = (tmp_path / res.launcher).read_text()
    assert "DP = 4; the runtime's DP is 8" in launcher


def test_sbatch_shape(exported):
    plan, res, out, _, _ = exported("kimi-256", "verl-mlite-grpo")
    job = (out / res.job).read_text()
    for line in (
        "#SBATCH --nodes=32",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --gpus-per-node=8",
        "#SBATCH --output=runs/slurm/%x-%j.out",
        f"#SBATCH --job-name={plan.name}",
    ):
        assert line in job.splitlines()
    assert "ray start --head" in job and 'srun --nodes=1 --ntasks=1 -w "${node}"' in job
    assert "CUDA_DEVICE_MAX_CONNECTIONS" in job and "VERL_FILE_LOGGER_PATH" in job
    _, res_sft, out_sft, _, _ = exported("kimi-256", "verl-mlite-sft")
    sft = (out_sft / res_sft.job).read_text()
    assert "ray start" not in sft and 'srun --nodes="${NNODES}" --ntasks-per-node=1' in sft


def test_exports_say_what_the_target_cannot_express(exported):
    _, res, _, _, _ = exported("qwen35-8", "verl-megatron-grpo")
    assert any("fsdp2 has no counterpart" in n for n in res.notes)
    _, res, _, _, _ = exported("kimi-256", "verl-mlite-grpo")
    assert any("uneven layout" in n for n in res.notes)
    # verl 0.9.1's Megatron engine has no grad_offload (the compose test proves the key is unknown there):
    # grad offload alone turns param_offload on, and says so
    plan = ExportPlan(model="Qwen3-8B", target="verl-megatron-grpo", options=TrainingOptions(grad_offload=True))
    res = render(plan)
    assert any("grad_offload" in n for n in res.notes)
    assert "PARAM_OFFLOAD=${PARAM_OFFLOAD:-True}" in res.files[res.launcher]
    bad = validate_command(
        [
            "python3",
            "-m",
            "verl.trainer.main_ppo",
            "--config-name=ppo_megatron_trainer",
            "actor_rollout_ref.actor.megatron.grad_offload=True",
        ]
    )
    assert not bad.ok and "grad_offload" in bad.problems[0]


@pytest.mark.slow  # imports megatron.core (seconds of CPU on its own)
def test_megatron_layout_is_megatron_cores_language(exported):
    """The uneven Kimi-K2 stages written for verl's Megatron backend parse in Megatron-Core's own layout class."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from megatron.core.transformer.pipeline_parallel_layer_layout import PipelineParallelLayerLayout

    plan, _, _, argv, _ = exported("kimi-256", "verl-megatron-grpo")
    cfg = validate_command(argv).config
    text = cfg.actor_rollout_ref.actor.megatron.override_transformer_config.pipeline_model_parallel_layout
    spec, mp = plan.resolve()
    layout = PipelineParallelLayerLayout(text, mp.parallel.pp)
    layout.validate_layer_layout(num_layers=spec.num_layers, mtp_num_layers=spec.num_mtp_layers or None)
    assert layout.virtual_pipeline_model_parallel_size == mp.parallel.vpp
    # the same layers on the same stages as the planner's (stage i runs on pipeline rank i % PP, chunk i // PP)
    for st in mp.stages:
        types = layout.layout[st.index % mp.parallel.pp][st.index // mp.parallel.pp]
        assert sum(t.name == "decoder" for t in types) == len(st.layers)
        assert ("embedding" in [t.name for t in types]) == st.embedding
        assert ("loss" in [t.name for t in types]) == st.head
