"""The options table: every row round-trips through every spelling derived from it.

For each option of :data:`mlite.options.TRAINING` (a non-default value made from the row's own type and choices, so
a new row is covered without touching this file): flags -> TrainingOptions -> printed command line -> the same
options (``mlite memory`` and ``mlite export`` parsers, and the memory widget's command), and TrainingOptions ->
launcher of each export target -> ``mlite import-launcher``'s reader -> the same options, except the options the
table lists as not expressible on that target, which must come back as what the target runs. Every RunConfig row
goes flags -> RunConfig -> ``cli_args`` -> the same RunConfig. Oracles: argparse itself, the launcher read back
with the bash reader, verl's packaged Hydra config (compose), the dataclasses' own defaults.
"""

from __future__ import annotations

import dataclasses
import shlex
import subprocess

import pytest
from conftest import assert_one_line_error, run_cli

from mlite.cli import build_parser
from mlite.export import TARGETS, ExportPlan, import_launcher, render
from mlite.export.validate import validate_command
from mlite.launch import RunConfig
from mlite.memory import TrainingOptions
from mlite.mesh import ParallelConfig
from mlite.options import EXPORT, NOT_OPTIONS, RUN, TRAINING, command_args, values_from_args
from mlite.options.schema import DEFAULT, KEEP, NotExpressible
from mlite.options.table import RUN_VERL_NOT_RUN
from mlite.options.verl import mapping, not_expressible, target_view

DEFAULTS = TrainingOptions()
BY_FIELD = {r.field: r for r in TRAINING}
MODEL = "Qwen3-8B"  # dense: TP 2 is valid on 8 GPUs and sequence parallelism is the option's own choice
MESH = ParallelConfig(tp=2)


def sample(row):
    """A value of ``row`` other than its default (from its choices or its type)."""
    if row.choices:
        return next(c for c in row.choices if c != row.default)
    if row.type is bool:
        return not row.default
    if row.type is int:
        return (row.default or 1) * 2 + 1 if row.field != "gpus_per_node" else 4
    if row.type is float:
        return {"gpu_memory_gib": 141.0}.get(row.field, 0.25 if row.default < 0.5 else row.default / 2)
    if row.type is tuple:
        return ("mlp",)
    return f"{row.default}-x"


def training_sample(row, target: str | None = None) -> TrainingOptions:
    """TrainingOptions with ``row`` (and the rows sharing its flag) at the sample value, plus what that value
    needs (bf16 state needs PAO; a key that ``requires`` an option on ``target`` gets it)."""
    v = sample(row)
    kw = {r.field: v for r in TRAINING if r.flag == row.flag} if row.flag else {row.field: v}
    if v == "bf16" and row.field != "param_dtype":
        kw["use_precision_aware_optimizer"] = True
    requires = getattr(mapping(row, *_backend(target)), "requires", None) if target else None
    if requires:
        kw[requires] = True
    return TrainingOptions(**kw)


def _fields(o) -> dict:
    """The fields of a TrainingOptions; lists as tuples (import-launcher's options dict is JSON-shaped)."""
    return {f.name: tuple(v) if isinstance(v := getattr(o, f.name), list) else v for f in dataclasses.fields(o)}


def _parse_options(command: str, *words):
    from mlite.cli.memory import options_from_args

    base = (
        ["memory", MODEL, "--ngpu", "8"]
        if command == "memory"
        else ["export", MODEL, "--nodes", "1", "--target", TARGETS[0], "--out", "x"]
    )
    return options_from_args(build_parser().parse_args([*base, *words]))


# ---------------------------------------------------------------------------------------------- the table itself
def test_rows_match_the_dataclasses():
    fields = {f.name: f for f in dataclasses.fields(TrainingOptions)}
    assert sorted(BY_FIELD) == sorted(set(fields) - set(NOT_OPTIONS))  # every option has exactly one row
    assert len(BY_FIELD) == len(TRAINING)
    for r in TRAINING:
        assert getattr(DEFAULTS, r.field) == r.default, r.field
        assert isinstance(r.default, r.type), r.field
        assert r.mlite is not None and r.megatron is not None, f"{r.field}: say what each target does with it"
    # RunConfig composes the mesh and the training options: a RUN row is a field of its own or names the nested
    # fields it sets (``path``), and every default is the row's
    own = {f.name: f.default for f in dataclasses.fields(RunConfig) if f.name not in ("parallel", "training")}
    assert sorted(r.field for r in RUN if not r.path) == sorted(own)
    nested = {"parallel": {f.name for f in dataclasses.fields(ParallelConfig)}, "training": set(fields)}
    default = RunConfig()
    for r in RUN:
        for p in r.path:
            part, name = p.split(".")
            assert name in nested[part], p
            assert getattr(getattr(default, part), name) == r.default, p
        assert getattr(default, r.field) == r.default == (own[r.field] if not r.path else r.default), r.field
    assert (default.optimizer, default.num_microbatches, default.param_dtype) == ("fsdp2", 1, "auto")  # run's own


@pytest.mark.parametrize("command", ["memory", "export"])
def test_parser_defaults_and_help_come_from_the_table(command):
    parser = build_parser()
    sub = parser._subparsers._group_actions[0].choices[command]
    actions = {a.option_strings[0]: a for a in sub._actions if a.option_strings}
    for r in TRAINING:
        a = actions[r.flag]
        if r.cli in ("switch", "negate"):
            assert a.default is False and a.const is True, r.flag
        elif r.type is tuple:
            assert a.default == ",".join(r.default)
        elif r.cli != "gpu":
            assert a.default == r.default, r.flag
        assert a.help == r.help and tuple(a.choices or ()) == r.choices, r.flag  # mesh rows too
    # no flag is spelled twice and every CLI flag that was there before is still there
    for flag in (
        "--optimizer",
        "--no-distributed-optimizer",
        "--pao",
        "--grad-dtype",
        "--moment-dtype",
        "--no-param-remainders",
        "--offload-fraction",
        "--param-offload",
        "--optimizer-offload",
        "--micro-batch",
        "--num-microbatches",
        "--recompute",
        "--recompute-modules",
        "--sequence-parallel",
        "--attention",
        "--gpu-mem",
        "--seq-len",
        "--gpus-per-node",
    ):
        assert flag in actions


# ---------------------------------------------------------------------------------------------- flags
@pytest.mark.parametrize("row", TRAINING, ids=lambda r: r.field)
@pytest.mark.parametrize("command", ["memory", "export"])
def test_flags_to_options_to_command_line_and_back(row, command):
    o = training_sample(row)
    words = command_args(o, TRAINING)
    assert row.flag in words  # a non-default value is printed
    back = _parse_options(command, *words)
    assert back == o
    assert command_args(back, TRAINING) == words  # the printed line is canonical: flags -> options -> same flags


def test_defaults_print_nothing_and_a_shared_flag_refuses_what_it_cannot_say():
    from mlite.errors import MliteError

    assert command_args(DEFAULTS, TRAINING) == []
    assert _parse_options("memory") == DEFAULTS
    with pytest.raises(MliteError, match="--moment-dtype"):
        command_args(TrainingOptions(use_precision_aware_optimizer=True, exp_avg_dtype="bf16"), TRAINING)


def test_the_widget_prints_what_the_cli_parses():
    from widgets.memory_view import MemoryView
    from widgets.planner import MeshPlanner

    planner = MeshPlanner(MODEL, ngpu=8, tp=2)
    view = MemoryView(
        planner,
        gpu="H200",
        optimizer="fsdp2",
        use_precision_aware_optimizer=True,
        exp_avg_dtype="bf16",
        exp_avg_sq_dtype="bf16",
        offload_fraction=0.35,
        param_offload=True,
        optimizer_offload=True,
        recompute="selective",
        micro_batch_size=2,
        num_microbatches=3,
        sequence_parallel=True,
        attention="unfused",
        store_param_remainders=False,
        recompute_modules=("mlp",),
        param_dtype="fp16",
        grad_offload=True,
        headroom=0.1,
    )
    cmd = shlex.split(view.command())
    for flag in ("--recompute-modules", "--param-dtype", "--grad-offload", "--headroom", "--no-param-remainders"):
        assert flag in cmd  # options without a control are not dropped
    assert cmd[:3] == ["mlite", "memory", MODEL] and "--gpu-mem" in cmd and cmd[cmd.index("--gpu-mem") + 1] == "H200"
    from mlite.cli.memory import options_from_args

    assert options_from_args(build_parser().parse_args(cmd[1:])) == view.options()


def test_the_run_view_keeps_what_it_has_no_control_for(tmp_path):
    """The run view's form over a config with options it shows no control for (grad dtype, cuts, batch details):
    the config it starts is the one it was given, flag for flag."""
    from widgets.run_view import RunView

    cfg = RunConfig(
        model="tiny-moe", steps=6, nproc=2, optimizer="dist_opt", grad_dtype="bf16", pao=True, layers=2, experts=4,
        tokens_per_microbatch=256, num_microbatches=2, lr_warmup_steps=1, recompute="selective", seed=3, lr=1e-3,
        param_dtype="bf16", threads=1, clip_grad=0.5, out=str(tmp_path / "r"),
    )  # fmt: skip
    view = RunView(cfg)
    assert view.config() == cfg and view.config().cli_args() == cfg.cli_args()
    view._steps.value = 7  # a control still changes its field, and only it
    assert view.config() == RunConfig(**{**cfg.to_dict(), "steps": 7})


@pytest.mark.parametrize("row", RUN, ids=lambda r: r.field)
def test_run_flags_round_trip(row, tmp_path):
    from mlite.cli.run import _config

    base = {"model": "tiny-dense", "steps": 5, "nproc": 2, "device": "cpu", "out": str(tmp_path / "r")}
    v = {
        "model": "tiny-moe",
        "steps": 6,
        "nproc": 3,
        "device": "cuda",
        "out": str(tmp_path / "o"),
        "pao": True,
        "moment_dtype": "bf16",
        "param_dtype": "bf16",
        "dataset": "other_sft",
    }.get(row.field)
    if v is None:
        v = sample(row) if row.default is not None else 3
    kw = {**base, row.field: v}
    if row.field == "moment_dtype":
        kw["pao"] = True
    if row.field in ("use_distributed_optimizer", "grad_dtype"):  # dist_opt settings (fsdp2 refuses them)
        kw["optimizer"] = "dist_opt"
    if row.field == "lr_warmup_steps":
        kw["steps"] = 10
    cfg = RunConfig(**kw)
    words = cfg.cli_args()
    if row.field != "out":
        assert row.flag in words
    assert _config(build_parser().parse_args(["run", *words, "--out", cfg.out])) == cfg


@pytest.mark.parametrize("row", EXPORT, ids=lambda r: r.field)
def test_export_flags_round_trip(row):
    from mlite.export.plan import DEFAULT_LOG_DIR
    from mlite.options.table import TARGETS as T

    assert tuple(T) == TARGETS and ExportPlan(model=MODEL).log_dir == DEFAULT_LOG_DIR
    plan_fields = {f.name: f.default for f in dataclasses.fields(ExportPlan)}
    assert plan_fields[row.field] == row.default, row.field
    v = sample(row) if row.default is not None else ("/somewhere/x" if row.type is str else 4)
    plan = ExportPlan(model=MODEL, **{"target": TARGETS[1], row.field: v})
    words = command_args(plan, EXPORT)
    assert row.flag in words
    back = values_from_args(build_parser().parse_args(["export", MODEL, "--out", "x", *words]), EXPORT)
    assert {r.field: getattr(plan, r.field) for r in EXPORT} == back


# ---------------------------------------------------------------------------------------------- verl
EXPECTED_NOT_EXPRESSIBLE = {
    "estimator": {
        "attention",
        "dropout",
        "fused_cross_entropy",
        "activation_model",
        "lite_device",
        "gpu_memory_gib",
        "gpu",
        "headroom",
        "framework_overhead_gib",
        "offload_master_for_forward",  # the Megatron Lite build (ISEEKYAN/Megatron-LM#232), not a launcher key
        "mfsdp_grad_staging",
    },
    "verl-mlite-sft": {
        "use_distributed_optimizer",
        "main_grads_dtype",
        "exp_avg_dtype",
        "exp_avg_sq_dtype",
        "store_param_remainders",
        "num_microbatches",
        "sequence_parallel",
        "chunked_optimizer_state_offload",  # verl's mlite engine does not pass them on (mlite_engine.py @ d48bd6be)
        "optimizer_state_offload_chunk_size_mb",
        "optimizer_state_offload_fraction",
        "engram_trainable",  # DeepSeek-V4.1's Engram switch: no verl key on any target
    },
    "verl-mlite-grpo": {
        "use_distributed_optimizer",
        "main_grads_dtype",
        "exp_avg_dtype",
        "exp_avg_sq_dtype",
        "store_param_remainders",
        "num_microbatches",
        "sequence_parallel",
        "chunked_optimizer_state_offload",
        "optimizer_state_offload_chunk_size_mb",
        "optimizer_state_offload_fraction",
        "engram_trainable",  # DeepSeek-V4.1's Engram switch: no verl key on any target
    },
    "verl-megatron-grpo": {
        "optimizer",
        "grad_offload",
        "num_microbatches",
        "engram_trainable",
        "mfsdp_bucket_size",
        "precision",
    },
}
"""What each target cannot express (beyond the estimator's own assumptions): the table must say exactly this."""


@pytest.mark.parametrize("target", TARGETS)
def test_the_table_lists_what_each_target_cannot_express(target):
    assert set(not_expressible(target)) == EXPECTED_NOT_EXPRESSIBLE["estimator"] | EXPECTED_NOT_EXPRESSIBLE[target]


def _read_back(o: TrainingOptions, target: str):
    plan = ExportPlan(model=MODEL, target=target, parallel=MESH, options=o, nodes=1, gpus_per_node=o.gpus_per_node)
    res = render(plan)
    imp = import_launcher("launcher", text=res.files[res.launcher])
    return imp.training_options(), res


def _runs(row, target, value):
    """What ``target`` runs for ``row`` at ``value`` as the launcher says it (a reader's view)."""
    m = mapping(row, *_backend(target))
    if isinstance(m, NotExpressible):
        return row.default if m.runs in (KEEP, DEFAULT) else m.runs
    return value


def _backend(target):
    from mlite.options.table import TARGETS as T

    return T[target]


@pytest.mark.parametrize("row", TRAINING, ids=lambda r: r.field)
@pytest.mark.parametrize("target", TARGETS)
def test_options_to_launcher_to_import_launcher(row, target):
    o = training_sample(row, target)
    got, res = _read_back(o, target)
    view, notes = target_view(o, target, {"tp": MESH.tp, "moe": False})
    if row.field in not_expressible(target):
        assert getattr(got, row.field) == _runs(row, target, getattr(o, row.field))
        m = mapping(row, *_backend(target))
        if m.runs is not KEEP:  # the exporter says what it did instead
            assert any(n.startswith(f"{row.field}=") for n in res.notes), res.notes
    else:
        assert _fields(got)[row.field] == getattr(o, row.field)  # the option itself comes back
    # and everything else is what the target runs (its couplings, e.g. grad offload -> param_offload on Megatron)
    want = {k: (_runs(BY_FIELD[k], target, v) if k in BY_FIELD else v) for k, v in _fields(view).items()}
    assert _fields(got) == want
    assert set(notes) <= set(res.notes)


@pytest.mark.parametrize("target", TARGETS)
def test_all_options_at_once_compose_against_verl_and_read_back(target, tmp_path):
    """Every expressible option off its default in one launcher: verl's Hydra config takes the keys (bash's own
    DRY_RUN expansion, composed), and import-launcher reads every one of them back."""
    kw = {r.field: sample(r) for r in TRAINING if r.field not in not_expressible(target)}
    kw.update(use_precision_aware_optimizer=True, recompute="selective")
    kw.pop("use_distributed_optimizer", None)  # PAO needs it (Megatron-Core); its own row tests it off
    kw.pop("optimizer_algorithm", None)  # PAO runs adam only (Megatron-Core); its own row tests sgd
    for f in ("chunked_optimizer_state_offload", "optimizer_state_offload_chunk_size_mb",
              "optimizer_state_offload_fraction"):  # fmt: skip
        kw.pop(f, None)  # exclusive of offload_fraction and fsdp2 (Megatron-Core): tests/test_chunked_offload.py
    kw.pop("precision", None)  # a profile fixes FP32 state and bf16 parameters (PAO, fp16 refused); its row tests it
    if target == "verl-megatron-grpo":
        kw.update(main_grads_dtype="bf16", exp_avg_dtype="bf16", exp_avg_sq_dtype="bf16")
    o = TrainingOptions(**kw)
    got, res = _read_back(o, target)
    for f in kw:
        assert _fields(got)[f] == getattr(o, f), f
    script = tmp_path / res.launcher
    script.write_text(res.files[res.launcher])
    p = subprocess.run(
        ["bash", str(script)],
        env={"PATH": "/usr/bin:/bin", "HOME": "/home/t", "DRY_RUN": "1"},
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
        check=False,
    )
    assert p.returncode == 0, p.stderr
    v = validate_command(shlex.split(p.stdout))
    assert v.ok, v.problems


def test_an_unexpanded_value_is_unresolved_not_a_value():
    text = (
        "python3 -m verl.trainer.main_ppo --config-name=ppo_megatron_trainer trainer.nnodes=1 "
        "trainer.n_gpus_per_node=8 'actor_rollout_ref.actor.megatron.param_offload=$(pick)' "
        "data.max_prompt_length=100 data.max_response_length=28"
    )
    imp = import_launcher("t", text=text)
    assert "param_offload" not in imp.options and imp.options["seq_len"] == 128
    assert any("param_offload" in w and "unresolved" in w for w in imp.warnings)


# ---------------------------------------------------------------------------------------------- bad values
@pytest.mark.parametrize(
    "words, needle",
    [
        (["--optimizer", "adam"], "--optimizer"),
        (["--recompute", "partial"], "--recompute"),
        (["--moment-dtype", "fp8"], "--moment-dtype"),
        (["--param-dtype", "fp64"], "--param-dtype"),
        (["--grad-dtype", "fp8"], "--grad-dtype"),
        (["--optimizer", "dist_opt", "--pao", "--no-distributed-optimizer"], "needs the distributed optimizer"),
        (["--optimizer", "dist_opt", "--offload-fraction", "0.5"], "use --optimizer fsdp2 for an offloaded"),
        (["--grad-dtype", "bf16"], "main_grads_dtype: bf16 is dist_opt's gradient buffer"),
        (["--no-distributed-optimizer"], "is a dist_opt setting"),
    ],
)
def test_run_refuses_unknown_option_values_before_anything_starts(tmp_path, words, needle):
    out = tmp_path / "r"
    res = run_cli(
        "run", "--model", "tiny-moe", "--steps", "5", "--nproc", "1", "--device", "cpu", "--out", str(out), *words
    )
    assert_one_line_error(res, needle)
    assert not out.exists()


@pytest.mark.parametrize(
    "words, needle",
    [
        (["--optimizer", "adam"], "--optimizer"),
        (["--recompute", "partial"], "--recompute"),
        (["--grad-dtype", "fp8"], "--grad-dtype"),
        (["--gpu-mem", "H900"], "--gpu-mem"),
        (["--offload-fraction", "half"], "--offload-fraction"),
        (["--headroom", "2"], "headroom must be in [0, 1)"),
        (["--headroom", "-0.5"], "headroom must be in [0, 1)"),
        (["--framework-overhead-gib", "-5"], "framework_overhead_gib must be a finite number >= 0"),
    ],
)
def test_memory_and_export_refuse_unknown_option_values(tmp_path, words, needle):
    assert_one_line_error(run_cli("memory", MODEL, "--ngpu", "8", *words), needle)
    out = tmp_path / "e"
    assert_one_line_error(
        run_cli("export", MODEL, "--nodes", "1", "--target", TARGETS[0], "--out", str(out), *words), needle
    )
    assert not out.exists()


# ---------------------------------------------------------------------------------------------- mlite run, verl-sft
def test_every_run_field_says_what_verl_sft_does_with_it():
    """``mlite run --trainer verl-sft``: each RunConfig field is a Hydra key, reaches verl another way, or is not run
    (then refused); a new RunConfig row fails here until it is placed."""
    from mlite.options.schema import Key, Via
    from mlite.options.table import RUN_VERL_KEYS, RUN_VERL_NOT_RUN, RUN_VERL_OTHER

    for r in RUN:  # the row says it: a key, another way, or not run (with the reason)
        assert isinstance(r.verl_sft, (Key, Via, NotExpressible)), f"{r.field}: say what verl-sft does with it"
    tables = (set(RUN_VERL_KEYS), set(RUN_VERL_OTHER), set(RUN_VERL_NOT_RUN))
    assert sorted(f for t in tables for f in t) == sorted(r.field for r in RUN)  # each field exactly once
    assert RUN_VERL_KEYS["pao"] == "+optim.override_optimizer_config.use_precision_aware_optimizer"  # + for add=True


@pytest.mark.parametrize("field", sorted(RUN_VERL_NOT_RUN))
def test_verl_sft_refuses_what_it_does_not_run(field, tmp_path):
    """Every field of RUN_VERL_NOT_RUN (a new one included) is refused with its flag and the table's reason."""
    from mlite.errors import MliteError

    row = {r.field: r for r in RUN}[field]
    value = {
        "hf_checkpoint": str(tmp_path),
        "crash_at_step": 2,
        "compile": True,
        "optimizer_algorithm": "sgd",
        "mfsdp_grad_staging": "ring",
    }.get(field, 2)
    with pytest.raises(MliteError, match=f"{field}: --trainer verl-sft does not run {row.flag}") as err:
        RunConfig(trainer="verl-sft", model="tiny-dense", steps=3, nproc=1, **{field: value})
    assert RUN_VERL_NOT_RUN[field] in str(err.value)
    RunConfig(trainer="lite", model="tiny-dense", steps=3, nproc=1, **{field: value})  # the kit's trainer runs it


@pytest.mark.parametrize("row", TRAINING, ids=lambda r: r.field)
def test_the_local_target_reads_back_as_its_cluster_target(row):
    """``verl-lite-sft`` (the local variant, :data:`mlite.options.table.ENGINE_SWITCH`) writes the keys of
    ``verl-mlite-sft`` with fsdp2 (the lite engine's optimizer): import-launcher reads the same options back from both,
    and only the switched keys differ between the two launchers."""
    from dataclasses import replace

    from mlite.options.table import ENGINE_SWITCH

    (local,) = ENGINE_SWITCH
    cluster, switched = ENGINE_SWITCH[local]
    from mlite.errors import MliteError

    try:
        o = replace(training_sample(row, cluster), optimizer="fsdp2")
    except MliteError as e:  # a dist_opt-only value: fsdp2, the local target's optimizer, refuses it by name
        assert row.field in e.message
        return
    got, raw = {}, {}
    for target in (cluster, local):
        plan = ExportPlan(model=MODEL, target=target, parallel=MESH, options=o, nodes=1, gpus_per_node=o.gpus_per_node)
        res = render(plan)
        imp = import_launcher("launcher", text=res.files[res.launcher])
        got[target], raw[target] = imp.training_options(), {ov.key: ov.raw for ov in imp.overrides}
    assert got[local] == got[cluster]
    if row.field not in not_expressible(cluster):
        assert _fields(got[local])[row.field] == getattr(o, row.field)
    # the two launchers' overrides differ exactly in the switched keys, each holding its target's value
    switched_keys = {k for k, _, _ in switched}
    assert {k: v for k, v in raw[local].items() if k not in switched_keys} == {
        k: v for k, v in raw[cluster].items() if k not in switched_keys
    }
    for k, cluster_value, local_value in switched:
        assert (raw[cluster].get(k), raw[local].get(k)) == (cluster_value, local_value), k


@pytest.mark.parametrize("optimizer", ["dist_opt", "fsdp2"])
@pytest.mark.parametrize("pao", [False, True])
def test_what_the_memory_view_disables_does_not_apply(optimizer, pao):
    """``inapplicable`` (the controls the memory view disables): each listed option, moved off the value it takes,
    is either refused by TrainingOptions or changes nothing in the estimate (oracle: ``mlite.memory.estimate``);
    each option not listed there that the view can disable does change it or is legal."""
    from mlite.errors import MliteError
    from mlite.memory import estimate
    from mlite.mesh import resolve
    from mlite.models import from_hf_config
    from mlite.options.optimizers import inapplicable

    spec = from_hf_config(MODEL)
    plan = resolve(spec, 8, MESH)
    base = {"optimizer": optimizer, "use_precision_aware_optimizer": pao}
    off = inapplicable(optimizer, pao)
    assert (
        estimate(spec, plan, TrainingOptions(**base, **off)).to_dict()
        == estimate(spec, plan, TrainingOptions(**base)).to_dict()
    )
    moved = {"exp_avg_dtype": "bf16", "exp_avg_sq_dtype": "bf16", "store_param_remainders": False,
             "main_grads_dtype": "bf16", "use_distributed_optimizer": False}  # fmt: skip
    for field, value in moved.items():
        try:
            o = TrainingOptions(
                **{**base, **off, field: value, **({"exp_avg_sq_dtype": value} if field == "exp_avg_dtype" else {})}
            )
        except MliteError:
            assert field in off or (pao and field == "use_distributed_optimizer"), field  # refused: not applicable
            continue
        same = estimate(spec, plan, o).to_dict() == estimate(spec, plan, TrainingOptions(**base, **off)).to_dict()
        assert same == (field in off), (field, optimizer, pao)
