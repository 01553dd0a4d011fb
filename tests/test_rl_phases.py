"""The RL phase registry (``mlite.memory.rl_phases``), the rollout option rows (``mlite.options.rollout``) and the
packages split out of ``memory/`` and ``export/``: a phase registered in a test shows in ``mlite rl-memory`` (text and
``--json``), the RL view and the verdicts, touching only its entry; the rollout flags, verl keys and the view's
controls come from the rows."""

from __future__ import annotations

import contextlib
import dataclasses
import json

import pytest
from test_imports import _modules, import_graph

from mlite.cli import main
from mlite.cli.rl_memory import estimate_command
from mlite.errors import MliteError
from mlite.memory import GIB
from mlite.memory.rl_keys import ALIASES, ROLLOUT_KEYS, rollout_kwargs
from mlite.memory.rl_options import RolloutOptions
from mlite.memory.rl_phases import PHASE_REGISTRY, PHASES, PhaseEntry, register_phase, unregister_phase
from mlite.options.rollout import MEM_FRACTION_STATIC, ROLLOUT

ARGS = ["Qwen3-8B", "--ngpu", "8", "--tp", "2", "--gpu-mem", "H100", "--rollout", "vllm", "--rollout-tp", "2"]
ARGS += ["--prompt-len", "512", "--response-len", "1024", "--rollout-n", "8", "--rollout-batch", "128"]
ARGS += ["--gpu-memory-utilization", "0.3"]

TOY_GPU = 300 * GIB
"""The toy phase's reward model: more than an H100 holds, so the verdict turns."""
TOY_HOST = 5 * GIB


def _toy_gpu(step) -> dict:
    return {"reward_model": TOY_GPU, "actor_resident": step.actor.idle_gpu, "framework": step.framework}


TOY = PhaseEntry(
    name="toy_reward",
    gpu=_toy_gpu,
    host=lambda step: {"reward_cache": TOY_HOST},
    when=lambda step: True,
    help="a toy reward model scoring the rollouts",
)


@contextlib.contextmanager
def toy_phase(before: str | None = "weight_sync"):
    register_phase(TOY, before=before)
    try:
        yield TOY
    finally:
        unregister_phase(TOY.name)


def _cli(capsys, *extra) -> tuple[int, str]:
    rc = main(["rl-memory", *ARGS, *extra])
    return rc, capsys.readouterr().out


def _rl_view():
    from widgets.memory_view import MemoryView
    from widgets.planner import MeshPlanner
    from widgets.rl_view import RLView

    planner = MeshPlanner("Qwen3-8B", ngpu=8, tp=2)
    memory = MemoryView(planner, gpu="H100")
    return RLView(
        memory,
        tensor_model_parallel_size=2,
        prompt_length=512,
        response_length=1024,
        n=8,
        train_batch_size=128,
        gpu_memory_utilization=0.3,
    )


# ------------------------------------------------------------------------------------------------ phase registry
def test_a_registered_phase_shows_in_the_cli_the_json_and_the_verdict(capsys):
    rc0, out0 = _cli(capsys, "--json")
    before = json.loads(out0)
    assert rc0 == 0 and before["fits"] and list(before["phases"]) == list(PHASES)
    with toy_phase():
        rc, out = _cli(capsys, "--json")
        doc = json.loads(out)
        assert list(doc["phases"]) == ["rollout", "old_log_prob", "ref", "actor_update", "toy_reward", "weight_sync"]
        toy = doc["phases"]["toy_reward"]
        assert toy["parts"]["reward_model"] == round(TOY_GPU)
        assert toy["gpu"] == sum(toy["parts"].values())
        # its host: the base every phase has (the process) plus its own
        assert toy["host_per_gpu"] - doc["phases"]["weight_sync"]["host_per_gpu"] == round(TOY_HOST)
        assert rc == 1 and doc["fits"] is False and doc["peak_phase"] == "toy_reward"
        assert any(w.startswith("toy_reward does not fit") for w in doc["warnings"])
        # the other phases are untouched
        assert {n: p for n, p in doc["phases"].items() if n != "toy_reward"} == before["phases"]
        rc, text = _cli(capsys)
        row = next(ln for ln in text.splitlines() if ln.strip().startswith("toy_reward"))
        assert "DOES NOT FIT" in row and "<- peak" in row and rc == 1
        assert "warning: toy_reward does not fit" not in text  # the table already says which phase
    rc, out = _cli(capsys, "--json")
    assert (rc, json.loads(out)) == (rc0, before) and "toy_reward" not in PHASE_REGISTRY


def test_a_registered_phase_shows_in_the_rl_view():
    rl = _rl_view()
    assert rl.estimate.fits and 'data-phase="toy_reward"' not in rl.chart.value
    with toy_phase(before=None):
        rl.refresh()
        svg = rl.chart.value
        assert rl.estimate.phases["toy_reward"].gpu["reward_model"] == TOY_GPU
        assert 'class="mlite-rl-bar mlite-rl-oom" data-phase="toy_reward"' in svg
        assert f'data-bytes="{round(TOY_GPU)}"><title>toy_reward · reward_model' in svg
        assert TOY.help in svg  # the entry's line is the bar's tooltip
        assert 'g class="mlite-rl-host-bar" data-phase="toy_reward"' in svg
        assert "does NOT fit" in rl.cards.value and ">toy_reward<" in rl.cards.value
        # the view's command line gives the same document through the CLI's path
        assert estimate_command(rl.command()).to_dict() == rl.estimate.to_dict()
    rl.refresh()
    assert rl.estimate.fits and "toy_reward" not in rl.estimate.phases


def test_phase_registry_refuses_a_taken_name_and_an_unknown_one():
    before = tuple(PHASE_REGISTRY)  # the built-in phases and the critic's (mlite.memory.rl_phases.CRITIC_PHASES)
    with pytest.raises(MliteError, match="'rollout' is registered already"):
        register_phase(dataclasses.replace(TOY, name="rollout"))
    with pytest.raises(MliteError, match="no RL phase 'nope' to register"):
        register_phase(TOY, before="nope")
    with pytest.raises(MliteError, match="no RL phase 'nope'"):
        unregister_phase("nope")
    assert tuple(PHASE_REGISTRY) == before and set(PHASES) <= set(before)


def test_a_phase_can_be_absent_from_a_step(capsys):
    """``when``: the reference's phase exists only with a reference (``--ref none`` drops it)."""
    rc, out = _cli(capsys, "--ref", "none", "--json")
    assert rc == 0 and "ref" not in json.loads(out)["phases"] and "ref" in PHASE_REGISTRY


# ------------------------------------------------------------------------------------------------ rollout rows
def test_rollout_rows_are_the_fields_of_rollout_options():
    fields = dataclasses.fields(RolloutOptions)
    assert [r.field for r in ROLLOUT] == [f.name for f in fields]
    defaults = RolloutOptions()
    for r in ROLLOUT:
        assert r.default == getattr(defaults, r.field), r.field
        assert r.mlite == r.megatron, r.field  # the rollout keys do not depend on the actor's backend


def test_rollout_keys_and_aliases_come_from_the_rows():
    keyed = {r.field: r.mlite.key for r in ROLLOUT if hasattr(r.mlite, "key")}
    assert dict(ROLLOUT_KEYS) == keyed
    bucket = next(r for r in ROLLOUT if r.field == "update_weights_bucket_megabytes")
    assert bucket.mlite.aliases and set(ALIASES) == set(bucket.mlite.aliases)
    assert rollout_kwargs({bucket.mlite.aliases[0]: "1024"})["update_weights_bucket_megabytes"] == 1024
    # the reference's two mappings read the keys their rows name
    ref, offload = (next(r for r in ROLLOUT if r.field == f) for f in ("ref", "ref_param_offload"))
    assert rollout_kwargs({ref.mlite.keys[1]: "True"})["ref"] == "colocated"
    assert rollout_kwargs({offload.mlite.keys[1]: True})["ref_param_offload"] is True


def test_rollout_flags_come_from_the_rows(capsys):
    with pytest.raises(SystemExit):
        main(["rl-memory", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    for r in ROLLOUT:
        if r.flag:
            assert r.flag in help_text and " ".join(r.help.split()) in help_text, r.flag
    assert MEM_FRACTION_STATIC.flag in help_text
    # two spellings of one field are refused together (argparse: exit 2)
    with pytest.raises(SystemExit) as e:
        main(["rl-memory", *ARGS, "--mem-fraction-static", "0.5"])
    assert e.value.code == 2


def test_rl_view_controls_and_command_come_from_the_rows():
    rl = _rl_view()
    labeled = [r for r in ROLLOUT if r.label]
    assert list(rl.controls) == [r.field for r in labeled]
    for r in labeled:
        assert rl.controls[r.field].description == r.label, r.field
        if r.choices and r.type is str:
            assert tuple(rl.controls[r.field].options) == r.choices
    rl.set(name="sglang", sleep_level=1, ref="none", max_model_len=2048, host_mem_gib=256.0)
    r = rl.rollout_options()
    assert (r.name, r.sleep_level, r.ref, r.max_model_len, r.host_mem_gib) == ("sglang", 1, "none", 2048, 256.0)
    words = rl.command().split()
    assert MEM_FRACTION_STATIC.flag in words and "--gpu-memory-utilization" not in words
    assert words[words.index("--sleep-level") + 1] == "1" and words[words.index("--ref") + 1] == "none"
    assert "--seq-len" not in words  # rl-memory's default, P + R, is what the view estimates
    assert estimate_command(rl.command()).to_dict() == rl.estimate.to_dict()


# ------------------------------------------------------------------------------------------------ packages
def test_memory_imports_no_runtime_and_nothing_imports_validation():
    """memory/ reads the kernels' chunk sizes from models/chunks.py; validation/ is imported by tests and benchmarks only; the shell reader is its
    own package; the rollout rows import nothing above options/."""
    graph = import_graph(_modules(), lazy=True)
    for mod, targets in graph.items():
        if mod.startswith("mlite.memory"):
            assert not [t for t in targets if t.startswith("mlite.runtime")], f"{mod} imports runtime/"
        if not mod.startswith("mlite.validation"):
            assert not [t for t in targets if t.startswith("mlite.validation")], f"{mod} imports validation/"
    assert (
        "mlite.models.chunks" in graph["mlite.memory.estimate"] and "mlite.models.chunks" in graph["mlite.runtime.gdn"]
    )
    assert {"mlite.shell.lex", "mlite.shell.expand", "mlite.shell.script"} <= set(graph)
    assert "mlite.shell.script" in graph["mlite.export.importer"]
    assert not {"mlite.export.shell", "mlite.export.expand", "mlite.export.script"} & set(graph)
    assert not [t for t in graph["mlite.options.rollout"] if not t.startswith("mlite.options")]
