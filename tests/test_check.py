"""``mlite check``, the preflight: every finding kind on real inputs (launchers ``mlite export`` writes, a verl
launcher from tests/data, a run directory of a real ``mlite run``), each finding's keys, the fixes (checked by
applying them), exit codes and bad input.

Oracles: the option and environment messages are the rules' own (each rule raises the same line alone); the mesh
findings are the planner's (:func:`mlite.mesh.resolve`); the memory figure is ``mlite memory --json``'s; a fix is
accepted when the command run with it no longer reports the rule.
"""

from __future__ import annotations

import argparse
import json
import os
import re
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import REPO, run_cli

from mlite.check import FINDING_KEYS, KINDS, LEVELS, REPORT_KEYS
from mlite.check.resume import (
    RESUME_RULES,
    SAME_TOPOLOGY_MODELS,
    register_resume_rule,
    unregister_resume_rule,
)
from mlite.cli import main
from mlite.errors import MliteError
from mlite.options import TrainingOptions
from mlite.options.optimizers import BACKENDS, optimizer_rules

VERL_LAUNCHER = REPO / "tests/data/launchers/verl/v0.9.0/examples/gpg_trainer/run_qwen3_8b_megatron.sh"
"""A verl example that exports ``CUDA_DEVICE_MAX_CONNECTIONS=1`` itself."""
TOY = "toy_mfsdp"
VAR = "CUDA_DEVICE_MAX_CONNECTIONS"


def _mlite(capsys, *args) -> tuple[int, str, str]:
    try:
        rc = main([str(a) for a in args])
    except SystemExit as e:
        rc = int(e.code or 0)
    out, err = capsys.readouterr()
    return rc, out, err


def _check(capsys, *args) -> tuple[int, dict]:
    rc, out, err = _mlite(capsys, "check", *args, "--json")
    assert err == "", err
    return rc, json.loads(out)


def _find(doc: dict, kind: str, rule: str | None = None) -> list[dict]:
    return [f for f in doc["findings"] if f["kind"] == kind and (rule is None or f["rule"] == rule)]


def refuses_one_connection(env) -> None:
    """The toy backend's environment rule: ``CUDA_DEVICE_MAX_CONNECTIONS=1`` refused (mfsdp's rule's shape)."""
    if env.get(VAR) == "1":
        raise MliteError(f"{VAR}: 1 is refused by {TOY} (toy rule); unset it or set it above 1")


@pytest.fixture
def toy_backend():
    """A backend registered for the test: dist_opt's entry with an environment rule."""
    BACKENDS.register(replace(BACKENDS.entry("dist_opt"), name=TOY, env_refuses=(refuses_one_connection,)))
    try:
        yield TOY
    finally:
        BACKENDS.unregister(TOY)


@pytest.fixture
def here(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLITE_RUNS", str(tmp_path / "default-runs"))
    monkeypatch.delenv(VAR, raising=False)
    return tmp_path


def _export(capsys, out: str, *flags) -> Path:
    rc, _, err = _mlite(capsys, "export", "Qwen3-8B", "--nodes", "1", "--out", out, *flags)
    assert rc == 0, err
    (launcher,) = Path(out).glob("run_*.sh")
    return launcher


# ------------------------------------------------------------------------------------------------ document
def test_json_document_and_finding_keys(capsys, here):
    launcher = _export(capsys, "sft", "--target", "verl-mlite-sft", "--tp", "2")
    rc, doc = _check(capsys, launcher, "--env", "HOME=/home/me")
    assert rc == 0 and doc["ok"] is True
    assert tuple(doc) == REPORT_KEYS
    assert doc["counts"] == {lv: sum(f["level"] == lv for f in doc["findings"]) for lv in LEVELS}
    for f in doc["findings"]:
        assert tuple(f) == FINDING_KEYS and f["kind"] in KINDS and f["level"] in LEVELS
    assert doc["plan"]["tp"] == 2 and doc["plan"]["ngpu"] == 8 and doc["plan"]["target"] == "verl-mlite-sft"
    assert doc["plan"]["environment"][VAR] == "1"  # the export line of the launcher
    (fit,) = _find(doc, "memory", "fits")
    assert fit["level"] == "info" and fit["message"].startswith("fits: ")


def test_text_output_lists_every_finding(capsys, here):
    rc, out, err = _mlite(capsys, "check", "Qwen3-8B", "--ngpu", "8", "--tp", "3", "--moment-dtype", "bf16")
    assert rc == 2 and err == ""
    assert out.splitlines()[0].startswith("Qwen3-8B --ngpu 8: ERRORS: 3 error(s)")
    assert "[mesh/world]" in out and "[mesh/heads]" in out and "[options/bf16_moments_need_pao]" in out
    assert "fix: tp=2 | tp=4" in out


# ------------------------------------------------------------------------------------------------ environment
def test_the_export_leaves_out_what_the_backend_refuses(capsys, here, toy_backend):
    """mlite.export.launcher.launch_env: a launcher exported for the toy backend does not export VAR=1."""
    launcher = _export(capsys, "toy", "--target", "verl-mlite-sft", "--optimizer", toy_backend, "--tp", "2")
    assert not [t for t in launcher.read_text().splitlines() if t.startswith(f"export {VAR}=")]
    rc, doc = _check(capsys, launcher)
    assert rc == 0 and not _find(doc, "environment", "refuses_one_connection")


def test_toy_backend_refuses_the_sft_launchers_connections(capsys, here, toy_backend):
    """A dist_opt SFT launcher (it exports VAR=1) switched to the toy backend through its OPTIMIZER knob."""
    launcher = _export(capsys, "toy", "--target", "verl-mlite-sft", "--tp", "2")
    text = launcher.read_text().splitlines()
    line = next(i for i, t in enumerate(text, 1) if t.startswith(f"export {VAR}="))
    rc, doc = _check(capsys, launcher, "--env", f"OPTIMIZER={toy_backend}")
    assert rc == 2 and doc["ok"] is False
    (f,) = _find(doc, "environment", "refuses_one_connection")
    assert f["level"] == "error" and VAR in f["message"]
    with pytest.raises(MliteError) as e:
        refuses_one_connection({VAR: "1"})
    assert f["message"] == e.value.message  # the rule's own line
    assert f["source"] == f"{launcher}:{line} {VAR}=1"
    assert f["fixes"] == [{VAR: None}, {VAR: "2"}]
    # each fix, given to the launcher (its export reads ${VAR:-1}), clears the finding
    rc, doc = _check(capsys, launcher, "--env", f"OPTIMIZER={toy_backend}", "--env", f"{VAR}=2")
    assert rc == 0 and not _find(doc, "environment", "refuses_one_connection")
    assert doc["plan"]["environment"][VAR] == "2"


def test_environ_flag_reads_the_current_environment(capsys, here, toy_backend, monkeypatch):
    launcher = _export(capsys, "toy", "--target", "verl-mlite-sft", "--tp", "2")
    toy = ("--env", f"OPTIMIZER={toy_backend}")
    rc, doc = _check(capsys, launcher, *toy)
    (info,) = _find(doc, "environment", "environ")
    assert info["level"] == "info"
    monkeypatch.setenv(VAR, "8")
    rc, doc = _check(capsys, launcher, *toy)  # not read without --environ: the launcher's default 1 stands
    assert _find(doc, "environment", "refuses_one_connection")
    rc, doc = _check(capsys, launcher, *toy, "--environ")
    assert rc == 0 and not _find(doc, "environment") and doc["plan"]["environment"][VAR] == "8"


def test_a_config_plan_reads_env_flags(capsys, here, toy_backend):
    args = ("Qwen3-8B", "--ngpu", "8", "--tp", "2", "--optimizer", toy_backend)
    rc, doc = _check(capsys, *args, "--env", f"{VAR}=1")
    (f,) = _find(doc, "environment", "refuses_one_connection")
    assert rc == 2 and f["source"] == f"--env {VAR}=1"
    rc, doc = _check(capsys, *args)
    assert rc == 0 and not _find(doc, "environment", "refuses_one_connection")


def test_a_real_verl_launcher_sets_its_own_environment(capsys, here):
    text = VERL_LAUNCHER.read_text().splitlines()
    line = next(i for i, t in enumerate(text, 1) if t.startswith(f"export {VAR}=1"))
    rc, doc = _check(capsys, VERL_LAUNCHER, "--env", f"{VAR}=8")
    assert rc == 0 and doc["plan"]["target"] == "verl-megatron-grpo"
    assert doc["plan"]["environment"][VAR] == "1"  # the script's export wins over the outside value
    assert (doc["plan"]["tp"], doc["plan"]["pp"], doc["plan"]["ngpu"]) == (2, 2, 8)
    from mlite.export import import_launcher

    imp = import_launcher(VERL_LAUNCHER, env={VAR: "8"})
    assert imp.environment[VAR] == ("1", line)


def test_the_reader_records_what_a_script_exports():
    from mlite.export import import_launcher

    text = (
        "#!/bin/bash\nexport A=1\nB=2\nexport B\nD=4\ndeclare -x E=5\nexport -n F=6\n"
        "C=3 python3 -m verl.trainer.main_ppo trainer.nnodes=1 trainer.n_gpus_per_node=8\n"
    )
    imp = import_launcher("<t>", text=text)
    assert imp.environment == {"A": ("1", 2), "B": ("2", 4), "E": ("5", 6), "C": ("3", 8)}


def test_mlite_run_calls_the_backends_environment_rules(here, toy_backend, monkeypatch):
    from mlite.launch import RunConfig

    cfg = RunConfig(model="tiny-dense", steps=1, nproc=1, device="cpu", optimizer=toy_backend, out=str(here / "r"))
    monkeypatch.setenv(VAR, "1")
    with pytest.raises(MliteError) as e:
        cfg.check_environment()
    assert VAR in e.value.message
    monkeypatch.setenv(VAR, "4")
    with pytest.raises(MliteError) as e:  # past the environment rule: the lite runtime has no toy optimizer
        cfg.check_environment()
    assert VAR not in e.value.message


# ------------------------------------------------------------------------------------------------ mesh, options
def test_mesh_findings_are_the_planners(capsys, here):
    from mlite.mesh import ParallelConfig, resolve
    from mlite.models import from_hf_config

    rc, doc = _check(capsys, "Qwen3-8B", "--ngpu", "8", "--tp", "3")
    plan = resolve(from_hf_config("Qwen3-8B"), 8, ParallelConfig(tp=3), seq_len=4096, gpus_per_node=8)
    got = [(f["level"], f["rule"], f["message"], f["fixes"]) for f in _find(doc, "mesh")]
    want = [(f.level, f.rule, f.message, list(f.fixes)) for f in plan.findings]
    assert rc == 2 and sorted(got, key=str) == sorted(want, key=str)
    (heads,) = _find(doc, "mesh", "heads")
    assert heads["fixes"] == [{"tp": 2}, {"tp": 4}] and heads["source"].endswith("tp=3")


OPTION_FLAGS = (
    "--optimizer",
    "fsdp2",
    "--grad-dtype",
    "bf16",
    "--no-distributed-optimizer",
    "--offload-fraction",
    "1.5",
)


def test_every_option_rule_is_reported_with_fixes_that_hold(capsys, here):
    rc, doc = _check(capsys, "Qwen3-8B", "--ngpu", "8", *OPTION_FLAGS)
    found = {f["rule"]: f for f in _find(doc, "options")}
    assert rc == 2 and set(found) == {"offload_fraction_in_range", "grads_in_param_dtype", "always_sharded"}
    values = {"optimizer": "fsdp2", "main_grads_dtype": "bf16", "use_distributed_optimizer": False}
    values["offload_fraction"] = 1.5
    for rule in optimizer_rules(TrainingOptions(), "fsdp2"):
        f = found.get(rule.__name__)
        if f is None:
            continue
        # the rule's own line: TrainingOptions with only this rule's field wrong raises it
        field = f["message"].split(":", 1)[0]
        with pytest.raises(MliteError) as e:
            TrainingOptions(optimizer="fsdp2", **{field: values[field]})  # type: ignore[arg-type]
        assert e.value.message == f["message"]
        assert f["fixes"], f
        for fix in f["fixes"]:  # each fix makes the rule pass
            rule(argparse.Namespace(**{**vars(TrainingOptions(optimizer="fsdp2")), **values, **fix}))
    assert found["offload_fraction_in_range"]["fixes"] == [{"offload_fraction": 0.0}, {"offload_fraction": 1.0}]
    assert found["always_sharded"]["source"] == "--no-distributed-optimizer"
    assert found["offload_fraction_in_range"]["source"] == "--offload-fraction 1.5"
    (mem,) = _find(doc, "memory")
    assert mem["level"] == "info" and "refused" in mem["message"]


def test_a_fix_of_two_fields(capsys, here):
    rc, doc = _check(capsys, "Qwen3-8B", "--ngpu", "8", "--moment-dtype", "bf16", "--no-distributed-optimizer")
    (f,) = _find(doc, "options", "bf16_moments_need_pao")
    assert rc == 2
    # PAO alone would break pao_needs_distributed_optimizer (plain DDP here): the fix sets both moments back
    assert f["fixes"] == [{"exp_avg_dtype": "fp32", "exp_avg_sq_dtype": "fp32"}]


# ------------------------------------------------------------------------------------------------ verl
def test_lite_engine_launcher_refusals(capsys, here):
    launcher = _export(capsys, "lite", "--target", "verl-lite-sft", "--optimizer", "fsdp2")
    rc, doc = _check(capsys, launcher, "--env", "HOME=/h")
    assert not _find(doc, "verl")
    rc, doc = _check(capsys, launcher, "--env", "HOME=/h", "--env", "OPTIMIZER=dist_opt")  # the launcher's knob
    (f,) = _find(doc, "verl", "check_verl_lite_engine")
    assert rc == 2 and f["level"] == "error" and f["fixes"] == [{"optimizer": "fsdp2"}]
    assert f["source"].endswith("engine.impl_cfg.optimizer=dist_opt")
    bad = here / "bad.sh"
    bad.write_text(
        launcher.read_text().replace('    "engine.impl=lite"\n', '    "engine.impl=lite"\n    "engine.bogus=1"\n')
    )
    rc, doc = _check(capsys, bad, "--env", "HOME=/h")
    (f,) = _find(doc, "verl", "check_lite_engine_key")
    assert rc == 2 and "engine.bogus is not a key of the lite engine" in f["message"]


# ------------------------------------------------------------------------------------------------ memory
def test_memory_error_carries_the_estimators_figure(capsys, here):
    args = ("Llama-3.1-70B", "--ngpu", "8", "--tp", "8")
    rc, out, _ = _mlite(capsys, "memory", *args, "--json")
    est = json.loads(out)
    assert rc == 1 and not est["fits"]
    rc, doc = _check(capsys, *args)
    (f,) = _find(doc, "memory", "fits")
    assert rc == 2 and f["level"] == "error"
    assert f"{est['per_gpu']['total'] / 2**30:.2f} GiB per GPU" in f["message"]
    assert f"usable {est['usable'] / 2**30:.2f}" in f["message"]
    gib = f["fixes"][-1]["gpu_memory_gib"]
    assert _mlite(capsys, "memory", *args, "--gpu-mem", gib)[0] == 0  # the figure it names fits
    assert _mlite(capsys, "memory", *args, "--gpu-mem", gib - 0.2)[0] == 1


def test_memory_fixes_are_single_changes_that_fit(capsys, here):
    args = ("Qwen3-8B", "--ngpu", "8")
    rc, doc = _check(capsys, *args)
    (f,) = _find(doc, "memory", "fits")
    assert rc == 2 and f["fixes"][:2] == [{"recompute": "full"}, {"offload_fraction": 1.0}]
    for flags in (("--recompute", "full"), ("--offload-fraction", "1.0")):
        rc, doc = _check(capsys, *args, *flags)
        assert rc == 0 and _find(doc, "memory", "fits")[0]["level"] == "info"


GRPO = REPO / "tests/data/launchers/verl/main/examples/grpo_trainer/run_qwen3_5_35b_megatron.sh"


@pytest.mark.parametrize(
    "gpu", ["H100", "32"]
)  # 32 GiB: below the 38.8 GiB actor update (param offload frees the grads)
def test_a_grpo_launchers_rl_phases_are_import_launchers(capsys, here, gpu):
    rc, out, _ = _mlite(capsys, "import-launcher", GRPO, "--estimate", "--gpu-mem", gpu, "--json")
    rl = json.loads(out)["rl_estimate"]
    rc, doc = _check(capsys, GRPO, "--gpu-mem", gpu)
    (f,) = _find(doc, "memory", "rl_fits")
    peak = rl["peak_phase"]
    assert f"peak phase {peak} {rl['phases'][peak]['gpu'] / 2**30:.2f} GiB per GPU" in f["message"]
    assert f["level"] == ("info" if rl["fits"] else "error") and rc == (0 if rl["fits"] else 2)
    assert all(e in f["message"] for e in rl["errors"])
    assert rl["fits"] is (gpu == "H100")


# ------------------------------------------------------------------------------------------------ bad input
def test_bad_input_is_one_line_exit_2(capsys, here):
    for args, needle in (
        (("missing.sh",), "missing.sh: no such file"),
        (("no-such-model", "--ngpu", "8"), "no-such-model"),
        (("Qwen3-8B", "--ngpu", "8", "--resume-from", here / "nothing"), "--resume-from"),
        ((VERL_LAUNCHER, "--tp", "4"), "--tp"),
        (("Qwen3-8B", "--ngpu", "8", "--env", "NOEQUALS"), "--env"),
    ):
        rc, out, err = _mlite(capsys, "check", *args)
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert rc == 2 and out == "" and len(lines) == 1 and needle in lines[0], (args, err)
    broken = here / "config.json"
    broken.write_text("{not json")
    rc, out, err = _mlite(capsys, "check", broken, "--ngpu", "8")
    assert rc == 2 and out == "" and err.count("\n") == 1 and "Traceback" not in err


# ------------------------------------------------------------------------------------------------ resume
@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A run directory of a real ``mlite run`` (tiny-dense, one step, one CPU process)."""
    out = tmp_path_factory.mktemp("resume") / "r1"
    res = run_cli("run", "--model", "tiny-dense", "--steps", "1", "--nproc", "1", "--device", "cpu", "--out", str(out))
    assert res.rc == 0, res
    return out


TINY = ("tiny-dense", "--ngpu", "1", "--optimizer", "fsdp2", "--param-dtype", "fp32")


def test_resume_the_same_plan(capsys, here, run_dir):
    rc, doc = _check(capsys, *TINY, "--resume-from", run_dir)
    assert rc == 0, doc
    (read,) = _find(doc, "resume")
    assert read["rule"] == "read" and "lite-run" in read["message"]
    assert doc["resume_from"]["format"] == "lite-run" and doc["resume_from"]["optimizer"] == "fsdp2"
    assert doc["resume_from"]["ngpu"] == json.loads((run_dir / "config.json").read_text())["nproc"]


def test_resume_with_another_topology_backend_or_layout(capsys, here, run_dir):
    base = ("tiny-dense", "--param-dtype", "fp32", "--resume-from", run_dir)
    rc, doc = _check(capsys, *base, "--ngpu", "2", "--optimizer", "fsdp2")
    (f,) = _find(doc, "resume", "format_topology")
    assert rc == 0 and f["level"] == "warning" and f["fixes"] == [{"ngpu": 1}]
    rc, doc = _check(capsys, *base, "--ngpu", "1", "--optimizer", "dist_opt")
    (f,) = _find(doc, "resume", "same_backend")
    assert rc == 2 and f["fixes"] == [{"optimizer": "fsdp2"}] and f["source"] == str(run_dir)
    rc, doc = _check(capsys, *base, "--ngpu", "1", "--optimizer", "fsdp2", "--pao", "--moment-dtype", "bf16")
    (f,) = _find(doc, "resume", "lite_layout")
    assert rc == 2 and f["fixes"] == [
        {"use_precision_aware_optimizer": False, "exp_avg_dtype": "fp32", "exp_avg_sq_dtype": "fp32"}
    ]


def test_a_backends_resume_rule_plugs_in(capsys, here, run_dir):
    def offload_rule(old, new):
        """mfsdp's shape: resuming with another offload_fraction is out of scope."""
        if old.options.get("offload_fraction") != new.options.get("offload_fraction"):
            raise MliteError("offload_fraction: the checkpoint was written with another offload_fraction")

    register_resume_rule("fsdp2", offload_rule)
    try:
        rc, doc = _check(capsys, *TINY, "--offload-fraction", "1.0", "--resume-from", run_dir)
        (f,) = _find(doc, "resume", "offload_rule")
        assert rc == 2 and f["fixes"] == [{"offload_fraction": 0.0}]
        assert _check(capsys, *TINY, "--resume-from", run_dir)[0] == 0
    finally:
        unregister_resume_rule("fsdp2", offload_rule)
    assert "fsdp2" not in RESUME_RULES


def test_a_model_that_needs_its_topology(capsys, here, run_dir, monkeypatch):
    assert "deepseek_v41" in SAME_TOPOLOGY_MODELS and "04baccf4" in SAME_TOPOLOGY_MODELS["deepseek_v41"]
    from mlite.models import from_hf_config

    mt = from_hf_config("tiny-dense").model_type
    monkeypatch.setitem(SAME_TOPOLOGY_MODELS, mt, SAME_TOPOLOGY_MODELS["deepseek_v41"])
    rc, doc = _check(capsys, *TINY[:1], "--ngpu", "2", *TINY[3:], "--resume-from", run_dir)
    (f,) = _find(doc, "resume", "model_topology")
    assert rc == 2 and "require the same topology on resume" in f["message"] and f["fixes"] == [{"ngpu": 1}]
    assert [e["rule"] for e in doc["findings"] if e["level"] == "error"] == ["model_topology"]


def _megatron_ckpt(root: Path, common: dict | None) -> Path:
    """A Megatron-LM checkpoint folder as its trainer lays it out: ``latest_checkpointed_iteration.txt`` and
    ``iter_0000005/`` with dist-ckpt's ``metadata.json`` and ``common.pt`` (the ``args`` namespace)."""
    import torch

    it = root / "iter_0000005"
    it.mkdir(parents=True)
    (root / "latest_checkpointed_iteration.txt").write_text("5")
    meta = {"sharded_backend": "torch_dist", "sharded_backend_version": 1, "common_backend": "torch"}
    (it / "metadata.json").write_text(json.dumps({**meta, "common_backend_version": 1}))
    if common is not None:
        torch.save(common, it / "common.pt")
    return root


def _args(**kw) -> argparse.Namespace:
    base = {
        "tensor_model_parallel_size": 2,
        "pipeline_model_parallel_size": 1,
        "virtual_pipeline_model_parallel_size": None,
        "context_parallel_size": 1,
        "expert_model_parallel_size": 1,
        "expert_tensor_parallel_size": 2,
        "world_size": 8,
        "use_distributed_optimizer": True,
        "dist_ckpt_optim_fully_reshardable": False,
    }
    return argparse.Namespace(**{**base, **kw})


def test_megatron_dist_ckpt_reshards_the_optimizer_over_dp_only(capsys, here):
    ckpt = _megatron_ckpt(here / "ckpt", {"args": _args(), "iteration": 5, "checkpoint_version": 3.0})
    plan = ("Qwen3-8B", "--ngpu", "8", "--gpu-mem", "H200")
    rc, doc = _check(capsys, *plan, "--tp", "2", "--etp", "2", "--resume-from", ckpt)
    assert rc == 0 and not _find(doc, "resume", "format_topology")
    assert doc["resume_from"]["sizes"] == {"tp": 2, "pp": 1, "vpp": 1, "cp": 1, "ep": 1, "etp": 2}
    rc, doc = _check(capsys, *plan, "--tp", "4", "--etp", "4", "--resume-from", ckpt)
    (f,) = _find(doc, "resume", "format_topology")
    assert rc == 2 and f["level"] == "error" and "reshards across DP only" in f["message"]
    assert f["fixes"] == [{"tp": 2, "etp": 2}, {"no_load_optim": True}]
    fully = _megatron_ckpt(here / "fully", {"args": _args(dist_ckpt_optim_fully_reshardable=True)})
    rc, doc = _check(capsys, *plan, "--tp", "4", "--etp", "4", "--resume-from", fully)
    (f,) = _find(doc, "resume", "format_topology")
    assert rc == 0 and f["level"] == "info"


def test_megatron_dist_ckpt_without_args_says_so(capsys, here):
    ckpt = _megatron_ckpt(here / "verl", {"iteration": 5})  # verl's checkpoint manager writes no Megatron args
    rc, doc = _check(capsys, "Qwen3-8B", "--ngpu", "8", "--gpu-mem", "H200", "--resume-from", ckpt)
    (f,) = _find(doc, "resume", "format_topology")
    assert rc == 0 and f["level"] == "warning" and "holds no Megatron-LM args" in f["message"]
    assert re.search(r"read megatron-dist-ckpt: topology not recorded", _find(doc, "resume", "read")[0]["message"])


LITE_CHECKPOINT = """
import sys
from mlite.runtime.config import RuntimeConfig
from mlite.runtime.runtime import create_runtime, save_checkpoint
handle = create_runtime(RuntimeConfig(hf_path="tiny-dense", device="cpu")).build_model()
save_checkpoint(handle, sys.argv[1])
"""


def test_a_lite_runtime_checkpoint(capsys, here):
    import subprocess
    import sys

    ckpt = here / "ckpt"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    res = subprocess.run([sys.executable, "-c", LITE_CHECKPOINT, str(ckpt)], env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    meta = json.loads((ckpt / "runtime.json").read_text())
    rc, doc = _check(capsys, *TINY, "--resume-from", ckpt / "runtime.json")  # the file or its folder
    saved = doc["resume_from"]
    assert rc == 0 and saved["format"] == "lite-dcp" and saved["ngpu"] == meta["world_size"] == 1
    assert saved["optimizer"] == meta["config"]["backend_cfg"]["optimizer"]["optimizer"] == "fsdp2"
    assert saved["sizes"]["tp"] == 1 and "no optimizer state" in saved["notes"][0]
    rc, doc = _check(capsys, *TINY, "--pao", "--moment-dtype", "bf16", "--resume-from", ckpt)
    (f,) = _find(doc, "resume", "lite_layout")
    assert rc == 2 and f["fixes"][0]["use_precision_aware_optimizer"] is False


def test_mfsdp_resume_with_another_offload_fraction_is_an_error_with_the_saved_value_as_fix():
    """The backend's own resume rule (mlite.options.rules.mfsdp_resume_rule, the M-FSDP design doc's
    §Checkpoint) is wired into the preflight's RESUME_RULES: another offload_fraction is an error, the same passes."""
    from mlite.check.resume import ResumePlan, resume_findings

    old = ResumePlan("ckpt", "lite-run", 2, {"tp": 1}, "mfsdp", {"offload_fraction": 1.0})
    bad = [
        f
        for f in resume_findings(old, ResumePlan("plan", None, 2, {"tp": 1}, "mfsdp", {"offload_fraction": 0.5}))
        if f.rule == "mfsdp_offload_fraction"
    ]
    assert len(bad) == 1 and bad[0].level == "error" and "resume with --offload-fraction 1" in bad[0].message
    assert bad[0].fixes == ({"offload_fraction": 1.0},)
    same = resume_findings(old, ResumePlan("plan", None, 2, {"tp": 1}, "mfsdp", {"offload_fraction": 1.0}))
    assert not [f for f in same if f.rule == "mfsdp_offload_fraction"]
