"""Each training-option rule is written once (:mod:`mlite.options.rules`, declared on the registry entries of
:mod:`mlite.options.optimizers`) and every layer refuses the same input with the rule's one message:
``TrainingOptions`` (estimator, ``mlite memory`` / ``export``), ``RunConfig`` (``mlite run``), the runtime's
``OptimizerConfig`` / ``RuntimeConfig``, and both command lines (exit 2, one stderr line, nothing created)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from conftest import assert_one_line_error, run_cli

from mlite.errors import MliteError
from mlite.launch import RunConfig
from mlite.options import TrainingOptions, rules
from mlite.options.optimizers import ALGORITHMS, BACKENDS
from mlite.runtime.config import MegatronLiteConfig, OptimizerConfig, RuntimeConfig

SETTINGS = dict(
    optimizer="fsdp2",
    optimizer_algorithm="adam",
    use_precision_aware_optimizer=False,
    use_distributed_optimizer=True,
    main_grads_dtype="fp32",
    exp_avg_dtype="fp32",
    exp_avg_sq_dtype="fp32",
    offload_fraction=0.0,
    mfsdp_bucket_size=40_000_000,
    precision="bf16",
    muon_num_ns_steps=5,
)
"""Settings no rule refuses (each case changes some)."""


def _runtime(**opt):
    """The runtime layer: an OptimizerConfig inside a RuntimeConfig (the backend's rules run there)."""
    return RuntimeConfig(
        hf_path="tiny-moe", device="cpu", backend_cfg=MegatronLiteConfig(optimizer=OptimizerConfig(**opt))
    )


# rule, the settings it refuses, and each layer's spelling of the same input
CASES = {
    "offload_fraction_in_range": (
        rules.offload_fraction_in_range,
        dict(offload_fraction=1.5),
        dict(offload_fraction=1.5),
        dict(offload_fraction=1.5),
        ["--offload-fraction", "1.5"],
        ["--offload-fraction", "1.5"],
    ),
    "bf16_moments_need_pao": (
        rules.bf16_moments_need_pao,
        dict(exp_avg_dtype="bf16", exp_avg_sq_dtype="bf16"),
        dict(moment_dtype="bf16"),
        dict(exp_avg_dtype="bf16", exp_avg_sq_dtype="bf16"),
        ["--moment-dtype", "bf16"],
        ["--moment-dtype", "bf16"],
    ),
    "pao_needs_distributed_optimizer": (
        rules.pao_needs_distributed_optimizer,
        dict(optimizer="dist_opt", use_precision_aware_optimizer=True, use_distributed_optimizer=False),
        dict(optimizer="dist_opt", pao=True, use_distributed_optimizer=False),
        dict(optimizer="dist_opt", use_precision_aware_optimizer=True, use_distributed_optimizer=False),
        ["--optimizer", "dist_opt", "--pao", "--no-distributed-optimizer"],
        ["--optimizer", "dist_opt", "--pao", "--no-distributed-optimizer"],
    ),
    "grads_in_param_dtype": (
        rules.grads_in_param_dtype,
        dict(optimizer="fsdp2", main_grads_dtype="bf16"),
        dict(optimizer="fsdp2", grad_dtype="bf16"),
        dict(optimizer="fsdp2", main_grads_dtype="bf16"),
        ["--optimizer", "fsdp2", "--grad-dtype", "bf16"],
        ["--optimizer", "fsdp2", "--grad-dtype", "bf16"],
    ),
    "always_sharded": (
        rules.always_sharded,
        dict(optimizer="fsdp2", use_distributed_optimizer=False),
        dict(optimizer="fsdp2", use_distributed_optimizer=False),
        dict(optimizer="fsdp2", use_distributed_optimizer=False),
        ["--optimizer", "fsdp2", "--no-distributed-optimizer"],
        ["--optimizer", "fsdp2", "--no-distributed-optimizer"],
    ),
    "no_pao": (
        rules.no_pao,
        dict(optimizer="dist_opt", optimizer_algorithm="sgd", use_precision_aware_optimizer=True),
        dict(optimizer="dist_opt", optimizer_algorithm="sgd", pao=True),
        dict(optimizer="dist_opt", optimizer_algorithm="sgd", use_precision_aware_optimizer=True),
        ["--optimizer", "dist_opt", "--optimizer-algorithm", "sgd", "--pao"],
        ["--optimizer", "dist_opt", "--optimizer-algorithm", "sgd", "--pao"],
    ),
    # Megatron-FSDP (mlite.options.rules, mfsdp block; ISEEKYAN/Megatron-LM mfsdp/config.py @ 0d14590c)
    "mfsdp_fp32_main_grads": (
        rules.mfsdp_fp32_main_grads,
        dict(optimizer="mfsdp", main_grads_dtype="bf16"),
        dict(optimizer="mfsdp", grad_dtype="bf16"),
        dict(optimizer="mfsdp", main_grads_dtype="bf16"),
        ["--optimizer", "mfsdp", "--grad-dtype", "bf16"],
        ["--optimizer", "mfsdp", "--grad-dtype", "bf16"],
    ),
    "mfsdp_sharded": (
        rules.mfsdp_sharded,
        dict(optimizer="mfsdp", use_distributed_optimizer=False),
        dict(optimizer="mfsdp", use_distributed_optimizer=False),
        dict(optimizer="mfsdp", use_distributed_optimizer=False),
        ["--optimizer", "mfsdp", "--no-distributed-optimizer"],
        ["--optimizer", "mfsdp", "--no-distributed-optimizer"],
    ),
    "mfsdp_bucket_size_positive": (
        rules.mfsdp_bucket_size_positive,
        dict(optimizer="mfsdp", mfsdp_bucket_size=0),
        dict(optimizer="mfsdp", mfsdp_bucket_size=0),
        dict(optimizer="mfsdp", mfsdp_bucket_size=0),
        ["--optimizer", "mfsdp", "--mfsdp-bucket-size", "0"],
        ["--optimizer", "mfsdp", "--mfsdp-bucket-size", "0"],
    ),
    # Muon (Megatron Lite's examples/muon/README.md @ 045fc78a): dist_opt only, no PAO, no CPU offload
    "muon_needs_dist_opt": (
        rules.muon_needs_dist_opt,
        dict(optimizer="fsdp2", optimizer_algorithm="muon"),
        dict(optimizer="fsdp2", optimizer_algorithm="muon"),
        dict(optimizer="fsdp2", optimizer_algorithm="muon"),
        ["--optimizer", "fsdp2", "--optimizer-algorithm", "muon"],
        ["--optimizer", "fsdp2", "--optimizer-algorithm", "muon"],
    ),
    "muon_no_pao": (
        rules.muon_no_pao,
        dict(optimizer="dist_opt", optimizer_algorithm="muon", use_precision_aware_optimizer=True),
        dict(optimizer="dist_opt", optimizer_algorithm="muon", pao=True),
        dict(optimizer="dist_opt", optimizer_algorithm="muon", use_precision_aware_optimizer=True),
        ["--optimizer", "dist_opt", "--optimizer-algorithm", "muon", "--pao"],
        ["--optimizer", "dist_opt", "--optimizer-algorithm", "muon", "--pao"],
    ),
    "muon_no_cpu_offload": (
        rules.muon_no_cpu_offload,
        dict(optimizer="dist_opt", optimizer_algorithm="muon", offload_fraction=0.5),
        dict(optimizer="dist_opt", optimizer_algorithm="muon", offload_fraction=0.5),
        dict(optimizer="dist_opt", optimizer_algorithm="muon", offload_fraction=0.5),
        ["--optimizer", "dist_opt", "--optimizer-algorithm", "muon", "--offload-fraction", "0.5"],
        ["--optimizer", "dist_opt", "--optimizer-algorithm", "muon", "--offload-fraction", "0.5"],
    ),
    # the Muon hyper-parameters are estimator / launcher options (mlite run trains with their defaults)
    "muon_settings": (
        rules.muon_settings,
        dict(optimizer="dist_opt", optimizer_algorithm="muon", muon_num_ns_steps=3),
        None,
        None,
        ["--optimizer", "dist_opt", "--optimizer-algorithm", "muon", "--muon-ns-steps", "3"],
        None,
    ),
    # the lite runtime has no precision setting (it trains BF16 only): its layers (RunConfig, OptimizerConfig,
    # mlite run) have no spelling of this input, hence None
    "fp8_weights_need_fsdp2": (
        rules.fp8_weights_need_fsdp2,
        dict(optimizer="dist_opt", precision="hopper_blockwise_fp8_weight"),
        None,
        None,
        ["--optimizer", "dist_opt", "--precision", "hopper_blockwise_fp8_weight"],
        None,
    ),
}


def _message(rule, settings: dict) -> str:
    """The rule's own message for ``settings``."""
    with pytest.raises(MliteError) as e:
        rule(SimpleNamespace(**{**SETTINGS, **settings}))
    return str(e.value)


def _refusal(make) -> str:
    with pytest.raises(MliteError) as e:
        make()
    return str(e.value)


def test_every_rule_is_declared_on_a_registry_entry_and_has_a_case():
    """The rules the entries declare are the rules this file tests (a new rule gets a case here)."""
    declared = {r.__name__ for e in (*ALGORITHMS.values(), *BACKENDS.values()) for r in e.refuses}
    assert declared | {"offload_fraction_in_range"} == set(CASES)


@pytest.mark.parametrize("name", CASES)
def test_every_layer_refuses_the_same_input_with_the_rules_one_message(name, tmp_path):
    rule, training, run, optimizer, memory_words, run_words = CASES[name]
    msg = _message(rule, training)
    assert "\n" not in msg and msg.split(":")[0] in SETTINGS  # names the field
    assert _refusal(lambda: TrainingOptions(**training)) == msg
    res = run_cli("memory", "Qwen3-8B", "--ngpu", "8", *memory_words)
    assert_one_line_error(res, msg)
    if run is None:  # a setting only the estimator and the launchers have (see CASES)
        return
    assert _refusal(lambda: RunConfig(**run)) == msg
    assert _refusal(lambda: _runtime(**optimizer)) == msg
    out = tmp_path / "r"
    res = run_cli("run", "--model", "tiny-dense", "--steps", "2", "--nproc", "1", "--device", "cpu", "--out", out,
                  *run_words)  # fmt: skip
    assert_one_line_error(res, msg)
    assert not out.exists()


def test_the_rules_accept_what_megatron_core_runs():
    """The same layers accept the settings next to each refusal (the rules are not stricter than they say)."""
    TrainingOptions(optimizer="dist_opt", use_precision_aware_optimizer=True, exp_avg_dtype="bf16")
    TrainingOptions(optimizer="dist_opt", main_grads_dtype="bf16")  # grad_reduce_in_fp32=False runs without PAO
    TrainingOptions(optimizer="dist_opt", use_distributed_optimizer=False, offload_fraction=1.0)
    TrainingOptions(optimizer_algorithm="sgd")
    RunConfig(pao=True, moment_dtype="bf16", offload_fraction=1.0)
    _runtime(optimizer="dist_opt", use_distributed_optimizer=False, main_grads_dtype="bf16")


def test_what_only_the_lite_runtime_refuses_is_refused_by_the_run_and_runtime_layers_alike(tmp_path):
    """dist_opt with offload_fraction: Megatron-Core runs it (the estimator accepts it); the lite runtime does not,
    and the run (checked before it starts) and the runtime say the same line."""
    TrainingOptions(optimizer="dist_opt", offload_fraction=0.5)
    msg = _message(rules.state_on_device, dict(offload_fraction=0.5))
    assert _refusal(lambda: _runtime(optimizer="dist_opt", offload_fraction=0.5)) == msg
    assert _refusal(RunConfig(optimizer="dist_opt", offload_fraction=0.5).runtime_config) == msg
    out = tmp_path / "r"
    res = run_cli("run", "--model", "tiny-dense", "--steps", "2", "--nproc", "1", "--device", "cpu", "--out", out,
                  "--optimizer", "dist_opt", "--offload-fraction", "0.5")  # fmt: skip
    assert_one_line_error(res, msg)
    assert not out.exists()
    # an algorithm the lite runtime has no class for (sgd is an estimator entry) is refused the same way
    TrainingOptions(optimizer_algorithm="sgd")
    with pytest.raises(MliteError, match="optimizer_algorithm: sgd is not run by the lite runtime's fsdp2"):
        _runtime(optimizer_algorithm="sgd")


def test_the_options_layer_loads_no_memory_runtime_or_launch_module():
    """``options/`` sits just above ``mesh/`` and ``models/``: what ``import mlite.options`` really loads (the
    transitive closure, in a fresh interpreter) holds no estimator, runtime or launcher module, and no torch."""
    import subprocess
    import sys

    code = "import sys, mlite.options; print(' '.join(sorted(sys.modules)))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    bad = [m for m in loaded if m.split(".")[:2] in (["mlite", "memory"], ["mlite", "runtime"], ["mlite", "launch"])]
    assert bad == [] and "torch" not in loaded
    assert "mlite.options.optimizers" in loaded


def test_verl_lite_engine_backends_are_refused_alike_by_the_run_the_export_and_the_engine(tmp_path):
    """verl's lite engine runs the backends whose entry says so (fsdp2): ``mlite run --trainer verl-sft``, ``mlite
    export --target verl-lite-sft`` and the engine's own config reader say the one line of
    :func:`~mlite.options.optimizers.check_verl_lite_engine`, each naming its spelling of the field."""
    from mlite.options.optimizers import check_verl_lite_engine

    assert [b.name for b in BACKENDS.values() if b.verl_lite_engine] == ["fsdp2"]
    check_verl_lite_engine("fsdp2")
    flag = _message(lambda o: check_verl_lite_engine("dist_opt", "--optimizer"), {})
    assert flag.startswith("--optimizer: dist_opt is not run by verl's lite engine") and "\n" not in flag
    assert _refusal(lambda: RunConfig(trainer="verl-sft", optimizer="dist_opt")) == flag
    out = tmp_path / "r"
    res = run_cli("run", "--model", "tiny-dense", "--steps", "2", "--nproc", "1", "--device", "cpu", "--out", out,
                  "--trainer", "verl-sft", "--optimizer", "dist_opt")  # fmt: skip
    assert_one_line_error(res, flag)
    assert not out.exists()
    res = run_cli("export", "tiny-dense", "--nodes", "1", "--target", "verl-lite-sft", "--optimizer", "dist_opt",
                  "--out", out)  # fmt: skip
    assert_one_line_error(res, flag)
    assert not out.exists()
    key = _message(lambda o: check_verl_lite_engine("dist_opt", "engine.impl_cfg.optimizer"), {})
    # the same rule and wording, with the caller's field name (and its fix: a flag, or the key's value)
    assert key.split(":", 1)[1].split(";")[0] == flag.split(":", 1)[1].split(";")[0]
    assert flag.endswith("use --optimizer fsdp2") and key.endswith("set it to fsdp2")


@pytest.mark.parametrize(
    "run, training",
    [
        (dict(recompute="some"), dict(recompute="some")),
        (dict(moment_dtype="fp8"), dict(exp_avg_dtype="fp8", exp_avg_sq_dtype="fp8")),
        (dict(grad_dtype="fp8"), dict(main_grads_dtype="fp8")),
        (dict(optimizer="zero3"), dict(optimizer="zero3")),
    ],
)
def test_a_training_value_outside_its_choices_is_refused_alike_by_the_run_and_the_options(run, training):
    """A run's training fields are the training vocabulary's: the run refuses a value outside the choices with the
    options' own line (it states no choice list of its own)."""
    assert _refusal(lambda: RunConfig(**run)) == _refusal(lambda: TrainingOptions(**training))
