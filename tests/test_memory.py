"""Memory estimator: the bytes-per-parameter table, sharding, offload, activations (Korthikanti), CLI contract."""

from __future__ import annotations

import pytest
from conftest import assert_one_line_error, run_cli

from mlite.errors import MliteError
from mlite.memory import GIB, TrainingOptions, estimate, mesh_table, sweep
from mlite.memory.activations import gpt_layer_bytes
from mlite.memory.optimizer import state_bytes
from mlite.mesh import ParallelConfig, resolve
from mlite.models import from_hf_config

L8 = from_hf_config("Llama-3.1-8B")  # dense, vocab 128256 = 128 * 1002 (no padding at TP 1 or 2)
Q30 = from_hf_config("Qwen3-30B-A3B")  # MoE, vocab 151936 = 128 * 1187


def _est(spec, ngpu, opts=None, **mesh):
    return estimate(spec, resolve(spec, ngpu, ParallelConfig(**mesh)), opts or TrainingOptions())


@pytest.mark.parametrize(
    "opts, want",
    [
        (TrainingOptions(), 18),
        (TrainingOptions(use_precision_aware_optimizer=True), 16),  # fp32 grads, remainders on: 2 + 4 + (2 + 4 + 4)
        (
            TrainingOptions(use_precision_aware_optimizer=True, main_grads_dtype="bf16", store_param_remainders=False),
            16,
        ),
        (TrainingOptions(use_precision_aware_optimizer=True, main_grads_dtype="bf16"), 14),
        (
            TrainingOptions(
                use_precision_aware_optimizer=True,
                main_grads_dtype="bf16",
                exp_avg_dtype="bf16",
                exp_avg_sq_dtype="bf16",
            ),
            10,
        ),
        (TrainingOptions(use_distributed_optimizer=False), 18),
    ],
)
def test_bytes_per_param_one_gpu(opts, want):
    e = _est(L8, 1, opts)
    assert e.bytes_per_param == want
    w = e.worst
    assert w.local_params == L8.total
    assert e.to_dict()["per_gpu"]["params"] == 2 * L8.total


def test_distributed_optimizer_shards_over_dp_and_cp():
    assert _est(L8, 8).bytes_per_param == 6 + 12 / 8
    assert _est(L8, 8, cp=4).bytes_per_param == 6 + 12 / 8  # d = DP x CP = 2 x 4
    assert _est(L8, 8, cp=8).bytes_per_param == 6 + 12 / 8  # d = 1 x 8
    assert _est(L8, 16, cp=2, tp=2).bytes_per_param == 6 + 12 / 8  # d = 4 x 2
    assert _est(L8, 8, TrainingOptions(use_distributed_optimizer=False)).bytes_per_param == 18
    pao14 = TrainingOptions(use_precision_aware_optimizer=True, main_grads_dtype="bf16")
    assert _est(L8, 8, pao14).bytes_per_param == 4 + 10 / 8


@pytest.mark.parametrize(
    "ngpu, mesh", [(8, {}), (8, dict(ep=8)), (16, dict(ep=4, cp=2)), (32, dict(ep=8, etp=2)), (16, dict(tp=2, ep=4))]
)
def test_expert_params_divide_by_edp(ngpu, mesh):
    routed = Q30.components["routed_experts"]
    dense = Q30.training_params - routed
    plan = resolve(Q30, ngpu, ParallelConfig(**mesh))
    e = estimate(Q30, plan, TrainingOptions())
    p = plan.parallel
    # dense tensors: tp-split ones / TP; with TP 2 the norms/router/q-k norms stay whole
    by_kind = {"tp": 0, "rep": 0, "vocab": 0}
    for g in Q30.all_groups():
        if g.parallel in by_kind:
            by_kind[g.parallel] += g.numel
    padded = -(-Q30.vocab_size // (128 * p.tp)) * 128 * p.tp  # Megatron's vocabulary padding
    dense_local = by_kind["tp"] / p.tp + by_kind["rep"] + by_kind["vocab"] * padded / Q30.vocab_size / p.tp
    assert by_kind["tp"] + by_kind["rep"] + by_kind["vocab"] == dense
    expert_local = routed / (p.ep * p.etp_size)
    shard = dense_local / (plan.dp * p.cp) + expert_local / plan.edp
    assert e.worst.local_params == pytest.approx(dense_local + expert_local, rel=1e-12)
    assert e.worst.master == pytest.approx(4 * shard, rel=1e-12)
    assert e.worst.exp_avg_sq == pytest.approx(4 * shard, rel=1e-12)


def test_offload_fraction_moves_optimizer_to_host():
    base = _est(L8, 8)
    half = _est(L8, 8, TrainingOptions(offload_fraction=0.5))
    assert half.worst.optimizer == pytest.approx(base.worst.optimizer / 2)
    shard = L8.total / 8
    assert half.worst.host_total == pytest.approx(16 * 0.5 * shard)
    assert half.to_dict()["host"]["per_node"] == round(half.worst.host_total) * 8
    full = _est(L8, 8, TrainingOptions(offload_fraction=1.0))
    assert full.worst.optimizer == 0 and full.worst.params == base.worst.params
    # PAO dtypes are not applied under Megatron's CPU offload: the resident share keeps 12 bytes
    pao = _est(L8, 8, TrainingOptions(offload_fraction=0.5, use_precision_aware_optimizer=True))
    assert pao.worst.optimizer == pytest.approx(0.5 * shard * 12)


def test_fsdp2_shards_everything():
    for ngpu in (1, 2, 8):
        e = _est(L8, ngpu, TrainingOptions(optimizer="fsdp2"))
        shard = L8.total / ngpu
        w = e.worst
        assert (w.params, w.grads, w.master, w.exp_avg, w.exp_avg_sq) == pytest.approx(
            (2 * shard, 2 * shard, 4 * shard, 4 * shard, 4 * shard)
        )
        assert e.bytes_per_param == pytest.approx(16 / ngpu)
    pao = _est(L8, 8, TrainingOptions(optimizer="fsdp2", use_precision_aware_optimizer=True))
    assert pao.bytes_per_param == pytest.approx(14 / 8)
    m16 = _est(
        L8,
        8,
        TrainingOptions(
            optimizer="fsdp2", use_precision_aware_optimizer=True, exp_avg_dtype="bf16", exp_avg_sq_dtype="bf16"
        ),
    )
    assert m16.bytes_per_param == pytest.approx(10 / 8)
    off = _est(L8, 8, TrainingOptions(optimizer="fsdp2", offload_fraction=1.0))
    assert off.worst.optimizer == 0 and off.worst.host_total >= 12 * L8.total / 8
    moe = estimate(Q30, resolve(Q30, 8, ParallelConfig(ep=2)), TrainingOptions(optimizer="fsdp2"))
    routed = Q30.components["routed_experts"]
    dense = Q30.training_params - routed
    assert moe.worst.params == pytest.approx(2 * (dense / 8 + routed / 2 / 4))


def test_runtime_context_offload_phases():
    on = _est(L8, 8, TrainingOptions(param_offload=True, optimizer_offload=True))
    off = _est(L8, 8)
    w = on.worst
    assert w.idle_gpu == pytest.approx(off.worst.grads)  # only the dist_opt grad buffer stays
    assert w.host_total == pytest.approx(w.params + w.optimizer)
    assert on.to_dict()["phases"]["idle"]["gpu"] < on.to_dict()["phases"]["training"]["gpu"]


# Korthikanti et al. 2022, Table 1 closed forms for a GPT layer (bytes; s, b, h, a, t)
def _paper(s, b, h, a, t, sp, recompute):
    if recompute == "full":
        return 2 * s * b * h / (t if sp else 1)
    core = 5 * a * s / h
    if recompute == "selective":
        return s * b * h * (34 / t if sp else 10 + 24 / t)
    return s * b * h * ((34 + core) / t if sp else 10 + (24 + core) / t)


# the paper's models: 22B, 175B, 530B, 1T (s = 2048, t = 8)
GPT_CASES = [
    (2048, 4, 6144, 64, 8),
    (2048, 1, 12288, 96, 8),
    (2048, 1, 20480, 128, 8),
    (2048, 1, 25600, 160, 8),
    (2048, 1, 4096, 32, 1),
]


@pytest.mark.parametrize("case", GPT_CASES)
@pytest.mark.parametrize("sp", [False, True])
@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
def test_korthikanti_gpt_layer(case, sp, recompute):
    s, b, h, a, t = case
    assert gpt_layer_bytes(s, b, h, a, t, sp=sp, recompute=recompute) == pytest.approx(
        _paper(s, b, h, a, t, sp, recompute), rel=1e-12
    )


def test_korthikanti_175b_headline():
    # the paper: 175B at s=2048, b=1, t=8 keeps sbh(34/t + 5as/(ht)) without recompute and SP+selective cuts it
    # to 34sbh/t, a 5x smaller footprint than no-SP no-recompute for this model (Figure 7's ~5x)
    none = gpt_layer_bytes(2048, 1, 12288, 96, 8, sp=False, recompute="none")
    best = gpt_layer_bytes(2048, 1, 12288, 96, 8, sp=True, recompute="selective")
    assert 4.5 < none / best < 5.5


def test_activation_knobs_move_memory():
    base = _est(L8, 8, TrainingOptions(seq_len=8192))
    full = _est(L8, 8, TrainingOptions(seq_len=8192, recompute="full"))
    unfused = _est(L8, 8, TrainingOptions(seq_len=8192, attention="unfused"))
    mb2 = _est(L8, 8, TrainingOptions(seq_len=8192, micro_batch_size=2))
    assert full.worst.activation_total < base.worst.activation_total / 5
    assert unfused.worst.activation_total > base.worst.activation_total
    assert mb2.worst.activation_total == pytest.approx(2 * base.worst.activation_total, rel=0.01)
    cp2 = _est(L8, 8, TrainingOptions(seq_len=8192), cp=2)
    assert cp2.worst.activations["attention"] == pytest.approx(base.worst.activations["attention"] / 2)
    pp4 = _est(L8, 8, TrainingOptions(seq_len=8192, num_microbatches=8), pp=4)
    first, last = pp4.ranks[0], pp4.ranks[-1]
    assert first.activations["norms"] == pytest.approx(4 * last.activations["norms"])  # 4 vs 1 in flight, 8 layers each
    assert "logits" in last.activations and "logits" not in first.activations


def test_fits_verdict_and_gpu_memory():
    small = _est(L8, 8, TrainingOptions(gpu_memory_gib=141))
    assert small.fits
    big = _est(from_hf_config("Llama-3.1-70B"), 1, TrainingOptions(gpu_memory_gib=80))
    assert not big.fits and big.to_dict()["fits"] is False


def test_validation_errors():
    with pytest.raises(MliteError, match="precision-aware"):
        TrainingOptions(exp_avg_dtype="bf16")
    TrainingOptions(main_grads_dtype="bf16")  # Megatron-Core's grad_reduce_in_fp32=False runs without PAO
    with pytest.raises(MliteError, match="distributed optimizer"):
        TrainingOptions(use_precision_aware_optimizer=True, use_distributed_optimizer=False)
    with pytest.raises(MliteError, match="offload_fraction"):
        TrainingOptions(offload_fraction=1.5)
    with pytest.raises(MliteError, match="invalid mesh"):
        estimate(L8, resolve(L8, 8, ParallelConfig(tp=3)), TrainingOptions())


def test_sweep_and_mesh_table():
    df = sweep(L8, ngpu=8, option="offload_fraction", values=[0.0, 0.25, 0.5, 1.0])
    assert list(df["offload_fraction"]) == [0.0, 0.25, 0.5, 1.0]
    assert df["optimizer"].is_monotonic_decreasing and df["host_per_gpu"].is_monotonic_increasing
    tab = mesh_table(Q30, 16, TrainingOptions(gpu_memory_gib=80))
    flags = [m.fits for m in tab]
    assert flags == sorted(flags, reverse=True) and "total_bytes" in tab[0].to_dict()
    plans = [m.plan for m in tab[:3]]
    assert len(sweep(Q30, meshes=plans)) == 3


def test_cli_json_contract():
    res = run_cli(
        "memory", "Llama-3.1-8B", "--ngpu", "8", "--pao", "--grad-dtype", "bf16", "--gpu-mem", "H200", "--json"
    )
    assert res.rc == 0, res.err
    doc = res.json()
    assert set(doc["per_gpu"]) == {"params", "grads", "optimizer", "activations", "other", "total"}
    assert set(doc["optimizer_detail"]) == {"master", "exp_avg", "exp_avg_sq"}
    assert set(doc["host"]) == {"per_gpu", "per_node"}
    for k in ("bytes_per_param", "local_params", "stage", "fits", "gpu_mem"):
        assert k in doc
    assert all(isinstance(v, int) for v in doc["per_gpu"].values())
    assert doc["bytes_per_param"] == 4 + 10 / 8 and doc["gpu_mem"] == 141 * GIB
    assert doc["per_gpu"]["total"] == sum(v for k, v in doc["per_gpu"].items() if k != "total")
    nofit = run_cli("memory", "Llama-3.1-70B", "--ngpu", "1", "--json")
    assert nofit.rc == 1 and nofit.json()["fits"] is False


def test_cli_bad_usage():
    assert_one_line_error(run_cli("memory", "Llama-3.1-8B", "--ngpu", "8", "--moment-dtype", "bf16"), "--pao")
    assert_one_line_error(run_cli("memory", "Llama-3.1-8B", "--ngpu", "8", "--gpu-mem", "lots"), "--gpu-mem")
    assert_one_line_error(
        run_cli("memory", "Llama-3.1-8B", "--ngpu", "8", "--offload-fraction", "2"), "offload_fraction"
    )


@pytest.mark.parametrize("value", ["nan", "inf", "0", "-1"])
def test_gpu_mem_must_be_finite_and_positive(value):
    """A device memory that is not a finite positive number is refused at the flag (nan and inf used to reach the
    estimate and end in a traceback), and by TrainingOptions itself."""
    assert_one_line_error(run_cli("memory", "tiny-moe", "--ngpu", "2", "--gpu-mem", value), f"--gpu-mem '{value}'")
    with pytest.raises(MliteError, match="gpu_memory_gib must be a finite positive number"):
        TrainingOptions(gpu_memory_gib=float(value))


def test_bf16_grads_without_pao_are_megatron_cores_bytes():
    """``--grad-dtype bf16`` without ``--pao`` is Megatron-Core's ``grad_reduce_in_fp32=False``: a bf16 grad buffer
    (2 B per local parameter) and, after the step, the optimizer's fp32 copies of its grad shard
    (``shard_main_param.grad = shard_model_grad.float()``: 4 B per shard parameter) next to fp32 master, m, v. The
    copies are in ``static`` and ``step_grads``, not at the forward/backward peak, so not in ``per_gpu``'s grads."""
    n = L8.total
    res = run_cli("memory", "Llama-3.1-8B", "--ngpu", "8", "--grad-dtype", "bf16", "--json")
    assert res.rc == 0, res.err
    doc = res.json()
    assert doc["per_gpu"]["params"] == 2 * n
    assert doc["per_gpu"]["grads"] == 2 * n
    assert doc["step_grads"] == round(4 * n / 8)
    assert doc["per_gpu"]["optimizer"] == round(12 * n / 8)
    assert doc["bytes_per_param"] == 2 + 2 + 12 / 8
    persistent = sum(doc["persistent_detail"].values())
    assert doc["static"] == round(2 * n + 2 * n + 4 * n / 8 + 12 * n / 8 + persistent)
    fp32 = run_cli("memory", "Llama-3.1-8B", "--ngpu", "8", "--json").json()
    assert fp32["static"] - doc["static"] == round(4 * n - 2 * n - 4 * n / 8)
    text = run_cli("memory", "Llama-3.1-8B", "--ngpu", "8", "--grad-dtype", "bf16").out
    assert f"+ {4 * n / 8 / GIB:.2f} GiB fp32 main-grad copies" in text and "Megatron-Core's optimizer" in text
    # the copies exist from the step to the next zero_grad: not during forward/backward
    e = _est(L8, 8, TrainingOptions(main_grads_dtype="bf16", seq_len=8192))
    w = e.worst
    assert w.step_grads == 4 * n / 8 and w.peak < w.static + w.activation_total
    nodist = _est(L8, 1, TrainingOptions(main_grads_dtype="bf16", use_distributed_optimizer=False)).worst
    assert nodist.grads + nodist.step_grads == 6 * n
    pao = _est(L8, 8, TrainingOptions(main_grads_dtype="bf16", use_precision_aware_optimizer=True)).worst
    assert pao.step_grads == 0  # PAO hands the bf16 shard to the optimizer as decoupled_grad


def test_bf16_grads_without_pao_in_the_lite_runtime_make_no_fp32_copies():
    """The lite runtime's dist_opt reads the bf16 buffer and widens it chunk by chunk: no step copies there, and the
    text says which runtime each figure is for."""
    n = L8.total
    lite = run_cli("memory", "Llama-3.1-8B", "--ngpu", "1", "--grad-dtype", "bf16", "--activation-model", "lite")
    assert "no fp32 copies" in lite.out and "main-grad copies from the step" not in lite.out
    doc = run_cli(
        "memory", "Llama-3.1-8B", "--ngpu", "1", "--grad-dtype", "bf16", "--activation-model", "lite", "--json"
    ).json()
    assert doc["step_grads"] == 0 and doc["per_gpu"]["grads"] == 2 * n
    assert doc["static"] == round(2 * n + 2 * n + 12 * n + sum(doc["persistent_detail"].values()))
    assert state_bytes(TrainingOptions(main_grads_dtype="bf16", activation_model="lite")).step_grad_copy == 0
    assert state_bytes(TrainingOptions(main_grads_dtype="bf16")).step_grad_copy == 4


def test_bf16_grads_with_fsdp2_are_refused_as_the_lite_runtime_refuses_them():
    from mlite.errors import MliteError
    from mlite.runtime.config import OptimizerConfig, check_backend

    res = run_cli("memory", "Llama-3.1-8B", "--ngpu", "8", "--optimizer", "fsdp2", "--grad-dtype", "bf16")
    assert_one_line_error(res, "main_grads_dtype: bf16 is dist_opt's gradient buffer")
    with pytest.raises(MliteError) as runtime:  # the lite runtime's own check says the same line
        check_backend("fsdp2", OptimizerConfig(main_grads_dtype="bf16"))
    assert str(runtime.value) in res.err


@pytest.mark.parametrize(
    "extra",
    [(), ("--grad-dtype", "bf16"), ("--grad-dtype", "bf16", "--no-distributed-optimizer"), ("--optimizer", "fsdp2")],
    ids=["fp32", "bf16", "bf16_nodist", "fsdp2"],
)
def test_per_gpu_adds_up_to_the_total_that_fits_compares(extra):
    """``per_gpu`` is the peak's composition: its parts add up to ``total`` = peak + other (what ``fits`` and the
    text's verdict line compare), none negative, also when the optimizer step is the peak (no distributed optimizer)
    or the step's fp32 grad copies are in ``static``."""
    res = run_cli("memory", "Llama-3.1-8B", "--ngpu", "8", *extra, "--gpu-mem", "H200", "--json")
    doc = res.json()
    pg = doc["per_gpu"]
    assert pg["total"] == sum(v for k, v in pg.items() if k != "total")
    assert min(pg.values()) >= 0
    assert abs(pg["total"] - doc["peak"] - sum(doc["other_detail"].values())) <= 1
    assert abs(doc["phases"]["training"]["gpu"] - pg["total"]) <= 1
    assert (res.rc == 0) == (pg["total"] <= doc["usable"]) == doc["fits"]


def test_unknown_recompute_module_is_refused_naming_it():
    assert_one_line_error(
        run_cli("memory", "Qwen3-8B", "--ngpu", "8", "--recompute", "selective", "--recompute-modules", "mlp,bogus"),
        "'bogus' is not a module name",
    )
