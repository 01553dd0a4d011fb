"""Megatron-FSDP (``--optimizer mfsdp``): bytes per parameter against the design doc's table, every rule's refusal,
the lite runtime's three offload modes on the CPU mesh (losses against the fsdp2 reference, measured bytes against
the estimate), the export's environment and the import's override rules.

The byte oracle is the table of ISEEKYAN/Megatron-LM ``experimental/lite/docs/mfsdp-fsdp2-style-cpu-offload-design.md``
@ adcd21d0 (§Byte accounting), written out here independently of :func:`mlite.memory.optimizer.mfsdp_bytes`.
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from conftest import assert_one_line_error, run_cli
from runtime_workers import runtime_config, train

from mlite.errors import MliteError
from mlite.memory import TrainingOptions, estimate
from mlite.memory.lite import lite_tensors
from mlite.memory.optimizer import mfsdp_bytes
from mlite.mesh import ParallelConfig, resolve
from mlite.models import from_hf_config
from mlite.options import rules
from mlite.options.optimizers import BACKENDS, check_env, check_overrides
from mlite.runtime.dist import run_local
from mlite.runtime.optim.optimizer import local

C = 40_000_000


def design_table(n: float, o: float, c: int, staging: str, compute: int = 2) -> dict:
    """The design doc's per-rank bytes (GPU, host) for N shard elements, O offloaded, bucket C."""
    g = n - o
    if o == 0:
        return {"gpu": 16 * n, "host": 0}
    ring = 4 * min(o, 2 * c) if staging == "ring" else 4 * o  # today: _cpu_grad_bufs adds 4 per offloaded element
    if o == n:  # bf16 shard mirror + fp32 main_grad; master and moments on the host
        return {"gpu": compute * n + 4 * n, "host": 12 * n + ring}
    return {"gpu": 4 * n + 4 * n + 8 * g, "host": 12 * o + ring}


# ---------------------------------------------------------------------------------------------- bytes
@pytest.mark.parametrize("staging", ["persistent", "ring"])
@pytest.mark.parametrize("n, o", [(1e9, 0), (1e9, 1e9), (1e9, 4e8), (5e7, 5e7), (1e8, 3e7)])
def test_mfsdp_bytes_are_the_design_table(n, o, staging):
    b = mfsdp_bytes(n, o, C, staging)
    t = design_table(n, o, C, staging)
    assert b.gpu == t["gpu"] and b.host == t["host"]
    if staging == "ring":
        assert b.host_grad_staging <= 8 * C  # the ring never exceeds 8C
    if o == n and staging == "persistent":
        assert b.host == 16 * n  # "today approximately 16N"


def _est(f: float, ngpu: int = 1, model: str = "Qwen3-8B", **kw):
    spec = from_hf_config(model)
    o = TrainingOptions(optimizer="mfsdp", offload_fraction=f, **kw)
    return estimate(spec, ParallelConfig(), o, ngpu=ngpu).to_dict()


@pytest.mark.parametrize("staging", ["persistent", "ring"])
@pytest.mark.parametrize("f", [0.0, 0.25, 0.5, 1.0])
def test_the_estimator_counts_the_design_table_per_parameter(f, staging):
    d = _est(f, ngpu=8, mfsdp_grad_staging=staging)
    n = d["local_params"] / 8  # DP 8 shards everything
    t = design_table(n, f * n, C, staging)
    gpu = d["per_gpu"]["params"] + d["per_gpu"]["grads"] + d["per_gpu"]["optimizer"]
    assert gpu == pytest.approx(t["gpu"], abs=2)
    host = sum(v for k, v in d["host_detail"].items() if k.startswith("mfsdp_"))
    assert host == pytest.approx(t["host"], abs=2) and d["host"]["per_gpu"] == pytest.approx(t["host"], abs=2)
    assert d["bytes_per_param"] * 8 == pytest.approx(t["gpu"] / n)  # 16, 10 + ..., 6 per shard element
    if f == 0:
        assert d["host_detail"] == {}  # no ring, no staging, no host state


def test_full_offload_with_fp32_params_keeps_an_fp32_mirror():
    d = _est(1.0, param_dtype="fp32")
    n = d["local_params"]
    assert d["per_gpu"]["params"] == pytest.approx(4 * n, abs=1) and d["per_gpu"]["grads"] == pytest.approx(4 * n)


def test_gather_and_wgrad_scratch_are_bounded_by_the_bucket_and_prefetch_is_off_under_full_offload():
    for f, buckets in ((0.0, 2), (0.5, 2), (1.0, 1)):
        small = _est(f, mfsdp_bucket_size=1_000_000)["transients"]
        assert small["mfsdp_all_gather"] == buckets * 1_000_000 * 2  # bf16 compute copy of one bucket each
        assert small["mfsdp_wgrad"] == 4 * 1_000_000  # fp32 fused-wgrad scratch of one bucket
        big = _est(f)["transients"]  # a Qwen3-8B layer (~200M parameters) is larger than the bucket: C bounds it
        assert big["mfsdp_wgrad"] == 4 * C and big["mfsdp_all_gather"] == buckets * C * 2
        tiny = _est(f, model="tiny-dense")["transients"]  # a unit smaller than the bucket bounds the scratch
        assert 0 < tiny["mfsdp_wgrad"] < 4 * C and tiny["mfsdp_all_gather"] == buckets * tiny["mfsdp_wgrad"] // 2


def test_three_cuda_peaks_are_reported_apart_and_the_optimizer_adds_no_cuda_allocation():
    d = _est(0.5)
    p = d["cuda_peaks"]
    assert p["steady"] == d["static"] and p["full_step"] == d["peak"]
    assert p["optimizer_only"] == p["steady"] < p["full_step"]


def test_mlite_memory_shows_mfsdp_parts(tmp_path):
    res = run_cli("memory", "Qwen3-8B", "--ngpu", "8", "--optimizer", "mfsdp", "--offload-fraction", "1",
                  "--mfsdp-grad-staging", "ring")  # fmt: skip
    assert res.rc in (0, 1), res.err
    assert "mfsdp host  state" in res.out and "(ring, bucket_size 40,000,000)" in res.out
    assert "CUDA peaks  steady" in res.out and "optimizer only" in res.out
    res = run_cli("memory", "Qwen3-8B", "--ngpu", "8", "--optimizer", "mfsdp", "--offload-fraction", "0.5", "--json")
    d = json.loads(res.out)
    assert set(d["host_detail"]) == {"mfsdp_host_state", "mfsdp_grad_staging"}
    assert set(d["cuda_peaks"]) == {"steady", "full_step", "optimizer_only"}


# ---------------------------------------------------------------------------------------------- rules
def test_the_env_rule_refuses_a_single_device_connection_and_mlite_run_says_so(tmp_path):
    assert BACKENDS.entry("mfsdp").env_refuses == (rules.no_single_device_connection,)
    check_env("mfsdp", {"CUDA_DEVICE_MAX_CONNECTIONS": "8"})
    check_env("mfsdp", {})
    check_env("fsdp2", {"CUDA_DEVICE_MAX_CONNECTIONS": "1"})  # only mfsdp refuses it
    with pytest.raises(MliteError, match="CUDA_DEVICE_MAX_CONNECTIONS: 1 is refused by Megatron-FSDP") as e:
        check_env("mfsdp", {"CUDA_DEVICE_MAX_CONNECTIONS": "1"})
    assert "mfsdp/config.py @ 0d14590c" in str(e.value)
    out = tmp_path / "r"
    res = run_cli("run", "--model", "tiny-dense", "--steps", "1", "--nproc", "1", "--device", "cpu", "--out", out,
                  "--optimizer", "mfsdp", env={"CUDA_DEVICE_MAX_CONNECTIONS": "1"})  # fmt: skip
    assert_one_line_error(res, str(e.value))
    assert not out.exists()


@pytest.mark.parametrize(
    "key, value, needle",
    [
        ("mfsdp_sharding_strategy", "optim_grads", "only optim_grads_params"),
        ("data_parallel_sharding_strategy", "no_shard", "only optim_grads_params"),
        ("use_hsdp", True, "HSDP is refused"),
        ("num_distributed_optimizer_instances", 2, "num_distributed_optimizer_instances>1 is not supported"),
        ("nccl_ub", True, "does not ship it"),
    ],
)
def test_override_rules_refuse_what_mfsdp_rejects(key, value, needle, tmp_path):
    check_overrides("mfsdp", {"mfsdp_sharding_strategy": "optim_grads_params", "use_hsdp": False, "nccl_ub": 0})
    check_overrides("fsdp2", {key: value})  # fsdp2 has no such rules
    with pytest.raises(MliteError, match=needle) as e:
        check_overrides("mfsdp", {key: value})
    msg = str(e.value)
    assert msg.startswith(f"{key}:") and "mfsdp/config.py @ 0d14590c" in msg
    sh = tmp_path / "a"
    res = run_cli("export", "Qwen3-8B", "--nodes", "1", "--target", "verl-mlite-sft", "--optimizer", "mfsdp",
                  "--offload-fraction", "0.5", "--out", sh)  # fmt: skip
    assert res.rc == 0, res.err
    text = (sh / "run_verl_mlite_sft.sh").read_text()
    line = f'    "+optim.override_optimizer_config.{key}={value!s}"\n'
    text = text.replace(
        '    "+optim.override_optimizer_config.offload_fraction',
        line + '    "+optim.override_optimizer_config.offload_fraction',
    )
    bad = tmp_path / "bad.sh"
    bad.write_text(text)
    assert_one_line_error(run_cli("import-launcher", bad), msg)


def test_the_mfsdp_export_does_not_set_a_single_device_connection_and_round_trips(tmp_path):
    for target, name in (("verl-mlite-sft", "run_verl_mlite_sft.sh"), ("verl-mlite-grpo", "run_verl_mlite_grpo.sh")):
        for opt, has in (("mfsdp", False), ("fsdp2", True)):
            out = tmp_path / f"{target}-{opt}"
            res = run_cli("export", "Qwen3-8B", "--nodes", "1", "--target", target, "--optimizer", opt,
                          "--offload-fraction", "0.5", "--mfsdp-bucket-size", "1000000", "--out", out)  # fmt: skip
            assert res.rc == 0, res.err
            text = next(out.glob("run_*.sh")).read_text()
            assert ('export CUDA_DEVICE_MAX_CONNECTIONS="${CUDA_DEVICE_MAX_CONNECTIONS:-1}"' in text) == has, name
            if opt == "mfsdp":
                assert "+engine.impl_cfg.optimizer" in text or "impl_cfg.optimizer=${OPTIMIZER}" in text
                assert "OPTIMIZER=${OPTIMIZER:-mfsdp}" in text
                assert 'optim.override_optimizer_config.bucket_size=1000000"' in text
                res = run_cli("import-launcher", next(out.glob("run_*.sh")), "--json")
                assert res.rc == 0, res.err
                o = json.loads(res.out)["options"]
                assert (o["optimizer"], o["offload_fraction"], o["mfsdp_bucket_size"]) == ("mfsdp", 0.5, 1_000_000)
                assert not any("CUDA_DEVICE_MAX_CONNECTIONS" in w for w in json.loads(res.out)["warnings"])


def test_resume_with_another_offload_fraction_is_refused():
    a = SimpleNamespace(optimizer="mfsdp", offload_fraction=1.0)
    rules.mfsdp_resume_rule(a, SimpleNamespace(optimizer="mfsdp", offload_fraction=1.0))
    rules.mfsdp_resume_rule(SimpleNamespace(optimizer="fsdp2", offload_fraction=1.0), a)  # not an mfsdp checkpoint
    with pytest.raises(
        MliteError, match=r"offload_fraction: resuming an mfsdp checkpoint saved with offload_fraction 1 at 0.5"
    ) as e:
        rules.mfsdp_resume_rule(a, TrainingOptions(optimizer="mfsdp", offload_fraction=0.5))
    assert "resume with --offload-fraction 1" in str(e.value) and "§Checkpoint" in str(e.value)


def test_what_the_lite_runtime_does_not_build_is_refused_before_a_run_starts(tmp_path):
    out = tmp_path / "r"
    for words, needle in (
        (["--pao"], "the lite runtime's mfsdp keeps fp32 main params"),
        (["--tp", "2"], "the lite runtime's mfsdp runs data and context parallelism only"),
    ):
        res = run_cli("run", "--model", "tiny-dense", "--steps", "1", "--nproc", "2", "--device", "cpu", "--out", out,
                      "--optimizer", "mfsdp", *words)  # fmt: skip
        assert_one_line_error(res, needle)
        assert not out.exists()
    TrainingOptions(optimizer="mfsdp", use_precision_aware_optimizer=True)  # the estimator models PAO's fp32 buffers


# ---------------------------------------------------------------------------------------------- lite runtime
STEPS = 4


def _one(rank, opts: dict, pd: str, model: str) -> dict:
    from mlite.runtime.runtime import create_runtime

    rt = create_runtime(runtime_config(model, param_dtype=pd, **opts))
    h = rt.build_model()
    losses = [m["loss"] for m in train(h, STEPS, rank=rank)]
    mem = rt.memory_stats(h)
    opt: Any = h.optimizer
    out: dict[str, Any] = {
        "losses": losses,
        "params": {n: local(p).detach().clone() for n, p in h.model.named_parameters()},
        "mem": {k: v for k, v in mem.items() if isinstance(v, dict) and "bytes" in v},
    }
    if opts.get("optimizer") == "mfsdp":
        out["n"] = sum(local(s.param).numel() for s in opt.slots)
        out["o"] = opt.offloaded
        out["flags"] = [s.offload for s in opt.slots]
        out["named"] = [(s.name, tuple(s.param.shape)) for s in opt.slots]
        out["no_grad"] = all(s.param.grad is None for s in opt.slots)  # FSDP2's .grad dropped: main_grad only
    return out


def _worker(rank, world, configs: list, model: str):
    """Every ``(options, param_dtype)`` config in the same two processes (one process group), one after the other."""
    return [_one(rank, opts, pd, model) for opts, pd in configs]


FP32_FRACS = (0.0, 0.5, 1.0)
"""Offload fractions of the fp32 runs (each against the fsdp2 reference, bitwise)."""
BF16_CASES = [(0.0, "persistent", C)] + [
    (f, st, b) for f in (0.5, 1.0) for st, b in (("persistent", C), ("ring", 1000))
]
"""(offload fraction, grad staging, bucket size) of the bf16 runs."""


def _mfsdp(f: float, **kw) -> dict:
    return {"optimizer": "mfsdp", "offload_fraction": f or None, **kw}


@pytest.fixture(scope="module")
def runs() -> dict:
    """The fp32 and the bf16 runs of tiny-moe in one spawned group: ``{"fp32"|"bf16": [config][rank] -> result}``,
    the fsdp2 reference first in each list."""
    fp32 = [({}, "fp32")] + [(_mfsdp(f), "fp32") for f in FP32_FRACS]
    bf16 = [({}, "bf16")] + [(_mfsdp(f, mfsdp_grad_staging=st, mfsdp_bucket_size=b), "bf16") for f, st, b in BF16_CASES]
    configs = fp32 + bf16
    res = run_local(_worker, 2, args=(configs, "tiny-moe"), timeout_s=600)
    per = [[res[r][i] for r in (0, 1)] for i in range(len(configs))]
    return {"fp32": per[: len(fp32)], "bf16": per[len(fp32) :]}


def _bits(t):
    return t.view(torch.int32) if t.dtype == torch.float32 else t.view(torch.int16)


def _same(a: dict, b: dict) -> list[str]:
    return [k for k in a if not torch.equal(_bits(a[k].contiguous()), _bits(b[k].contiguous()))]


def _measured(mem: dict) -> dict:
    """Device-role and host-role bytes of one rank as the runtime counts its tensors (``--device cpu``: every
    tensor lives on the CPU; the role is the tensor's, as on a GPU run)."""
    device = (
        mem["params"]["bytes"]
        + mem["grads"]["bytes"]
        + sum(mem[k]["bytes"] for k in ("master", "remainder", "exp_avg", "exp_avg_sq") if k in mem)
    )
    host = sum(mem[k]["bytes"] for k in ("host_master", "host_exp_avg", "host_exp_avg_sq", "grad_staging") if k in mem)
    return {"gpu": device, "host": host, "staging": mem.get("grad_staging", {"bytes": 0})["bytes"]}


def _split_oracle(named, f):
    """The fork's _split_param_groups_by_fraction: decay params first (not 1-D, not bias), then the rest."""
    numel = [torch.Size(s).numel() for _, s in named]
    decay = [not (n.endswith(".bias") or len(s) == 1) for n, s in named]
    target, sent, out = int(sum(numel) * f), 0, [False] * len(named)
    for i in [i for i in range(len(named)) if decay[i]] + [i for i in range(len(named)) if not decay[i]]:
        if sent < target:
            out[i], sent = True, sent + numel[i]
    return out


def test_mfsdp_fp32_runs_equal_the_fsdp2_reference_bitwise_and_bytes_equal_the_estimate(runs):
    ref, *out = runs["fp32"]
    spec = from_hf_config("tiny-moe")
    for f, res in zip(FP32_FRACS, out):
        for rank in (0, 1):
            r = res[rank]
            assert r["losses"] == ref[rank]["losses"], (f, rank)  # fp32 storage and update: the same bits
            assert _same(r["params"], ref[rank]["params"]) == []
            assert r["no_grad"]
            n, o = r["n"], r["o"]
            assert r["flags"] == _split_oracle(r["named"], f)
            assert (o == 0) == (f == 0) and (o == n) == (f == 1.0)
            b = mfsdp_bytes(n, o, C, "persistent", compute_bytes=4)
            m = _measured(r["mem"])
            assert m["gpu"] == b.gpu and m["host"] == b.host
            if f == 0:
                assert m["host"] == 0 and m["staging"] == 0  # offload 0 builds no host state
            o_est = TrainingOptions(optimizer="mfsdp", offload_fraction=f, param_dtype="fp32", activation_model="lite",
                                    lite_device="cpu", micro_batch_size=1, seq_len=64)  # fmt: skip
            d = estimate(spec, ParallelConfig(), o_est, ngpu=2).to_dict()
            assert d["local_params"] / 2 == n  # the estimator's shard is the runtime's local shard
            est_gpu_static = d["per_gpu"]["params"] + d["per_gpu"]["grads"] + d["per_gpu"]["optimizer"]
            # every f, 0.5 included: the lite estimate splits whole tensors by the runtime's own rule
            assert est_gpu_static == m["gpu"], f
            assert d["host"]["per_gpu"] == m["host"], f
            numel_decay = [(torch.Size(s).numel(), not (n.endswith(".bias") or len(s) == 1)) for n, s in r["named"]]
            assert lite_tensors(spec) == numel_decay  # the estimator's tensor list is the runtime's, in order


def test_mfsdp_bf16_modes_track_fsdp2_and_the_ring_changes_no_bit(runs):
    ref, *out = runs["bf16"]
    by = {(f, st): res for (f, st, _), res in zip(BF16_CASES, out)}
    for (f, staging, bucket), res in zip(BF16_CASES, out):
        for rank in (0, 1):
            r = res[rank]
            # fp32 main grads against fsdp2's bf16 grads: close, not the same bits
            assert r["losses"] == pytest.approx(ref[rank]["losses"], rel=2e-3)
            n, o = r["n"], r["o"]
            b = mfsdp_bytes(n, o, bucket, staging, compute_bytes=2)
            m = _measured(r["mem"])
            assert m["gpu"] == b.gpu and m["host"] == b.host, (f, staging)
            if staging == "ring":
                assert m["staging"] == 4 * min(o, 2 * bucket) == 8000  # two slots of C elements
    for f in (0.5, 1.0):
        a, b = by[f, "persistent"], by[f, "ring"]
        for rank in (0, 1):
            assert a[rank]["losses"] == b[rank]["losses"] and _same(a[rank]["params"], b[rank]["params"]) == []
    full = by[1.0, "persistent"][0]
    assert {d for v in full["mem"].values() for d in v["by_device"]} == {"cpu"}
    assert full["mem"]["params"]["bytes"] == 2 * full["n"]  # the bf16 shard mirror


def test_mlite_run_trains_mfsdp(tmp_path):
    out = tmp_path / "r"
    res = run_cli("run", "--model", "tiny-dense", "--steps", "2", "--nproc", "2", "--device", "cpu", "--out", out,
                  "--optimizer", "mfsdp", "--offload-fraction", "0.5", "--mfsdp-grad-staging", "ring")  # fmt: skip
    assert res.rc == 0, res.err
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x.strip()]
    assert [r["step"] for r in rows] == [1, 2] and all(r["data"]["train/loss"] > 0 for r in rows)
    assert json.loads((out / "config.json").read_text())["optimizer"] == "mfsdp"


def test_the_memory_view_has_the_mfsdp_knobs_only_under_mfsdp_and_they_reach_the_host_bytes():
    from widgets.memory_view import MemoryView
    from widgets.planner import MeshPlanner

    view = MemoryView(MeshPlanner("Qwen3-8B", ngpu=8))
    c = view.controls
    assert c["mfsdp_bucket_size"].disabled and c["mfsdp_grad_staging"].disabled  # dist_opt: no mfsdp knobs
    view.set(optimizer="mfsdp", offload_fraction=1.0, mfsdp_grad_staging="ring")
    assert not c["mfsdp_bucket_size"].disabled
    ring_40m = view.estimate.to_dict()["host"]["per_gpu"]
    view.set(mfsdp_bucket_size=10_000_000)
    o = view.options()
    assert (o.mfsdp_bucket_size, o.mfsdp_grad_staging) == (10_000_000, "ring")
    spec = from_hf_config("Qwen3-8B")
    want = estimate(spec, resolve(spec, 8, ParallelConfig(), seq_len=o.seq_len), o).to_dict()["host"]["per_gpu"]
    assert view.estimate.to_dict()["host"]["per_gpu"] == want < ring_40m  # the ring holds 2 x bucket elements
    assert "--mfsdp-bucket-size 10000000" in view.command()


@pytest.mark.parametrize("model", ["tiny-dense", "tiny-moe"])
@pytest.mark.parametrize("f", [0.0, 0.5, 1.0])
def test_the_step_allocates_only_host_work_and_backward_leaves_no_reduce_output(f, model):
    """The optimizer-only peak is the estimate's (= steady): measured on the CPU with tests/live_bytes.py over the
    third step. Backward leaves nothing it made alive (every unit's fp32 reduce-scatter output, the root's with the
    embedding's gradient included, is dropped once its gradients are in ``main_grad``); the optimizer step's only
    allocations are the host update's work buffers (three fp32, one fp64, one int16 of ``min(CHUNK, slot)``
    elements: host memory on a GPU run; the zero count runs over the staged host copy), none of them left after it.
    On one rank the f = 0.5 whole-tensor split's device and host bytes are the estimate's too."""
    from live_bytes import LiveBytes
    from runtime_workers import synthetic_microbatches

    from mlite.runtime.optim.optimizer import CHUNK
    from mlite.runtime.runtime import create_runtime

    rt = create_runtime(runtime_config(model, param_dtype="bf16", optimizer="mfsdp", offload_fraction=f or None))
    h = rt.build_model()
    for k in range(2):
        rt.train_step(h, synthetic_microbatches(k, 0))
    with LiveBytes() as fb:
        rt.forward_backward(h, synthetic_microbatches(2, 0))
        left = fb.live
    opt: Any = h.optimizer
    assert left == 0 and opt._reduced is None
    with LiveBytes() as step:
        assert rt.optimizer_step(h)[0]
        after = step.live
    host_work = 22 * min(CHUNK, opt.staging[0].numel()) if f else 0
    assert step.peak == host_work and after == 0, step.sizes_at_peak
    if f:
        kinds = sorted(str(d) for _, d in step.sizes_at_peak)
        assert kinds == ["torch.float32"] * 3 + ["torch.float64", "torch.int16"]
    o = TrainingOptions(optimizer="mfsdp", offload_fraction=f, param_dtype="bf16", activation_model="lite",
                        lite_device="cpu", seq_len=64)  # fmt: skip
    d = estimate(from_hf_config(model), ParallelConfig(), o, ngpu=1).to_dict()
    assert d["cuda_peaks"]["optimizer_only"] == d["cuda_peaks"]["steady"]  # no device transient, as measured
    m = _measured({k: v for k, v in rt.memory_stats(h).items() if isinstance(v, dict) and "bytes" in v})
    assert d["per_gpu"]["params"] + d["per_gpu"]["grads"] + d["per_gpu"]["optimizer"] == m["gpu"]
    assert d["host"]["per_gpu"] == m["host"]
