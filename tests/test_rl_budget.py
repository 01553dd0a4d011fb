"""The colocated budget to the last GiB (``mlite rl-memory``): vLLM's KV-budget rule by version, sibling workers'
CUDA contexts on the engine's first GPU, the sleep residue, the weight resync's export peak from the largest gathered
tensor and its staging buckets, host RAM of the delta weight sync and of ``separate_async``; each rule's source in
its test's docstring."""

from __future__ import annotations

from dataclasses import replace

import pytest
from conftest import assert_one_line_error, run_cli

from mlite.memory import GIB, TrainingOptions
from mlite.memory.rl import rl_estimate
from mlite.memory.rl_keys import rollout_kwargs, rollout_overrides
from mlite.memory.rl_options import RolloutOptions
from mlite.memory.rl_phases import largest_tensor
from mlite.memory.rl_resync import export_peak
from mlite.memory.rl_vllm import VLLM_KV_RULES, kv_rule
from mlite.mesh import ParallelConfig, resolve
from mlite.models import from_hf_config
from mlite.options.rollout import ROLLOUT
from mlite.options.schema import Key, NotExpressible
from mlite.units import MIB

Q8 = from_hf_config("Qwen3-8B")
Q30 = from_hf_config("Qwen3-30B-A3B")
ARGS = ["Qwen3-8B", "--ngpu", "8", "--tp", "2", "--gpu-mem", "H200", "--rollout", "vllm", "--rollout-tp", "2"]
ARGS += ["--prompt-len", "512", "--response-len", "1024", "--rollout-n", "8", "--rollout-batch", "128"]
ARGS += ["--gpu-memory-utilization", "0.5"]
SIBLING_GIB = 2.51
"""One sibling vLLM worker's context on GPU0 (ISEEKYAN/Megatron-LM docs/research/ds4_vllm_tp16_rollout_memory.md
@ 017aa887, via ../shared/reference/megatron_lite_2026-09.md section 1.6)."""
ASLEEP_MIB = 2001
"""Device use of a sleeping vLLM, flat over 20 cycles (ISEEKYAN/Megatron-LM examples/verl/cumem_cycle_probe/
results CSV @ 6159f6b5: 80 GB H100, gmu 0.7)."""


def _rl(spec=Q8, ngpu=8, mesh=None, train=None, **ro):
    o = train or TrainingOptions(seq_len=1536, gpu_memory_gib=141.0)
    plan = resolve(spec, ngpu, ParallelConfig(**(mesh or {"tp": 2})), seq_len=o.seq_len)
    base = {"prompt_length": 512, "response_length": 1024, "n": 8, "train_batch_size": 256, "max_model_len": 1536}
    return rl_estimate(spec, plan, o, RolloutOptions(**{**base, **ro}))


def _parts(e, ph):
    return e.phases[ph].gpu


# ------------------------------------------------------------------------------------------------ vLLM KV rule
@pytest.mark.parametrize(
    "version, rule",
    [
        ("0.6.3", "v0_per_instance"),
        ("0.6.4", "global"),
        ("0.6.4.post1", "global"),
        ("0.6.5", "v0_per_instance"),
        ("0.7.3", "v0_per_instance"),
        ("0.8.0", "global"),
        ("v0.8.5.post1", "global"),
        ("0.9.0", "global"),
        ("0.9.1", "v1_per_instance"),
        ("0.10.1rc1", "v1_per_instance"),
        ("latest", "v1_per_instance"),
        ("global", "global"),
    ],
)
def test_vllm_version_picks_its_kv_rule(version, rule):
    """vLLM ``vllm/worker/worker.py`` (V0; vllm#2863 per instance, vllm#9352 global in 0.6.4 only, vllm#10511 per
    instance again from 0.6.5), ``vllm/v1/worker/gpu_worker.py`` @ 0012cf69 (V1 0.8.0-0.9.0: global, vllm#10528,
    reported against v0.8.5.post1 in vllm#17979) and @ 35d5cda1 (>= 0.9.1: per instance + start-up check,
    vllm#18974; the check's error reported against v0.9.1 in vllm#20305)."""
    assert kv_rule(version).name == rule
    assert VLLM_KV_RULES[rule].source.startswith("vllm-project/vllm ")


def _vllm_oracle(rule, total, util, resident, weights, acts, non_torch):
    """The KV bytes each vLLM rule computes, step by step as its code measures the device, with ``resident`` bytes
    of other processes already on it when the engine starts.

    - ``global`` (gpu_worker.py @ 0012cf69): ``peak = allocated_bytes.all.peak`` (weights + profile activations),
      then ``non_torch = (total - free) - allocated_bytes.all.current`` (everything on the device but this
      process's torch tensors: the other processes and this engine's non-torch memory), KV = total x util - peak.
    - ``v1_per_instance`` (@ 35d5cda1): ``requested_memory - non_kv_cache_memory`` with the snapshot taken at
      ``init_device``: weights + torch peak increase + non-torch increase since the snapshot.
    - ``v0_per_instance`` (worker.py @ 002a0ba9): ``peak = init_gpu_memory - free after profile``.
    """
    free_at_init = total - resident
    if rule == "global":
        peak = weights + acts
        used_after = resident + weights + non_torch  # activations freed by empty_cache
        return total * util - (peak + (used_after - weights))
    if rule == "v1_per_instance":
        return total * util - (weights + acts + non_torch)
    free_after_profile = free_at_init - (weights + acts + non_torch)
    return total * util - (free_at_init - free_after_profile)


@pytest.mark.parametrize("rule", list(VLLM_KV_RULES))
def test_engine_kv_follows_each_rules_arithmetic(rule):
    """The engine's KV bytes equal the oracle's steps of each vLLM rule (docstring of :func:`_vllm_oracle`)."""
    e = _rl(vllm_version=rule, gpu_memory_utilization=0.4)
    eng = e.engine
    resident = 141.0 * GIB - eng.free_at_start
    want = _vllm_oracle(rule, 141.0 * GIB, 0.4, resident, eng.weights, eng.activations, eng.overhead)
    assert eng.kv == pytest.approx(want)


def test_the_global_rule_charges_the_actors_resident_state_to_the_kv_cache():
    """vLLM 0.8.x (gpu_worker.py @ 0012cf69): what other processes hold comes off the KV budget byte for byte;
    today's rule (@ 35d5cda1) does not charge it (only the start-up check sees it)."""
    kw = {"gpu_memory_utilization": 0.5}
    on = TrainingOptions(seq_len=1536, gpu_memory_gib=141.0, param_offload=True, optimizer_offload=True)
    off = TrainingOptions(seq_len=1536, gpu_memory_gib=141.0)
    g_on, g_off = _rl(train=on, vllm_version="0.8.5", **kw), _rl(train=off, vllm_version="0.8.5", **kw)
    moved = g_on.engine.free_at_start - g_off.engine.free_at_start
    assert moved > 10 * GIB
    assert g_on.engine.kv - g_off.engine.kv == pytest.approx(moved)
    n_on, n_off = _rl(train=on, **kw), _rl(train=off, **kw)
    assert n_on.engine.kv == pytest.approx(n_off.engine.kv)
    assert n_on.to_dict()["vllm_kv_rule"] == "v1_per_instance" and g_on.to_dict()["vllm_kv_rule"] == "global"


def test_only_todays_vllm_refuses_to_start_and_v0_runs_out_of_memory_instead():
    """A share larger than what is free: >= 0.9.1 raises at ``init_device`` ("Free memory on device ... less than
    desired GPU memory utilization", @ 35d5cda1); V0 has no check and its KV allocation runs out of memory
    (worker.py @ 002a0ba9); 0.8.x's global budget shrinks instead and the engine starts (@ 0012cf69)."""
    kw = {"gpu_memory_utilization": 0.9}
    new, v0, old = (_rl(vllm_version=v, **kw) for v in ("latest", "0.7.3", "0.8.5"))
    assert any("would not start" in x and "are free" in x for x in new.errors)
    assert any("does not check the free memory" in x and "vllm/worker/worker.py" in x for x in v0.errors)
    assert not old.errors and old.engine.kv < new.engine.kv
    assert new.engine.kv == pytest.approx(v0.engine.kv)  # the same per-instance budget


# ------------------------------------------------------------------------------------------------ sibling contexts
def test_sibling_contexts_sit_on_the_first_gpu_in_every_phase_and_before_the_engine_starts():
    """The DS4 GPU0 budget: 7 sibling vLLM workers' CUDA contexts at 2.51 GiB each (ds4_vllm_tp16_rollout_memory.md
    @ 017aa887). A process that makes a CUDA runtime call before selecting its device creates its context on device
    0 (vllm-project/vllm#37449: a new thread has no current device; sgl-project/sglang#3942: every TP process's
    context on GPU0); a context lives as long as its process, so every phase holds it."""
    base, sib = _rl(gpu_memory_utilization=0.4), _rl(gpu_memory_utilization=0.4, sibling_contexts=7)
    want = 7 * SIBLING_GIB * GIB
    for ph in base.phases:
        assert _parts(sib, ph)["sibling_contexts"] == pytest.approx(want)
        assert sib.phases[ph].gpu_total - base.phases[ph].gpu_total == pytest.approx(want)
    assert base.engine.free_at_start - sib.engine.free_at_start == pytest.approx(want)
    assert sib.engine.kv == pytest.approx(base.engine.kv)  # today's rule: not charged to the KV cache
    g = _rl(gpu_memory_utilization=0.4, sibling_contexts=7, vllm_version="0.9.0")
    assert _rl(gpu_memory_utilization=0.4, vllm_version="0.9.0").engine.kv - g.engine.kv == pytest.approx(want)


def test_sibling_contexts_can_stop_todays_vllm_from_starting():
    """What is free at ``init_device`` (@ 35d5cda1) is less by the siblings' contexts: a share that fitted no
    longer does."""
    u = 0.4
    fits = _rl(gpu_memory_utilization=u)
    room = fits.engine.free_at_start - u * 141.0 * GIB
    n = int(room // (SIBLING_GIB * GIB)) + 1
    assert not fits.errors
    assert any("would not start" in x for x in _rl(gpu_memory_utilization=u, sibling_contexts=n).errors)


# ------------------------------------------------------------------------------------------------ sleep residue
def test_default_sleep_residue_is_within_the_measured_flat_2001_mib():
    """The kit's parts outside vLLM's sleep pools (engine overhead + CUDA graphs: 1 + 1 GiB) against the cumem
    probe's measured 2,001 MiB per GPU asleep (cumem_cycle_probe CSV @ 6159f6b5): within 2.4 %."""
    e = _rl(gpu_memory_utilization=0.4)
    kept = {k: v for k, v in _parts(e, "actor_update").items() if k in ("engine_overhead", "cuda_graphs")}
    assert sum(kept.values()) == pytest.approx(ASLEEP_MIB * MIB, rel=0.024)


def test_sleep_residue_replaces_the_parts_in_the_sleeping_phases():
    """``--sleep-residue``: a flat figure for what the sleeping engine keeps (the measured 2,001 MiB), in every
    phase the engine sleeps through; the awake rollout keeps its parts."""
    gib = ASLEEP_MIB / 1024
    base, flat = _rl(gpu_memory_utilization=0.4), _rl(gpu_memory_utilization=0.4, sleep_residue_gib=gib)
    for ph in ("old_log_prob", "ref", "actor_update", "weight_sync"):
        p = _parts(flat, ph)
        assert p["engine_sleep_residue"] == pytest.approx(ASLEEP_MIB * MIB)
        assert "engine_overhead" not in p and "cuda_graphs" not in p
        assert flat.phases[ph].gpu_total - base.phases[ph].gpu_total == pytest.approx(ASLEEP_MIB * MIB - 2 * GIB)
    assert _parts(flat, "rollout") == _parts(base, "rollout")


# ------------------------------------------------------------------------------------------------ resync peak
def _groups(spec):
    return [*spec.pre, *spec.post, *(g for layer in spec.main_layers for g in layer.groups)]


def test_resync_gathers_the_largest_tensor_the_mesh_splits():
    """verl's Megatron export (``per_tensor_generator`` / ``default_tp_concat_fn``, verl/utils/megatron_utils.py
    @ 1811bfeb): a TP parameter is all-gathered into a list and ``torch.cat``-ed (two full copies), one the rank
    holds whole is yielded as is. The oracle: the largest ParamGroup of the model whose kind the mesh splits."""
    o = TrainingOptions(seq_len=1536, gpu_memory_gib=141.0)
    r = RolloutOptions()
    tp2 = export_peak(Q8, resolve(Q8, 8, ParallelConfig(tp=2), seq_len=1536), o, r)
    want = max(g.numel for g in _groups(Q8) if g.parallel in ("tp", "vocab")) * 2
    assert (tp2.gather, tp2.gathered, tp2.copies) == ("tp", want, 2)
    assert tp2.peak == pytest.approx(2 * want + 2048 * MIB)
    tp1 = export_peak(Q8, resolve(Q8, 8, ParallelConfig(tp=1), seq_len=1536), o, r)
    assert tp1.gather == "none" and tp1.gathered == 0 and tp1.peak == 2048 * MIB


def test_expert_parallel_resync_gathers_all_experts_of_a_layers_weight():
    """Megatron Lite's dense EP all-gather (ds4_vllm_tp16_rollout_memory.md @ 017aa887; ``worst_tensor_peak_gib``
    of docs/ds4-resync-memory-protocol.md @ 03d1e972): one layer's expert weight for ALL experts; verl's per-expert
    export gathers one local expert over EP (EP experts, per_tensor_generator @ 1811bfeb)."""
    o = TrainingOptions(seq_len=1536, gpu_memory_gib=141.0)
    plan = resolve(Q30, 8, ParallelConfig(ep=8), seq_len=1536)
    dense = export_peak(Q30, plan, o, RolloutOptions())
    gate_up = max(g.numel for g in _groups(Q30) if g.parallel == "expert")
    assert (dense.tensor, dense.gather, dense.gathered) == ("mlp.experts.gate_up_proj", "ep", gate_up * 2)
    c = Q30.config
    assert dense.gathered == c["num_experts"] * 2 * c["moe_intermediate_size"] * c["hidden_size"] * 2
    per = export_peak(Q30, plan, o, RolloutOptions(resync_expert_gather="per_expert"))
    assert per.gathered < dense.gathered
    assert per.gathered == dense.gathered / c["num_experts"] * 8  # EP ranks' copies of one local expert


def test_deepseek_v4_flash_dense_expert_gather_from_its_own_tensors():
    """DeepSeek-V4-Flash (the DS4 of ds4_vllm_tp16_rollout_memory.md; rl-memory cannot run it yet: its compressed /
    sliding attention has no KV layout, so the export peak is checked alone): one layer's gate_up for all 256
    experts is 256 x 2 x 2048 x 4096 bf16 = 8 GiB, its down 4 GiB. The doc's 24-36.4 GiB/rank band on 128 GPUs is
    3 to 4.55 such tensors: more copies than verl's list + cat (2), which the doc does not break down;
    ``--resync-gather-copies 3`` gives its low end."""
    ds4 = from_hf_config("DeepSeek-V4-Flash")
    o = TrainingOptions(seq_len=4096, gpu_memory_gib=80.0)
    plan = resolve(ds4, 128, ParallelConfig(ep=8), seq_len=4096)
    p = export_peak(ds4, plan, o, RolloutOptions(resync_gather_copies=3))
    assert (p.tensor, p.gather, p.gathered) == ("mlp.experts.gate_up_proj", "ep", 8 * GIB)
    assert p.gathered + p.extra_copies == 24 * GIB
    down = max(g.numel for g in _groups(ds4) if g.name == "mlp.experts.down_proj") * 2
    assert down == 4 * GIB


def test_old_resync_figure_stays_selectable():
    """``--resync-gather largest --resync-gather-copies 1``: the model's largest tensor once, whatever the mesh,
    and one bucket no larger than the model (the kit before)."""
    e = _rl(gpu_memory_utilization=0.4, resync_gather="largest", resync_gather_copies=1)
    p = _parts(e, "weight_sync")
    assert p["gathered_tensor"] == largest_tensor(Q8, 2) and "gather_copies" not in p
    assert p["sync_bucket"] == min(2048 * MIB, Q8.total * 2)


def test_nccl_backend_stages_two_whole_buckets():
    """``NCCLCheckpointEngine`` (verl/checkpoint_engine/nccl_checkpoint_engine.py @ b13a546a): "two buffer to send
    and recv weights at same time, so the device memory overhead is 2 * bucket_size", allocated whole
    (``cp.zeros(self.bucket_size)``); naive: one bucket."""
    naive = _rl(gpu_memory_utilization=0.4)
    nccl = _rl(gpu_memory_utilization=0.4, checkpoint_backend="nccl", update_weights_bucket_megabytes=1024)
    assert _parts(nccl, "weight_sync")["sync_bucket"] == 2 * 1024 * MIB
    assert _parts(naive, "weight_sync")["sync_bucket"] == 2048 * MIB
    assert nccl.to_dict()["resync"]["buckets"] == 2


def test_weight_sync_fails_the_fit_by_what_it_lacks():
    """A DS4-like budget on a model rl-memory can run (Qwen3-30B-A3B, EP8, vLLM TP8, 7 sibling contexts): the
    weight_sync phase does not fit on a device 128 MiB smaller than it needs, and the warning says by how much and
    names the export peak; 1 MiB more than it needs and it fits (the DS4 job failed by 128 MiB at the first
    resync)."""

    def run(gib):
        o = TrainingOptions(seq_len=1536, gpu_memory_gib=gib, headroom=0.0, param_offload=True)
        return _rl(spec=Q30, mesh={"ep": 8}, train=o, tensor_model_parallel_size=8, gpu_memory_utilization=0.5,
                   sibling_contexts=7)  # fmt: skip

    need = run(80.0).phases["weight_sync"].gpu_total
    short = run((need - 128 * MIB) / GIB)
    assert not short.phase_fits("weight_sync") and not short.fits
    msg = next(w for w in short.warnings if w.startswith("the weight resync runs out of memory"))
    assert "by 128 MiB" in msg and "mlp.experts.gate_up_proj gathered over ep" in msg
    assert _parts(short, "weight_sync")["sibling_contexts"] == pytest.approx(7 * SIBLING_GIB * GIB)
    ok = run((need + MIB) / GIB)
    assert ok.phase_fits("weight_sync")
    assert not any(w.startswith("the weight resync") for w in ok.warnings)


# ------------------------------------------------------------------------------------------------ host RAM
def test_delta_sharded_pins_each_ranks_shard_on_the_host():
    """verl docs/advance/delta_weight_sync.md @ fb5624af: ``delta_sharded`` "each actor rank pins a snapshot of only
    its FSDP shard" (bf16, 2 B per parameter of the shard), sender ~2 buckets; SGLang and an FSDP actor only."""
    o = TrainingOptions(seq_len=1536, gpu_memory_gib=141.0, optimizer="fsdp2", param_dtype="fp32")
    base = _rl(mesh={}, train=o, name="sglang", gpu_memory_utilization=0.5, checkpoint_backend="nccl")
    d = _rl(mesh={}, train=o, name="sglang", gpu_memory_utilization=0.5, checkpoint_backend="delta_sharded")
    act = d.phases["actor_update"]
    shard = base.phases["weight_sync"].gpu["actor_params"] / 4  # fp32 parameters of this rank
    for ph in d.phases.values():
        assert ph.host["delta_snapshot"] == pytest.approx(shard * 2)
    assert act.host_total - base.phases["actor_update"].host_total == pytest.approx(shard * 2)
    assert not d.errors and _parts(d, "weight_sync")["sync_bucket"] == 2 * 2048 * MIB


def test_delta_backends_refused_where_verl_refuses_them():
    """delta_weight_sync.md @ fb5624af: a delta backend with any engine but SGLang raises NotImplementedError;
    ``delta_sharded`` needs Shard(0) DTensor (FSDP) parameters. v1_async_trainer.md @ b89c3b34: separate_async
    needs a non-naive backend."""
    e = _rl(gpu_memory_utilization=0.4, checkpoint_backend="delta")
    assert not e.fits and any("needs an SGLang rollout" in x and "fb5624af" in x for x in e.errors)
    s = _rl(name="sglang", gpu_memory_utilization=0.5, checkpoint_backend="delta_sharded")
    assert any("needs an FSDP actor" in x for x in s.errors)
    a = _rl(gpu_memory_utilization=0.4, trainer_mode="separate_async")
    assert any("non-naive" in x and "b89c3b34" in x for x in a.errors)


def test_separate_async_keeps_pi_old_on_the_host_and_the_current_weights_during_old_log_prob():
    """v1_async_trainer.md @ b89c3b34: the first mini-batch copies pi_old to CPU; before each later one the current
    weights are copied to CPU, pi_old restored for the old-log-prob forward, the current weights restored and their
    CPU copy cleared: the actor's weights on the host all step, twice during old_log_prob."""
    base = _rl(gpu_memory_utilization=0.4, checkpoint_backend="nccl")
    a = _rl(gpu_memory_utilization=0.4, checkpoint_backend="nccl", trainer_mode="separate_async")
    w = _parts(base, "weight_sync")["actor_params"]
    for ph in a.phases:
        extra = a.phases[ph].host_total - base.phases[ph].host_total
        assert extra == pytest.approx(2 * w if ph == "old_log_prob" else w)
    assert a.host_per_node - base.host_per_node == pytest.approx(2 * w * 8)
    assert not a.errors


# ------------------------------------------------------------------------------------------------ rows, CLI
def test_budget_rows_name_their_verl_key_or_why_there_is_none():
    rows = {r.field: r for r in ROLLOUT}
    for f in ("vllm_version", "sibling_contexts", "sibling_context_gib", "sleep_residue_gib", "resync_gather"):
        m = rows[f].mlite
        assert isinstance(m, NotExpressible) and m.reason, f
    backend, mode = rows["checkpoint_backend"].mlite, rows["trainer_mode"].mlite
    assert isinstance(backend, Key) and backend.key == "actor_rollout_ref.rollout.checkpoint_engine.backend"
    assert isinstance(mode, Key) and mode.key == "trainer.v1.trainer_mode"
    cfg = {"actor_rollout_ref.rollout.checkpoint_engine.backend": "nccl", "trainer.v1.trainer_mode": "separate_async"}
    kw = rollout_kwargs(cfg)
    assert (kw["checkpoint_backend"], kw["trainer_mode"]) == ("nccl", "separate_async")
    r = RolloutOptions(checkpoint_backend="nccl", trainer_mode="separate_async", vllm_version="0.8.5")
    out = rollout_overrides(r, defaults=RolloutOptions())
    assert out == cfg  # the version has no key: not written


def test_cli_flags_reach_the_budget():
    res = run_cli("rl-memory", *ARGS, "--sibling-contexts", "7", "--vllm-version", "0.8.5", "--json")
    d = res.json()
    assert d["vllm_kv_rule"] == "global"
    assert d["phases"]["rollout"]["parts"]["sibling_contexts"] == round(7 * SIBLING_GIB * GIB)
    res = run_cli("rl-memory", *ARGS, "--resync-gather", "largest", "--resync-gather-copies", "1")
    assert res.rc == 0 and "resync export peak" in res.out


@pytest.mark.parametrize(
    "extra, needle",
    [
        (["--vllm-version", "banana"], "--vllm-version"),
        (["--sibling-contexts", "-1"], "--sibling-contexts"),
        (["--sibling-context-gib", "-2"], "sibling_context_gib"),
        (["--sleep-residue", "-1"], "sleep_residue_gib"),
        (["--resync-gather-copies", "0"], "--resync-gather-copies"),
        (["--resync-gather", "all"], "--resync-gather"),
        (["--checkpoint-backend", "rsync"], "--checkpoint-backend"),
        (["--trainer-mode", "fast"], "--trainer-mode"),
    ],
)
def test_cli_bad_budget_input_exits_2_with_one_line(extra, needle):
    assert_one_line_error(run_cli("rl-memory", *ARGS, *extra), needle)


def test_budget_defaults_keep_earlier_rules():
    """The defaults keep the engine as before: today's vLLM rule, no siblings, the kit's sleep parts, the naive
    backend; only the resync's gather moved (mesh rule, two copies)."""
    r = RolloutOptions()
    assert kv_rule(r.vllm_version).name == "v1_per_instance"
    assert (r.sibling_contexts, r.sleep_residue_gib, r.checkpoint_backend, r.trainer_mode) == (0, None, "naive", "sync")
    e = _rl(gpu_memory_utilization=0.4)
    old = _rl(gpu_memory_utilization=0.4, resync_gather="largest", resync_gather_copies=1)
    for ph in ("rollout", "old_log_prob", "ref", "actor_update"):
        assert e.phases[ph].gpu == old.phases[ph].gpu
    assert replace(r, vllm_version="0.9.1").vllm_version == "0.9.1"


def test_cuda_graphs_room_under_the_global_rule_is_what_the_share_leaves_of_the_device():
    """CUDA graphs are captured after the KV cache (``compile_or_warm_up_model``, gpu_worker.py): under the global
    rule (@ 0012cf69) the engine's share already excludes the others' memory, so ``total - util x total`` is left;
    per instance (V0, worker.py @ 002a0ba9) a share over what is free leaves nothing."""
    kw = {"gpu_memory_utilization": 0.9}
    glob, v0 = _rl(vllm_version="0.8.5", **kw), _rl(vllm_version="0.7.3", **kw)
    assert not any("CUDA graphs" in w for w in glob.warnings)
    assert any("CUDA graphs" in w and "only 0.0 GiB" in w for w in v0.warnings)
