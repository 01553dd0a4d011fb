"""What verl's logged memory metrics count and the kit's prediction of that number (``mlite.memory.rl_metrics``),
in ``mlite rl-memory`` (text and ``--json``), ``mlite import-launcher`` and the published-run comparison.

Each rule's source (verl-project/verl at the tags named; vLLM ``vllm/device_allocator/cumem.py`` @ ``9ac96588``) is
in the test's docstring."""

from __future__ import annotations

import json

import pytest
from conftest import REPO
from test_exit_codes import _bad_input, _mlite

from mlite.cli.rl_memory import estimate_command
from mlite.errors import MliteError
from mlite.export.importer import import_launcher
from mlite.memory import GIB
from mlite.memory.rl_metrics import (
    ALLOCATED,
    CPU_USED,
    CUMEM_POOL,
    ENGINE_TORCH,
    METRICS,
    OUTSIDE_TORCH,
    RESERVED,
    measured_as,
    placement_for,
    predicted_metrics,
    verl_release,
)
from mlite.memory.rl_options import RolloutOptions
from mlite.options.rollout import DEFAULT_VERL_VERSION, ROLLOUT

LINE = (
    "mlite rl-memory Qwen3-8B --ngpu 8 --tp 2 --gpu-mem H200 --rollout vllm --rollout-tp 2 --prompt-len 512 "
    "--response-len 1024 --rollout-n 8 --rollout-batch 128 --gpu-memory-utilization 0.3 --param-offload "
    "--optimizer-offload"
)
RUNS = REPO / "tests" / "data" / "rl"


def _torch_bytes(phase: dict, engine: tuple = ()) -> float:
    """Oracle from the ``--json`` parts: what PyTorch's allocator holds in one phase (engine parts named)."""
    return sum(
        v for k, v in phase["parts"].items() if k not in OUTSIDE_TORCH and (k not in ENGINE_TORCH or k in engine)
    )


# ------------------------------------------------------------------------------------------------ releases
def test_verl_releases_and_their_spellings():
    assert verl_release("v0.4.1").text == "0.4" and verl_release("0.3.0.post1").text == "0.3"
    assert verl_release("0.7.1").text == "0.7.1" and verl_release("main").text == "main"
    assert verl_release(DEFAULT_VERL_VERSION).text == "0.9"
    for bad, needle in (("0.7", "0.7.0 or 0.7.1"), ("0.10", "unknown"), ("0.2", "unknown"), ("latest", "not a verl")):
        with pytest.raises(MliteError, match=needle):
            verl_release(bad)


def test_unknown_verl_version_exits_2_in_one_line(capsys):
    words = LINE.split()[1:]
    _bad_input(_mlite(capsys, *words, "--verl-version", "0.10"), "--verl-version", "0.10")
    _bad_input(_mlite(capsys, *words, "--verl-version", "0.9", "--engine-placement", "in_process_cumem"), "separate")


def test_verl_version_and_placement_are_rollout_rows():
    rows = {r.field: r for r in ROLLOUT}
    assert rows["verl_version"].flag == "--verl-version" and rows["verl_version"].default == DEFAULT_VERL_VERSION
    assert rows["engine_placement"].flag == "--engine-placement" and rows["engine_placement"].default is None


# ------------------------------------------------------------------------------------------------ measured_as
def test_ranks_first_before_0_6_then_max_and_mean():
    """``DataProto.concat`` keeps ``data[0].meta_info`` (verl/protocol.py @ v0.5.0 8fdc4d3f) until eb06fda2 (#3699,
    first in v0.6.0) merges every worker's metrics; ``reduce_metrics`` (verl/utils/metric/utils.py) takes np.max of
    a key containing "max", the mean otherwise."""
    old = measured_as("0.5", "in_process_cumem")
    assert {m.ranks for m in old.values()} == {"first"}
    new = measured_as("0.6", "in_process_cumem")
    assert (new[ALLOCATED].ranks, new[RESERVED].ranks, new[CPU_USED].ranks) == ("max", "max", "mean")
    assert list(new) == list(METRICS)
    for m in new.values():
        assert m.source and "GiB" in m.covers()
    assert not new[ALLOCATED].reset and new[ALLOCATED].phases == "all"  # no reset_peak_memory_stats on the path
    assert new[CPU_USED].processes == "node"
    assert {m.key for m in new.values()} == set(METRICS)  # the legacy workers' keys, as named


def test_engine_workers_log_the_first_rank_under_actor_prefix():
    """From v0.8 the metrics come back as a TensorDict with an empty batch and ``concat_tensordict`` keeps the first
    (``concat_tensordict_with_none_bsz``, verl/utils/tensordict_utils.py @ v0.8.0 7aed6b23); ``_update_actor``
    renames them ``actor/...`` (``rename_dict``, verl/trainer/ppo/ray_trainer.py @ v0.8.0)."""
    for v in ("0.8", "0.9", "main"):
        m = measured_as(v, "separate")
        assert {x.ranks for x in m.values()} == {"first"}
        assert [x.key for x in m.values()] == [f"actor/{n}" for n in METRICS]
        assert "engine_workers.py" in m[ALLOCATED].source
    assert measured_as("0.7.1", "separate")[ALLOCATED].key == ALLOCATED  # the legacy workers, still the default


def test_the_engine_moves_out_of_the_actor_process_in_0_7_1():
    """vLLM's model runner is driven by the hybrid workers up to v0.7.0 (ExternalZeroMQDistributedExecutor,
    verl/workers/rollout/vllm_rollout/vllm_async_server.py @ f9c855f7) and runs under
    ``distributed_executor_backend="mp"`` from e9405d70 (#4280, first in v0.7.1 bec9ef74)."""
    hybrid = RolloutOptions(name="vllm", mode="hybrid")
    assert placement_for(hybrid, "0.7.0") == "in_process_cumem"
    assert placement_for(hybrid, "0.7.1") == "separate" and placement_for(hybrid, "main") == "separate"
    assert measured_as("0.7.0", "in_process_cumem")[ALLOCATED].processes == "actor+engine"
    assert measured_as("0.7.1", "separate")[ALLOCATED].processes == "actor"
    with pytest.raises(MliteError, match="e9405d70"):
        measured_as("0.8", "in_process_cumem")
    # verl's colocated mode gives vLLM no hybrid workers: its own processes at every release
    assert placement_for(RolloutOptions(name="vllm", mode="colocated"), "0.5") == "separate"


def test_sglang_is_never_in_the_actor_process():
    """SGLang's ``Engine`` runs each TP rank's scheduler in an ``mp.Process`` (sglang
    python/sglang/srt/entrypoints/engine.py ``_launch_subprocesses``)."""
    r = RolloutOptions(name="sglang")
    assert all(placement_for(r, v) == "separate" for v in ("0.3", "0.4", "0.6", "0.7.0", "0.9"))
    with pytest.raises(MliteError, match="SGLang"):
        measured_as("0.5", "in_process_cumem", "sglang")
    with pytest.raises(MliteError, match="SGLang"):
        measured_as("0.3", "in_process_freed", "sglang")


def test_sglang_memory_fraction_never_moves_the_actor_metric_in_verl_0_3():
    """verl 0.3 (sglang_rollout.py @ v0.3.0.post1) passes gpu_memory_utilization as SGLang's mem_fraction_static;
    the KV pool it sizes lives in the scheduler subprocess that ``VerlEngine`` -> ``Engine`` starts (verl_engine.py @
    01f14fd3), and torch_memory_saver pauses it there: the actor process's max_memory_allocated is the same for any
    fraction, while the engine's own KV grows with it."""
    base = (
        "mlite rl-memory Qwen3-8B --ngpu 4 --gpu-mem H200 --rollout sglang --rollout-tp 2 --rollout-n 5 "
        "--rollout-batch 1024 --prompt-len 1024 --response-len 1024 --verl-version 0.3"
    )
    lo, hi = (estimate_command(f"{base} --mem-fraction-static {f}") for f in (0.3, 0.7))
    assert hi.engine.kv > lo.engine.kv > 0
    assert predicted_metrics(lo)[ALLOCATED] == predicted_metrics(hi)[ALLOCATED]
    assert predicted_metrics(lo)[ALLOCATED] == round(max(_torch_bytes(p) for p in lo.to_dict()["phases"].values()))


def test_the_vllm_fork_exists_only_before_0_5():
    """verl's vLLM 0.5.4 / 0.6.3 fork (verl/third_party/vllm/vllm_v_0_6_3) is in v0.4.1 (8d9e350e) and gone in
    v0.5.0 (8fdc4d3f)."""
    assert measured_as("0.4", "in_process_freed")[ALLOCATED].cumem_kept is False
    assert measured_as("0.4", "in_process_cumem")[ALLOCATED].cumem_kept is True
    with pytest.raises(MliteError, match="fork"):
        measured_as("0.5", "in_process_freed")


# ------------------------------------------------------------------------------------------------ predicted_metrics
def test_predicted_allocated_is_the_largest_phase_of_the_actor_process():
    """Oracle: the ``--json`` parts. Separate processes: the largest phase of the actor's PyTorch parts (framework,
    engine overhead and CUDA graphs are outside the allocator). CuMem in the process: plus the engine's weights and
    KV, kept counted asleep (vLLM cumem.py @ 9ac96588: ``sleep`` unmaps and releases the handles but keeps
    ``pointer_to_data`` and the tensors of the ``MemPool``). Freed through PyTorch: the engine counts where awake."""
    est = estimate_command(LINE)
    doc = est.to_dict()
    phases = doc["phases"].values()
    sep = predicted_metrics(est, "0.9", "separate")
    assert sep[ALLOCATED] == round(max(_torch_bytes(p) for p in phases))
    cumem = predicted_metrics(est, "0.6", "in_process_cumem")
    pool = sum(doc["phases"]["rollout"]["parts"][k] for k in CUMEM_POOL)
    own = max(_torch_bytes(p, ("engine_activations",)) for p in phases)
    assert abs(cumem[ALLOCATED] - (own + pool)) <= 2
    freed = predicted_metrics(est, "0.4", "in_process_freed")
    assert freed[ALLOCATED] == round(max(_torch_bytes(p, ENGINE_TORCH) for p in phases))
    assert sep[ALLOCATED] < freed[ALLOCATED] <= cumem[ALLOCATED]
    # with the actor offloaded the rollout is the freed engine's largest phase, not the update
    assert freed[ALLOCATED] == round(_torch_bytes(doc["phases"]["rollout"], ENGINE_TORCH))
    for m in (sep, cumem, freed):
        assert m[RESERVED] >= m[ALLOCATED] and m[CPU_USED] == doc["host_per_node"]


def test_json_carries_predicted_metrics_and_what_they_assume(capsys):
    _rc, out, _ = _mlite(capsys, *LINE.split()[1:], "--json", "--verl-version", "0.7.0")
    doc = json.loads(out)
    for key in ("phases", "peak_phase", "fits", "kv_cache", "host_per_node", "warnings", "errors"):
        assert key in doc  # the earlier keys stay
    a = doc["predicted_metrics_assumed"]
    assert set(doc["predicted_metrics"]) == set(METRICS) == set(a["covers"])
    assert (a["verl_version"], a["placement"]) == ("0.7.0", "in_process_cumem")
    assert all(isinstance(v, int) for v in doc["predicted_metrics"].values())
    _rc, out, _ = _mlite(capsys, *LINE.split()[1:], "--json")
    a = json.loads(out)["predicted_metrics_assumed"]
    assert (a["verl_version"], a["placement"]) == ("0.9", "separate")  # the default: the newest release known
    assert a["logged_keys"][ALLOCATED] == "actor/" + ALLOCATED


def test_text_output_shows_the_metrics_beside_the_phases(capsys):
    _rc, out, _ = _mlite(capsys, *LINE.split()[1:], "--verl-version", "0.6")
    est = estimate_command(LINE + " --verl-version 0.6")
    pm = predicted_metrics(est)
    assert f"{ALLOCATED:34s} {pm[ALLOCATED] / GIB:7.1f} GiB  <- a log's memory peak" in out  # 0.6: no prefix
    assert "verl 0.6 logs (engine placement in_process_cumem" in out and "CuMem pool" in out


# ------------------------------------------------------------------------------------------------ import-launcher
LAUNCH = (
    "python3 -m verl.trainer.main_ppo actor_rollout_ref.model.path=Qwen/Qwen3-8B trainer.nnodes=1 "
    "trainer.n_gpus_per_node=8 actor_rollout_ref.rollout.name=vllm {extra}\n"
)


@pytest.mark.parametrize(
    ("head", "extra", "version", "where"),
    [
        ("pip install verl==0.5.0\n", "", "0.5.0", "pinned 'verl==0.5.0' (line 1)"),
        ("#   - verl==release/0.7.1\n", "", "0.7.1", "line 1"),  # verl's own example headers (v0.9.0)
        ("# base image(quay.io/ascend/verl:v0.8.0-cann9.0.0)\n", "", "0.8.0", "image tag"),
        ("", "actor_rollout_ref.rollout.mode=sync", "0.6", "mode=sync"),
        ("", "", None, "names no verl release"),
    ],
)
def test_import_launcher_reads_the_verl_version(head, extra, version, where):
    imp = import_launcher("<text>", text=head + LAUNCH.format(extra=extra))
    assert imp.verl_version["version"] == version and where in imp.verl_version["source"]
    assert imp.to_dict()["verl_version"] == imp.verl_version


def test_import_launcher_drops_a_version_it_does_not_know():
    imp = import_launcher("<text>", text="pip install verl==0.12.0\n" + LAUNCH.format(extra=""))
    assert imp.verl_version["version"] is None and "unknown to the kit" in imp.verl_version["source"]


def test_import_launcher_estimate_assumes_the_launcher_version():
    from mlite.export.importer import rl_estimate

    imp = import_launcher("<text>", text="pip install verl==0.6.1\n" + LAUNCH.format(extra=""))
    _, est = imp.estimate("Qwen3-8B", gpu_memory_gib=141)
    rl = rl_estimate(imp, est, "Qwen3-8B")
    assert rl["predicted_metrics_assumed"]["verl_version"] == "0.6"
    assert rl["predicted_metrics_assumed"]["placement"] == "in_process_cumem"


# ------------------------------------------------------------------------------------------------ published runs
def test_published_runs_predicted_metrics_are_the_old_accounting():
    """Each run's release and placement (runs.json, sourced) give the accounting the earlier comparison chose by
    hand: ``predicted_metrics`` (+ the critic stand-in) equals ``torch_peaks``' column for it; the README table is
    what the code computes."""
    from mlite.validation.rl_check import compare_runs, metrics_table

    runs = {r["id"]: r for r in json.loads((RUNS / "runs.json").read_text())["runs"]}
    rows = compare_runs(RUNS)
    same = {"cumem": "in_process_cumem", "torch_frees": "in_process_freed", "outside": "separate"}
    for row in rows:
        run = runs[row["run"]]
        assert row["metrics"]["placement"] == same[row["accounting"]] == run["engine_placement"]
        assert run["verl_version_source"] and run["placement_source"]
        got = row["metrics"]["predicted"]["max_memory_allocated_gb"]
        assert got == pytest.approx(row["predicted"]["applies"], rel=0.02)
    assert metrics_table(rows) in (REPO / "README.md").read_text(), "paste metrics_table(compare_runs(...))"


# ------------------------------------------------------------------------------------------------ RL view
def test_rl_view_shows_the_predicted_metrics_and_their_release():
    from test_rl_memory import _rl_view

    _planner, _memory, rl = _rl_view(tensor_model_parallel_size=2, prompt_length=512, response_length=1024, n=8)
    html = rl.metrics.value
    pm = rl.estimate.to_dict()["predicted_metrics"]
    for name, b in pm.items():
        assert f'data-metric="{name}" data-bytes="{b}"' in html
    assert (
        html.count("mlite-rl-log-shows") == 1
        and f'mlite-rl-metric mlite-rl-log-shows" data-metric="{ALLOCATED}"' in html
    )
    assert "--verl-version" not in rl.command()  # the default release
    rl.set(verl_version="0.6")
    assert rl.estimate.rollout.verl_version == "0.6" and "in_process_cumem" in rl.metrics.value
    cmd = rl.command()
    assert "--verl-version 0.6" in cmd
    assert estimate_command(cmd).to_dict() == rl.estimate.to_dict()
    assert predicted_metrics(rl.estimate)[ALLOCATED] > pm[ALLOCATED]  # the engine's pool counts in the process


def test_device_bench_runs_on_cpu_and_predicts_the_pool_kept(tmp_path):
    """bench/measuredas_pool.py (the H200 row: PyTorch's own statistics against :func:`peak_allocated`): its CPU
    path writes the predictions and the report; the kept CuMem pool adds the engine to the update's peak, the freed
    one leaves the rollout the largest phase."""
    from bench.measuredas_pool import main as bench
    from bench.measuredas_pool import phases

    assert bench(["--out", str(tmp_path), "--device", "cpu", "--mib", "2"]) == 0
    raw = json.loads((tmp_path / "measuredas_raw.json").read_text())
    got = {r["variant"]: r["predicted_max_allocated"] for r in raw["rows"]}
    kept, _pool = phases(2 * 1024**2, "kept")
    assert got["kept"] == sum(kept[1].values())  # the update, the pool's tensors alive
    freed, _ = phases(2 * 1024**2, "freed")
    assert got["freed"] == sum(freed[0].values()) and got["freed"] < got["kept"]
    assert bench(["--report", str(tmp_path / "measuredas_raw.json"), "--csv", str(tmp_path / "m.csv")]) == 0
    assert (tmp_path / "m.csv").read_text().count("predicted_max_allocated") == 2


def test_old_verl_with_a_vllm_before_0_7_is_the_fork():
    """verl <= 0.4 picks its vLLM 0.5.4 / 0.6.3 fork for a vLLM release before 0.7 (verl/third_party/vllm/__init__.py
    @ v0.4.1 8d9e350e), which frees the engine through PyTorch; with vLLM >= 0.7 it runs vllm_rollout_spmd.py."""
    assert placement_for(RolloutOptions(vllm_version="0.6.3"), "0.4") == "in_process_freed"
    assert placement_for(RolloutOptions(vllm_version="0.8.5"), "0.4") == "in_process_cumem"
    assert placement_for(RolloutOptions(vllm_version="0.6.3"), "0.5") == "in_process_cumem"  # no fork in 0.5
