"""``mlite import-launcher`` on launchers from other public repositories (tests/data/launchers/public/, provenance in
tests/data/launchers/README.md): #SBATCH headers as the SLURM_* source, custom Python entry points, the config
``--config-path`` / ``--config-name`` name, catalog matching by a path's last component, Hydra ``~`` / ``+`` / ``++``."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import assert_one_line_error, run_cli

from mlite.errors import MliteError
from mlite.export import import_launcher
from mlite.export.hydra_config import read_config
from mlite.export.importer import catalog_model
from mlite.export.overrides import apply_overrides, parse_override
from mlite.shell.slurm import sbatch_values

PUBLIC = Path(__file__).parent / "data" / "launchers" / "public"
NEMO_GYM = PUBLIC / "verl" / "recipe" / "nemo_gym" / "submit_multienv.sh"
LANGGRAPH = PUBLIC / "verl" / "recipe" / "langgraph_agent" / "example" / "run_qwen2.5_3b.sh"
GKD = PUBLIC / "verl" / "recipe" / "gkd" / "megatron" / "test_qwen.sh"
PAI = PUBLIC / "pai" / "examples" / "deepseek_v3" / "run_mcore_deepseek_verl.sh"
PAI_CONFIGS = PUBLIC / "pai" / "examples" / "qwen3" / "verl_configs"
DS4_PREVIEW = PUBLIC / "verl" / "examples" / "grpo_trainer" / "run_deepseek_v4_true_on_policy_preview_megatron.sh"
MBPP = PUBLIC / "verl" / "recipe" / "mbpp_code_gen_grpo" / "train_grpo.sh"


# 1. #SBATCH headers ------------------------------------------------------------------------------------------------


def test_sbatch_nodes_give_slurm_job_num_nodes():
    """verl-recipe nemo_gym: trainer.nnodes=${SLURM_JOB_NUM_NODES} under #SBATCH --nodes=16 (was: pass --env)."""
    imp = import_launcher(NEMO_GYM)
    assert (imp.nnodes, imp.gpus_per_node, imp.ngpu) == (16, 8, 128)
    assert "SLURM_JOB_NUM_NODES=16 from #SBATCH --nodes=16 (line 3)" in imp.warnings
    assert not any("SLURM_JOB_NUM_NODES" in w and "could not resolve" in w for w in imp.warnings)


def test_env_wins_over_sbatch():
    imp = import_launcher(NEMO_GYM, env={"SLURM_JOB_NUM_NODES": "2"})
    assert imp.nnodes == 2
    assert not any("from #SBATCH" in w for w in imp.warnings)


def test_sbatch_gres_gives_gpus_on_node():
    """verl-recipe langgraph_agent: GPUS_PER_NODE=${SLURM_GPUS_ON_NODE:-${GPUS_PER_NODE:-2}} under --gres=gpu:4: 4
    GPUs, not the fallback 2."""
    imp = import_launcher(LANGGRAPH)
    assert (imp.nnodes, imp.gpus_per_node) == (1, 4)
    assert "SLURM_GPUS_ON_NODE=4 from #SBATCH --gres=gpu:4 (line 7)" in imp.warnings


def test_sbatch_header_forms():
    text = (
        "#!/bin/bash\n#SBATCH -N 4\n#SBATCH --ntasks-per-node=1   # one task\n#SBATCH --gpus-per-node=h100:8\n"
        "#SBATCH --gres=gpu:h100:8\n#SBATCH -c 32\n\nset -x\n#SBATCH --nodes=99\n"
    )
    v = {k: x.value for k, x in sbatch_values(text).items()}
    assert v["SLURM_JOB_NUM_NODES"] == v["SLURM_NNODES"] == "4"  # the header after the first command is not read
    assert v["SLURM_NTASKS_PER_NODE"] == "1" and v["SLURM_CPUS_PER_TASK"] == "32"
    assert v["SLURM_GPUS_PER_NODE"] == v["SLURM_GPUS_ON_NODE"] == "8"
    assert sbatch_values("#SBATCH --nodes=2-4\n")["SLURM_NNODES"].value == "2"


def test_sbatch_nodes_cli_says_from_sbatch():
    res = run_cli("import-launcher", str(NEMO_GYM), "--json")
    assert res.rc == 0, res.err
    doc = res.json()
    assert doc["nnodes"] == 16 and doc["ngpu"] == 128
    assert any("from #SBATCH --nodes=16" in w for w in doc["warnings"])


# 2. Python entry points whose arguments are verl Hydra overrides ---------------------------------------------------


def test_custom_entry_script_is_a_launch_line():
    """Pai-Megatron-Patch: python ../qwen3/verl_entrypoint.py --config-path=... --config-name=... (was: no verl
    launch line)."""
    imp = import_launcher(PAI)
    assert imp.entry == "../qwen3/verl_entrypoint.py"
    assert imp.config_name == "ppo_megatron_trainer"
    assert imp.target == "verl-megatron-grpo"
    p = imp.parallel
    assert (p.tp, p.pp, p.ep, p.etp) == (4, 16, 2, 4)


def test_custom_entry_module_is_a_launch_line():
    """verl-recipe gkd: ray job submit ... -- python3 -m main_gkd --config-name on_policy_distill_trainer."""
    imp = import_launcher(GKD)
    assert imp.entry == "main_gkd" and imp.config_name == "on_policy_distill_trainer"
    assert imp.target == "verl-megatron-grpo" and (imp.nnodes, imp.gpus_per_node) == (1, 4)


def test_python_without_verl_overrides_is_not_a_launch_line(tmp_path):
    f = tmp_path / "prep.sh"
    f.write_text("#!/bin/bash\npython3 examples/data_preprocess/gsm8k.py --local_dir x\npython3 -m foo a=1 b.c=2\n")
    assert_one_line_error(run_cli("import-launcher", str(f)), "no verl launch line")


# 3. --config-path / --config-name ----------------------------------------------------------------------------------


def test_config_defaults_list_is_read():
    rc = read_config(PAI_CONFIGS, "ppo_megatron_trainer.yaml")
    assert rc.files == ["ppo_megatron_trainer.yaml", "actor/megatron_actor.yaml", "actor/actor.yaml"]
    assert rc.unread == ["data/legacy_data.yaml (no such file)", "ref/megatron_ref.yaml (no such file)",
                         "rollout/rollout.yaml (no such file)"]  # fmt: skip
    by = {o.key: o for o in rc.values}
    # actor@actor_rollout_ref.actor: megatron_actor places the file under actor_rollout_ref.actor
    assert by["actor_rollout_ref.actor.megatron.use_distributed_optimizer"].value is True
    assert by["actor_rollout_ref.actor.megatron.param_offload"].origin == "actor/megatron_actor.yaml"
    assert by["trainer.n_gpus_per_node"].value == 8
    assert "critic.rollout_n" not in by  # ${...} interpolation: not a value


def test_config_values_count_where_the_command_line_is_silent(tmp_path):
    """A config beside the script that sets param_offload: True counts; the command line still wins."""
    cfg = tmp_path / "cfg"
    (cfg / "actor").mkdir(parents=True)
    (cfg / "actor" / "megatron_actor.yaml").write_text((PAI_CONFIGS / "actor" / "megatron_actor.yaml").read_text()
                                                       .replace("param_offload: False", "param_offload: True"))  # fmt: skip
    (cfg / "actor" / "actor.yaml").write_text((PAI_CONFIGS / "actor" / "actor.yaml").read_text())
    (cfg / "ppo_megatron_trainer.yaml").write_text((PAI_CONFIGS / "ppo_megatron_trainer.yaml").read_text())
    script = tmp_path / "run.sh"
    script.write_text(
        "python3 -m verl.trainer.main_ppo --config-path=cfg --config-name=ppo_megatron_trainer "
        "actor_rollout_ref.model.path=/m/Qwen3-8B actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2\n"
    )
    imp = import_launcher(script)
    assert imp.options["param_offload"] is True
    assert imp.parallel.tp == 2 and imp.nnodes == 1 and imp.gpus_per_node == 8
    assert any(w.startswith("read ") and "actor/megatron_actor.yaml" in w for w in imp.warnings)
    assert sum("could not read" in w for w in imp.warnings) == 1  # one warning names every part not read
    assert not any(k.startswith("critic.") for k in imp.ignored)  # config keys are not "ignored" overrides
    without = import_launcher(script, text=script.read_text().replace(" --config-path=cfg", ""))
    assert "param_offload" not in without.options or without.options["param_offload"] is False


def test_real_recipe_config_beside_its_script_sets_the_defaults():
    """verl-recipe mbpp_code_gen_grpo: --config-path="$SCRIPT_DIR/config" --config-name=grpo, SCRIPT_DIR the
    script's own folder; grpo.yaml sets trainer.n_gpus_per_node: 1 and 2048 + 2048 tokens (verl: 8, 512 + 512)."""
    imp = import_launcher(MBPP)
    assert (imp.nnodes, imp.gpus_per_node) == (1, 1)  # from grpo.yaml, not verl's default 8
    assert imp.options["seq_len"] == 2048 + 2048 and imp.model_path == "Qwen/Qwen2.5-1.5B-Instruct"
    (note,) = [w for w in imp.warnings if w.startswith("from the config: ")]
    for said in ("trainer.n_gpus_per_node=1 from grpo.yaml", "data.max_response_length=2048 from grpo.yaml"):
        assert said in note
    assert any(w.startswith("read ") and w.endswith("config: grpo.yaml (their values count where the command line "
                                                   "is silent)") for w in imp.warnings)  # fmt: skip
    assert any("could not read ppo_trainer.yaml (no such file)" in w for w in imp.warnings)  # on hydra.searchpath
    res = run_cli("import-launcher", str(MBPP), "--json")
    assert res.rc == 0 and res.json()["gpus_per_node"] == 1


def test_config_path_unset_variable_is_named():
    imp = import_launcher(NEMO_GYM)
    assert any("--config-path=${VERL_ROOT}/recipe/dapo/config" in w and "$VERL_ROOT is not set" in w
               for w in imp.warnings)  # fmt: skip


def test_config_search_path_default_is_named():
    """verl-recipe dapo_megatron_trainer.yaml names ppo_megatron_trainer, which lives on hydra.searchpath."""
    imp = import_launcher(NEMO_GYM, env={"VERL_ROOT": str(PUBLIC / "verl")})
    assert any("read " in w and "dapo_megatron_trainer.yaml" in w for w in imp.warnings)
    assert any("could not read ppo_megatron_trainer.yaml (no such file)" in w for w in imp.warnings)


# 4. Catalog matching by a path's last component --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "model"),
    [
        ("Qwen3-235B-A22B-hf", "Qwen3-235B-A22B"),
        ("DeepSeek-V3-0324-BF16", "DeepSeek-V3"),
        ("Qwen3-30B-A3B-Instruct-2507", "Qwen3-30B-A3B"),
        ("Qwen3-8B", "Qwen3-8B"),
        ("Qwen3-0.6B", None),
    ],
)
def test_catalog_model_by_last_component(name, model):
    assert catalog_model(name) == model


def test_pai_model_path_matches_catalog():
    imp = import_launcher(PAI)
    assert imp.model_ref() == "DeepSeek-V3"
    assert any("read with data/models/DeepSeek-V3" in i for i in imp.to_dict()["info"])


def test_pwd_model_path_estimate():
    text = (
        "MODEL_PATH=$(pwd)/Qwen3-235B-A22B-hf\npython3 -m verl.trainer.main_ppo actor_rollout_ref.model.path="
        "$MODEL_PATH actor_rollout_ref.actor.megatron.tensor_model_parallel_size=4 "
        "actor_rollout_ref.actor.megatron.expert_model_parallel_size=8 trainer.nnodes=4 trainer.n_gpus_per_node=8\n"
    )
    imp = import_launcher("<text>", text=text)
    assert imp.model_ref() == "Qwen3-235B-A22B"


# 5. Hydra ~key, +key, ++key ----------------------------------------------------------------------------------------


def test_delete_is_unset_not_empty():
    o = parse_override("~actor_rollout_ref.actor.engine.grad_offload")
    assert o is not None and o.delete and o.value is None
    base = [parse_override("actor_rollout_ref.actor.engine.grad_offload=True")]
    base = [type(b)(key=b.key, value=b.value, raw=b.raw, origin="x.yaml") for b in base if b]
    ovs, deleted, w = apply_overrides(base, [o])
    assert ovs == [] and deleted == ["actor_rollout_ref.actor.engine.grad_offload"] and w == []


def test_delete_in_launcher_is_not_read_as_a_value():
    text = (
        "python3 -m verl.trainer.main_ppo actor@actor_rollout_ref.actor=mlite_actor "
        "actor_rollout_ref.actor.engine.tp=2 '~actor_rollout_ref.actor.engine.grad_offload' "
        "'~actor_rollout_ref.ref.engine.grad_offload' trainer.nnodes=1 trainer.n_gpus_per_node=8\n"
    )
    imp = import_launcher("<text>", text=text)
    assert "actor_rollout_ref.actor.engine.grad_offload" not in {o.key for o in imp.overrides}
    assert imp.deleted == ["actor_rollout_ref.actor.engine.grad_offload", "actor_rollout_ref.ref.engine.grad_offload"]
    assert not any("grad_offload" in w for w in imp.warnings)


def test_real_launcher_delete_removes_the_key():
    """verl's DeepSeek-V4 true-on-policy preview launcher (Megatron Lite): '~actor_rollout_ref.actor.engine.grad_offload'
    and '~actor_rollout_ref.ref.engine.grad_offload' in its ACTOR_ARGS array delete the keys (Hydra), so no
    grad_offload value, empty or not, reaches the plan."""
    imp = import_launcher(DS4_PREVIEW, env={"MODE": "aligned", "HARDWARE": "h100"})
    assert imp.target == "verl-mlite-grpo" and imp.deleted == [
        "actor_rollout_ref.actor.engine.grad_offload",
        "actor_rollout_ref.ref.engine.grad_offload",
    ]
    assert not any("grad_offload" in o.key or o.key.startswith("~") for o in imp.overrides)
    assert "grad_offload" not in imp.options and not any("grad_offload" in w for w in imp.warnings)
    assert imp.options["optimizer_offload"] is True and imp.options["param_offload"] is False  # the keys beside
    p = imp.parallel
    assert (imp.nnodes, imp.gpus_per_node, p.pp, p.cp, p.ep) == (8, 8, 4, 2, 16)  # the h100 profile
    res = run_cli("import-launcher", str(DS4_PREVIEW), "--env", "MODE=aligned", "--env", "HARDWARE=h100", "--json")
    assert res.rc == 0 and res.json()["deleted"] == imp.deleted
    # its baseline-r3 branch replaces ACTOR_ARGS with Megatron-Core keys: nothing deleted there
    base = import_launcher(DS4_PREVIEW, env={"MODE": "baseline-r3", "HARDWARE": "gb200"})
    assert base.target == "verl-megatron-grpo" and base.deleted == []


def test_add_and_force_add_as_hydra_applies_them():
    base = [parse_override("a.b=1"), parse_override("a.c=2")]
    base = [type(b)(key=b.key, value=b.value, raw=b.raw, origin="cfg.yaml") for b in base if b]
    cli = [parse_override(w) for w in ("+a.b=5", "++a.c=6", "+a.d=7", "~a")]
    ovs, deleted, w = apply_overrides(base, [c for c in cli if c])
    assert ovs == [] and deleted == ["a"]  # ~a deletes the subtree
    ovs, _, w = apply_overrides(base, [c for c in cli[:3] if c])
    assert {o.key: o.value for o in ovs} == {"a.b": 5, "a.c": 6, "a.d": 7}
    assert len(w) == 1 and w[0].startswith("+a.b=5: cfg.yaml already sets a.b")  # Hydra refuses + for a present key


# no traceback on any input ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "#SBATCH --nodes=\npython3 -m main_x trainer.nnodes=${SLURM_JOB_NUM_NODES}\n",
        "python ent.py --config-path --config-name\n",
        "python3 -m m --config-path=/nonexistent --config-name=x trainer.nnodes=oops\n",
        "python3 -m m '~' trainer.nnodes=1 ~trainer.n_gpus_per_node\n",
    ],
)
def test_odd_inputs_exit_cleanly(tmp_path, text):
    f = tmp_path / "odd.sh"
    f.write_text(text)
    res = run_cli("import-launcher", str(f))
    assert res.rc in (0, 1, 2) and "Traceback" not in res.err
    if res.rc == 2:
        assert len(res.err.strip().splitlines()) == 1


def test_bad_config_yaml_is_named(tmp_path):
    (tmp_path / "c.yaml").write_text("defaults: [\n")
    (tmp_path / "r.sh").write_text(
        "python3 -m verl.trainer.main_ppo --config-path=. --config-name=c trainer.nnodes=1\n"
    )
    imp = import_launcher(tmp_path / "r.sh")
    assert any("c.yaml (not YAML" in w for w in imp.warnings)
    with pytest.raises(MliteError):
        import_launcher("x", text="python3 -m verl.trainer.main_ppo trainer.nnodes=${N}\n")
