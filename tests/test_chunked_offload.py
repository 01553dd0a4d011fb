"""Megatron-Core dev's chunked optimizer-state offload (#6244) and the masters Megatron Lite left on the GPU before
ISEEKYAN/Megatron-LM#232: bytes against the offloader's own plan, the rules through the CLI, the RL phases with and
without the fix, and launchers with the real keys read back.

Oracles: :func:`_plan` re-implements the offloader's chunk plan and staging slots from the source
(``ChunkedOptimizerStateOffloader._build_chunks`` / ``_state_staging_views``, NVIDIA/Megatron-LM
``megatron/core/optimizer/cpu_offloading/chunked_optimizer_state_offload.py`` @ d48bd6be); the estimate without the
offload (its byte table is tested in tests/test_memory.py) gives the state the fraction moves; verl's packaged Hydra
config takes the launcher's keys (``DRY_RUN`` + compose).
"""

from __future__ import annotations

import random
import shlex
import subprocess

import pytest
from conftest import REPO, assert_one_line_error, run_cli

from mlite.export import ExportPlan, import_launcher, render
from mlite.export.validate import validate_command
from mlite.memory import GIB, TrainingOptions, estimate
from mlite.memory.chunked import MIB, largest_shard, state_window
from mlite.memory.params import stage_params
from mlite.memory.rl import rl_estimate
from mlite.memory.rl_options import RolloutOptions
from mlite.mesh import ParallelConfig, resolve
from mlite.models import from_hf_config

LAUNCHERS = REPO / "tests/data/launchers"
CHUNKED = {"chunked_optimizer_state_offload": True}


def _plan(sizes: list[int], chunk: int) -> tuple[list[int], int]:
    """The source's chunks (moment bytes each) and the bytes of its two staging slots: a chunk closes before the
    parameter that would take it past ``chunk`` (a parameter is never split; 0: one chunk); chunk i is staged in
    slot i % 2, whose buffer grows to the largest chunk it held; both slots live until the update ends."""
    if not sizes:
        return [], 0
    if chunk == 0:
        chunks = [sum(sizes)]
    else:
        chunks, cur = [], 0
        for s in sizes:
            if cur and cur + s > chunk:
                chunks.append(cur)
                cur = 0
            cur += s
        chunks.append(cur)
    slots = [0, 0]
    for i, c in enumerate(chunks):
        slots[i % 2] = max(slots[i % 2], c)
    return chunks, sum(slots)


# ---------------------------------------------------------------------------------------------- the staging window
def test_state_window_equals_the_offloaders_plan_with_one_or_two_chunks_and_bounds_it_beyond():
    rng = random.Random(26)
    for _ in range(400):
        sizes = [256 * rng.randint(1, 4000) for _ in range(rng.randint(1, 40))]
        chunk = rng.choice([0, 256 * rng.randint(1, 20_000)])
        chunks, slots = _plan(sizes, chunk)
        w = state_window(sum(sizes), chunk, max(sizes))
        if len(chunks) <= 2:
            assert w == slots, (sizes, chunk)
        else:
            assert slots <= w <= sum(sizes), (sizes, chunk)
    # equal parameters filling whole chunks: the bound is the plan (two full slots, "about 2 * chunk", README)
    chunks, slots = _plan([1 << 20] * 10, 3 << 20)
    assert chunks == [3 << 20, 3 << 20, 3 << 20, 1 << 20] and state_window(10 << 20, 3 << 20, 1 << 20) == slots
    # one parameter larger than the target is a chunk of its own, so the slots hold two of it
    assert _plan([5 << 20] * 4, 1 << 20)[1] == state_window(20 << 20, 1 << 20, 5 << 20) == 10 << 20


# ---------------------------------------------------------------------------------------------- the estimator
MODEL = "Qwen3-8B"


@pytest.fixture(scope="module")
def dense():
    spec = from_hf_config(MODEL)
    return spec, resolve(spec, 8, ParallelConfig())


def _worst(spec, plan, **kw):
    return estimate(spec, plan, TrainingOptions(**kw)).worst


@pytest.mark.parametrize("pao", [False, True])
@pytest.mark.parametrize("fraction", [0.25, 1.0])
def test_the_fraction_moves_the_state_to_the_host(dense, pao, fraction):
    spec, plan = dense
    base = {"use_precision_aware_optimizer": pao}
    off = _worst(spec, plan, **base)
    on = _worst(spec, plan, **base, **CHUNKED, optimizer_state_offload_fraction=fraction)
    for part in ("master", "exp_avg", "exp_avg_sq"):
        assert on.__dict__[part] == pytest.approx((1 - fraction) * off.__dict__[part], abs=1)
    assert on.host["chunked_offloaded_state"] == pytest.approx(fraction * off.optimizer, abs=1)
    assert on.params == off.params and on.grads == off.grads
    # between steps (rollout, idle) the GPU holds only the unselected share
    assert on.idle_gpu == pytest.approx(off.idle_gpu - fraction * off.optimizer, abs=1)
    # a fraction of 0 is a full disable (Megatron-Core: no manager is installed)
    zero = _worst(spec, plan, **base, **CHUNKED, optimizer_state_offload_fraction=0.0)
    assert zero.chunked is None and zero.optimizer == off.optimizer and not zero.host


def test_the_update_restores_the_masters_in_one_window_and_the_moments_through_two_slots(dense):
    spec, plan = dense
    shard = stage_params(spec, plan)[0].total / plan.dp
    # Qwen3-8B's largest tensor is a vocabulary-parallel embedding (untied: lm_head too), its own bucket: 1/8 per rank
    emb = plan.padded_vocab * spec.hidden_size / plan.dp
    w = _worst(spec, plan, **CHUNKED, optimizer_state_offload_chunk_size_mb=256)
    ck = w.chunked
    assert largest_shard(spec, plan, stage_params(spec, plan)[0], plan.dp, plan.edp) == emb
    assert ck.largest_state == emb * 8  # fp32 exp_avg + exp_avg_sq
    assert ck.master_window == pytest.approx(shard * 4)  # every selected fp32 master, whatever the chunk size
    assert ck.state_window == pytest.approx(2 * max(256 * MIB, emb * 8))
    chunk_params = max(256 * MIB, emb * 8) / 8
    # torch AdamW's sqrt(exp_avg_sq) (4 bytes) over one chunk at a time; nothing of the state stays resident
    assert w.transients["optimizer_step"] == pytest.approx(ck.master_window + ck.state_window + 4 * chunk_params)
    assert w.optimizer == 0
    # chunk size 0 restores every selected moment at once
    all_at_once = _worst(spec, plan, **CHUNKED).chunked
    assert all_at_once.state_window == pytest.approx(shard * 8)
    assert all_at_once.master_window == ck.master_window
    # the JSON shows the new rows under a new key; the old keys keep their meaning
    doc = estimate(spec, plan, TrainingOptions(**CHUNKED, optimizer_state_offload_chunk_size_mb=256)).to_dict()
    assert doc["chunked_state_offload"]["state_window"] == round(ck.state_window)
    assert doc["chunked_state_offload"]["chunk_bytes"] == 256 * MIB
    assert doc["optimizer_detail"] == {"master": 0, "exp_avg": 0, "exp_avg_sq": 0}
    assert {f["name"] for f in doc["formulas"]} >= {"chunked_master_window", "chunked_state_window", "chunked_host"}
    assert estimate(spec, plan, TrainingOptions()).to_dict()["chunked_state_offload"] is None


def test_a_build_without_offload_for_forward_keeps_the_masters_on_the_gpu(dense):
    spec, plan = dense
    kw = {**CHUNKED, "use_precision_aware_optimizer": True, "optimizer_state_offload_chunk_size_mb": 256}
    shard = stage_params(spec, plan)[0].total / plan.dp
    fixed = _worst(spec, plan, **kw, optimizer_offload=True)
    old = _worst(spec, plan, **kw, optimizer_offload=True, offload_master_for_forward=False)
    remainders = shard * 2  # PAO int16 remainders of the bf16 parameters
    assert old.chunked.resident_masters == pytest.approx(remainders)
    assert old.master == pytest.approx(remainders) and fixed.master == 0
    assert old.chunked.master_window == 0 and fixed.chunked.master_window == pytest.approx(remainders)
    # through rollout / idle the remainders stay although optimizer_offload is on (what #232 fixed)
    assert old.idle_gpu == pytest.approx(fixed.idle_gpu + remainders)
    assert old.host == fixed.host  # the pinned host copy exists either way


# ---------------------------------------------------------------------------------------------- the RL phases
def test_rl_phases_show_the_resident_masters_only_on_the_old_build():
    spec = from_hf_config("Qwen3-30B-A3B")
    plan = resolve(spec, 8, ParallelConfig(ep=8))
    kw = dict(CHUNKED, use_precision_aware_optimizer=True, param_offload=True, optimizer_offload=True)
    kw["gpu_memory_gib"] = 141.0
    r = RolloutOptions(tensor_model_parallel_size=4)
    fixed = rl_estimate(spec, plan, TrainingOptions(**kw), r)
    old = rl_estimate(spec, plan, TrainingOptions(**kw, offload_master_for_forward=False), r)
    sp = stage_params(spec, plan)[0]
    remainders = 2 * (sp.dense / plan.dp + sp.expert / plan.edp)
    for name in ("rollout", "old_log_prob", "ref", "weight_sync"):
        assert old.phases[name].gpu["actor_resident_masters"] == pytest.approx(remainders), name
        assert "actor_resident_masters" not in fixed.phases[name].gpu, name
        assert old.phases[name].gpu_total == pytest.approx(fixed.phases[name].gpu_total + remainders), name
    assert any("offload_master_for_forward=False" in w and "ISEEKYAN/Megatron-LM#232" in w for w in old.warnings)
    assert not any("offload_master_for_forward" in w for w in fixed.warnings)


def test_the_reported_deepseek_v4_figure_against_the_model():
    """ISEEKYAN/Megatron-LM#232: ~6.38 GiB per rank of INT16 remainders on DeepSeek-V4 RL (8 GPUs, EP8, TP1); the
    PR does not name the model size. The full DeepSeek-V4-Flash at that mesh keeps 2 bytes per optimizer-shard
    parameter: dense over DP 8, experts whole on each rank's EP slice (EDP 1) -- about ten times the figure, so the
    run was a cut of the model (not fitted here; the report says which cuts land near it)."""
    spec = from_hf_config("DeepSeek-V4-Flash")
    plan = resolve(spec, 8, ParallelConfig(ep=8))
    o = TrainingOptions(**CHUNKED, use_precision_aware_optimizer=True, offload_master_for_forward=False)
    w = estimate(spec, plan, o).worst
    scale = plan.padded_vocab / spec.vocab_size  # vocabulary-parallel tensors at the padded vocabulary
    dense = expert = 0.0
    for g in [*spec.pre, *spec.post, *(g for layer in spec.layers for g in layer.groups)]:
        if not g.checkpoint_only:
            n = g.numel * (scale if g.parallel == "vocab" else 1)
            dense, expert = (dense, expert + n) if g.parallel == "expert" else (dense + n, expert)
    assert w.chunked.resident_masters == pytest.approx(2 * (dense / 8 + expert / 8), rel=1e-9)
    assert w.chunked.resident_masters / GIB > 60  # vs 6.38 GiB reported for the (unstated) run


# ---------------------------------------------------------------------------------------------- the rules
RULES = [
    (["--optimizer", "fsdp2"], ["chunked_optimizer_state_offload: fsdp2 has no chunked", "d48bd6be"]),
    (["--offload-fraction", "0.5"], ["offload_fraction: 0.5", "mutually exclusive", "optimizer_config.py"]),
    (["--no-distributed-optimizer"], ["use_distributed_optimizer:", "requires use_distributed_optimizer"]),
    (["--optimizer-algorithm", "sgd"], ["chunked_optimizer_state_offload: sgd", "d48bd6be"]),
    (["--optimizer-state-offload-fraction", "1.5"], ["optimizer_state_offload_fraction: 1.5", "[0, 1]"]),
    (["--optimizer-state-offload-chunk-size-mb", "-1"], ["optimizer_state_offload_chunk_size_mb: -1", ">= 0"]),
]


@pytest.mark.parametrize("words, needles", RULES, ids=[w[0][0] for w in RULES])
def test_rules_refuse_through_the_cli_with_their_source(words, needles, tmp_path):
    args = ["--chunked-optimizer-state-offload", *words]
    assert_one_line_error(run_cli("memory", MODEL, "--ngpu", "8", *args), *needles)
    out = tmp_path / "e"
    res = run_cli("export", MODEL, "--nodes", "1", "--target", "verl-megatron-grpo", "--out", str(out), *args)
    if words[0] not in ("--optimizer", "--no-distributed-optimizer"):  # the Megatron target writes dist_opt
        assert_one_line_error(res, *needles)
        assert not out.exists()


def test_the_fraction_and_chunk_size_are_checked_even_with_the_offload_off():
    res = run_cli("memory", MODEL, "--ngpu", "8", "--optimizer-state-offload-chunk-size-mb", "-3")
    assert_one_line_error(res, "optimizer_state_offload_chunk_size_mb: -3")


# ---------------------------------------------------------------------------------------------- launchers
def test_import_launcher_reads_the_megatron_keys():
    imp = import_launcher(LAUNCHERS / "grpo_qwen3_30b_megatron_chunked_offload.sh")
    o = imp.training_options()
    assert imp.target == "verl-megatron-grpo"
    assert (o.chunked_optimizer_state_offload, o.optimizer_state_offload_chunk_size_mb) == (True, 256)
    assert o.optimizer_state_offload_fraction == 0.5 and o.offload_fraction == 0.0
    env = import_launcher(LAUNCHERS / "grpo_qwen3_30b_megatron_chunked_offload.sh", env={"CHUNK_MB": "0"})
    assert env.training_options().optimizer_state_offload_chunk_size_mb == 0  # 0 is a value here, not unset
    assert not any("chunk_size_mb" in w for w in env.warnings)


def test_import_launcher_maps_the_deprecated_alias_with_a_note():
    imp = import_launcher(LAUNCHERS / "grpo_qwen3_30b_megatron_deprecated_state_offload.sh")
    o = imp.training_options()
    assert imp.target == "verl-megatron-grpo" and o.optimizer == "dist_opt"
    assert o.chunked_optimizer_state_offload and o.optimizer_state_offload_chunk_size_mb == 0
    assert o.optimizer_state_offload_fraction == 1.0
    assert any("offload_optimizer_states=True is Megatron-Core's deprecated alias" in w for w in imp.warnings)


def _launcher(target: str, o: TrainingOptions):
    plan = ExportPlan(model=MODEL, target=target, parallel=ParallelConfig(tp=2), options=o, nodes=1)
    return render(plan)


@pytest.mark.parametrize("target", ["verl-mlite-sft", "verl-mlite-grpo"])
def test_the_mlite_targets_say_their_engine_does_not_pass_the_keys_on(target):
    res = _launcher(target, TrainingOptions(**CHUNKED, optimizer_state_offload_chunk_size_mb=64))
    text = res.files[res.launcher]
    assert "override_optimizer_config.chunked_optimizer_state_offload" not in text  # no key, a warning header only
    assert "override_optimizer_config.optimizer_state_offload_chunk_size_mb" not in text
    for field in ("chunked_optimizer_state_offload=True", "optimizer_state_offload_chunk_size_mb=64"):
        assert any(n.startswith(field + " is not exported") and "mlite_engine.py" in n for n in res.notes), res.notes


def test_export_writes_the_keys_verl_composes_and_import_reads_back(tmp_path):
    target = "verl-megatron-grpo"
    o = TrainingOptions(
        **CHUNKED,
        optimizer_state_offload_chunk_size_mb=128,
        optimizer_state_offload_fraction=0.75,
        use_precision_aware_optimizer=True,
    )
    res = _launcher(target, o)
    text = res.files[res.launcher]
    for key in ("chunked_optimizer_state_offload=True", "optimizer_state_offload_chunk_size_mb=128",
                "optimizer_state_offload_fraction=0.75"):  # fmt: skip
        assert f"optim.override_optimizer_config.{key}" in text, key
    back = import_launcher("launcher", text=text).training_options()
    assert (back.chunked_optimizer_state_offload, back.optimizer_state_offload_chunk_size_mb) == (True, 128)
    assert back.optimizer_state_offload_fraction == 0.75
    script = tmp_path / res.launcher
    script.write_text(text)
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


def test_the_megatron_target_says_verl_reloads_the_whole_state_with_optimizer_offload():
    o = TrainingOptions(**CHUNKED, optimizer_offload=True)
    notes = _launcher("verl-megatron-grpo", o).notes
    assert any("load_megatron_optimizer" in n and "whole" in n for n in notes), notes
    assert not any("load_megatron_optimizer" in n for n in _launcher("verl-megatron-grpo", TrainingOptions()).notes)


# ---------------------------------------------------------------------------------------------- the memory view
def test_the_memory_view_controls_reach_the_estimate_and_show_the_rows():
    from widgets.memory_view import MemoryView
    from widgets.planner import MeshPlanner

    planner = MeshPlanner("Qwen3-30B-A3B", ngpu=8, ep=8)
    view = MemoryView(planner)
    c = view.controls
    assert c["optimizer_state_offload_chunk_size_mb"].disabled  # its knobs wait for the switch
    view.set(chunked_optimizer_state_offload=True, optimizer_state_offload_chunk_size_mb=256,
             optimizer_state_offload_fraction=0.5, use_precision_aware_optimizer=True)  # fmt: skip
    o = view.options()
    assert (o.chunked_optimizer_state_offload, o.optimizer_state_offload_chunk_size_mb) == (True, 256)
    spec = from_hf_config("Qwen3-30B-A3B")
    want = estimate(spec, resolve(spec, 8, ParallelConfig(ep=8), seq_len=o.seq_len), o).to_dict()
    assert view.estimate.to_dict()["chunked_state_offload"] == want["chunked_state_offload"]
    assert "chunked_state_window" in view._why.value and "chunked_offloaded_state" in view._details.value
    assert "--chunked-optimizer-state-offload" in view.command()
    view.set(optimizer="fsdp2")  # no chunked offload there: the switch is off and disabled
    assert c["chunked_optimizer_state_offload"].disabled and not view.options().chunked_optimizer_state_offload


def test_a_plan_with_chunked_offload_runs_without_it_in_the_lite_runtime_and_says_so(tmp_path):
    from mlite.export import write
    from mlite.launch.from_plan import config_from_plan

    o = TrainingOptions(**CHUNKED, optimizer_state_offload_chunk_size_mb=64)
    write(ExportPlan(model="Qwen3-30B-A3B", target="verl-megatron-grpo", options=o), tmp_path / "p")
    cfg, said = config_from_plan(tmp_path / "p" / "plan.json", nproc=1, steps=2, device="cpu",
                                 tokens_per_microbatch=64)  # fmt: skip
    assert any(s.startswith("chunked_optimizer_state_offload dropped") for s in said), said
    assert not cfg.training.chunked_optimizer_state_offload  # a run has no such option


def test_import_launcher_names_the_exclusive_rule_of_a_launcher_asking_for_both_offloads():
    text = (
        (LAUNCHERS / "grpo_qwen3_30b_megatron_chunked_offload.sh")
        .read_text()
        .replace(
            "    actor_rollout_ref.rollout.name=vllm",
            "    +actor_rollout_ref.actor.optim.override_optimizer_config.optimizer_cpu_offload=True \\\n"
            "    +actor_rollout_ref.actor.optim.override_optimizer_config.optimizer_offload_fraction=0.5 \\\n"
            "    actor_rollout_ref.rollout.name=vllm",
        )
    )
    imp = import_launcher("both.sh", text=text)
    assert any("inconsistent" in w and "mutually exclusive" in w and "d48bd6be" in w for w in imp.warnings)
