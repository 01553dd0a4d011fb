"""FP8 weight training profiles (``--precision``) and the rollout-TP block rule.

Oracles: the tensor shapes come from transformers on the meta device (the kit's inventory is held to them), and
the expected bytes are computed here from those tensors with this file's own reading of the sources (which
tensors are GEMM weights, which dimension TP splits, the scale formulas), not from the kit's helpers. Every
combination rule refuses through the CLI with exit 2 and one line naming the rule and its source.
"""

from __future__ import annotations

import json
import math

import pytest
from conftest import REPO, assert_one_line_error, run_cli

from mlite.errors import MliteError
from mlite.memory import estimate
from mlite.memory.rl_options import RolloutOptions
from mlite.mesh import ParallelConfig, resolve
from mlite.models import from_hf_config
from mlite.models.hf_meta import ROUTER_BIAS_BUFFERS, meta_model
from mlite.models.quantized import block_violations, check_rollout_tp, is_quantized
from mlite.options import TrainingOptions

TINY = ("tiny-deepseek-v4", "tiny-moe", "tiny-dense", "tiny-hybrid", "tiny-qwen2", "tiny-mixtral", "tiny-llama")
"""Models whose native inventory is held to transformers' tensors here."""

# ---------------------------------------------------------------------------------------------- the oracle
BF16_NAMES = ("embed_tokens", "lm_head", "norm", "mlp.gate.weight", "_hc.", "hc_head", "sinks", "position_bias")
"""Tensors that stay BF16 by the fork's contract (embedding, LM head, norms, router; and what is no GEMM weight:
hyper-connection mixers, attention sinks, position biases), read off transformers' names."""
ROW_PARALLEL = ("o_proj", "down_proj", "o_b_proj", "out_proj")
"""Weights whose input TP splits (Megatron-Core / vLLM RowParallelLinear); other split weights: the output."""
REPLICATED = ("q_a_proj", "kv_proj", "compressor.", "indexer.", "kv_a_proj_with_mqa", "shared_expert_gate")
"""Weights kept whole on every TP rank (MLA / DeepSeek-V4 down-projections, compressors, indexers, gates)."""


def _hf_tensors(name: str) -> dict:
    cfg = json.loads((REPO / "data" / "models" / f"{name}.json").read_text())
    model, _ = meta_model(cfg)
    out = {n: tuple(p.shape) for n, p in model.named_parameters()}
    # router expert biases: transformers' buffers, checkpoint parameters (the kit counts them, as test_models does)
    out.update({n: tuple(b.shape) for n, b in model.named_buffers() if n.endswith(ROUTER_BIAS_BUFFERS)})
    return out


def _gemm(n: str, shape) -> bool:
    return (
        len(shape) >= 2
        and n.endswith(("weight", "gate_up_proj", "down_proj"))
        and "conv1d" not in n
        and not any(b in n for b in BF16_NAMES)
    )


def _oracle_bytes(name: str, weights: str, *, tp=1, ep=1, d_dense=1, d_expert=1) -> float:
    """Parameter bytes of one rank: FP8 data + scales + the columnwise copy (data + its scales) per GEMM matrix,
    2 bytes for the rest; split by TP / EP as the sources split them, sharded over d."""
    total = 0.0
    for n, shape in _hf_tensors(name).items():
        expert = ".experts." in n
        numel = math.prod(shape)
        d = d_expert if expert else d_dense
        if not _gemm(n, shape):  # BF16, held whole (TP > 1: the caller accounts for the vocabulary-parallel ones)
            total += 2 * numel / d
            continue
        count, r, c = (1, *shape) if len(shape) == 2 else shape
        if expert:
            count /= ep
        elif tp > 1 and not any(x in n for x in REPLICATED):
            if any(n.endswith(f"{x}.weight") for x in ROW_PARALLEL):
                c //= tp
            else:
                r //= tp
        if weights == "blockwise":
            row = col = math.ceil(r / 128) * math.ceil(c / 128) * 4
        else:  # mxfp8: one E8M0 byte per 32 values of a row; the columnwise copy per 32 values of a column
            row, col = r * math.ceil(c / 32), math.ceil(r / 32) * c
        total += count * (2 * r * c + row + col) / d
    return total


@pytest.mark.parametrize("name", TINY)
def test_the_inventory_shapes_are_transformers_tensors(name):
    """Every tensor the inventory gives a shape is the transformers tensor of the same name and shape; every
    transformers GEMM weight of the layers has one (the quantized set is complete)."""
    hf = _hf_tensors(name)
    spec = from_hf_config(name)
    shaped = set()
    for layer in spec.main_layers:
        for g in layer.groups:
            if g.shape:
                full = f"model.layers.{layer.index}.{g.name}"
                assert hf.get(full) == g.shape, (full, hf.get(full), g.shape)
                shaped.add(full)
    gemm = {n for n, s in hf.items() if ".layers." in n and _gemm(n, s)}
    assert gemm <= shaped, sorted(gemm - shaped)[:5]
    quantized = {f"model.layers.{x.index}.{g.name}" for x in spec.main_layers for g in x.groups if is_quantized(g)}
    assert quantized == gemm


@pytest.mark.parametrize("name", ("tiny-deepseek-v4", "tiny-moe", "tiny-dense", "tiny-hybrid"))
@pytest.mark.parametrize(
    "precision, weights", [("hopper_blockwise_fp8_weight", "blockwise"), ("mxfp8_fp8_weight", "mxfp8")]
)
def test_fp8_parameter_bytes_equal_the_formula_on_transformers_shapes(name, precision, weights):
    """One GPU, then 4 GPUs of fsdp2 (everything sharded over d = 4): params = FP8 data + block scales + the
    columnwise copy of the GEMM weights, 2 bytes for the rest, exactly."""
    spec = from_hf_config(name)
    for ngpu in (1, 4):
        o = TrainingOptions(optimizer="fsdp2", precision=precision, gpu="B200", seq_len=256)
        est = estimate(spec, ParallelConfig(), o, ngpu=ngpu)
        assert est.worst.params == pytest.approx(_oracle_bytes(name, weights, d_dense=ngpu, d_expert=ngpu), rel=1e-12)
        detail = est.to_dict()["params_detail"]
        assert sum(detail.values()) == pytest.approx(est.worst.params, abs=4)
        assert detail["fp8_scales"] > 0 and detail["fp8_columnwise"] > detail["fp8_data"]


def test_tensor_and_expert_parallel_split_the_fp8_weights_as_the_sources_do():
    """TP 2 (column weights by their output, row weights by their input) and EP 2 (whole experts per rank)."""
    o = TrainingOptions(optimizer="fsdp2", precision="hopper_blockwise_fp8_weight", seq_len=256)
    est = estimate(from_hf_config("tiny-dense"), ParallelConfig(tp=2), o, ngpu=2)
    hf = _hf_tensors("tiny-dense")
    # the BF16 rest: norms replicated, embedding and LM head vocabulary-parallel (padded vocabulary 512 / 2)
    want = (
        _oracle_bytes("tiny-dense", "blockwise", tp=2)
        - sum(2 * math.prod(s) for n, s in hf.items() if not _gemm(n, s))
        + 2 * (sum(math.prod(s) for n, s in hf.items() if not _gemm(n, s) and "norm" in n) + 2 * 512 * 64 / 2)
    )
    assert est.worst.params == pytest.approx(want, rel=1e-12)
    o = TrainingOptions(optimizer="fsdp2", precision="hopper_blockwise_fp8_weight", seq_len=256)
    est = estimate(from_hf_config("tiny-moe"), ParallelConfig(ep=2), o, ngpu=2)
    assert est.worst.params == pytest.approx(_oracle_bytes("tiny-moe", "blockwise", ep=2, d_dense=2), rel=1e-12)


def test_the_profiles_keep_fp32_main_grads_master_and_moments():
    """The contract's FP32 main gradient (fsdp2's grads are 4 bytes, not the BF16 parameter's 2), master and
    moments; the BF16-weight profile keeps BF16 parameters."""
    spec = from_hf_config("tiny-dense")
    base = estimate(spec, ParallelConfig(), TrainingOptions(optimizer="fsdp2", seq_len=256), ngpu=1).worst
    bw = estimate(
        spec,
        ParallelConfig(),
        TrainingOptions(optimizer="fsdp2", precision="hopper_blockwise_bf16_weight", seq_len=256),
        ngpu=1,
    ).worst
    n = base.local_params
    assert base.grads == 2 * n and bw.grads == 4 * n and bw.params == base.params == 2 * n
    assert bw.master == bw.exp_avg == bw.exp_avg_sq == 4 * n


# ---------------------------------------------------------------------------------------------- the rules
MEM = ("memory", "Qwen3-8B", "--ngpu", "8")


@pytest.mark.parametrize(
    "words, needles",
    [
        (
            ("--precision", "hopper_blockwise_fp8_weight"),  # dist_opt is the default backend
            ("precision: hopper_blockwise_fp8_weight", "require_optimizer_supports_precision", "@ 2e50cb4a", "fsdp2"),
        ),
        (
            ("--precision", "mxfp8_fp8_weight", "--optimizer", "dist_opt", "--gpu", "B200"),
            ("precision: mxfp8_fp8_weight", "require_optimizer_supports_precision"),
        ),
        (
            ("--precision", "hopper_blockwise_fp8_weight", "--optimizer", "fsdp2", "--cp", "2"),
            ("cp: 2", "hopper-blockwise-fp8-contract.md @ 25f24492", "feature-composability.md @ 3565ae5c", "--cp 1"),
        ),
        (
            ("--precision", "hopper_blockwise_bf16_weight", "--pp", "2"),
            ("pp: 2", "hopper-blockwise-fp8-contract.md @ 25f24492", "--pp 1"),
        ),
        (
            ("--precision", "mxfp8_fp8_weight", "--optimizer", "fsdp2", "--gpu-mem", "H100"),
            ("precision: mxfp8_fp8_weight needs SM100", "H100 is SM90", "fp8-training-design.md @ 3412bffa"),
        ),
        (
            ("--precision", "mxfp8_fp8_weight", "--optimizer", "fsdp2", "--gpu-mem", "141"),  # 141 GiB: an H200
            ("H200 is SM90",),
        ),
        (
            ("--precision", "hopper_blockwise_fp8_weight", "--optimizer", "fsdp2", "--gpu-mem", "A100"),
            ("needs SM90", "A100 is SM80", "hopper-blockwise-fp8-contract.md"),
        ),
        (
            ("--precision", "hopper_blockwise_bf16_weight", "--gpu", "MI300X", "--gpu-mem", "192"),
            ("MI300X is not an NVIDIA GPU",),
        ),
        (
            ("--precision", "hopper_blockwise_bf16_weight", "--pao"),
            ("precision: hopper_blockwise_bf16_weight", "FP32 master", "drop --pao"),
        ),
        (
            ("--precision", "hopper_blockwise_bf16_weight", "--grad-dtype", "bf16"),
            ("drop --grad-dtype bf16", "hopper-blockwise-fp8-contract.md @ 25f24492"),
        ),
        (
            ("--precision", "hopper_blockwise_fp8_weight", "--optimizer", "fsdp2", "--param-dtype", "fp32"),
            ("drop --param-dtype fp32",),
        ),
    ],
)
def test_every_precision_rule_refuses_through_the_cli(words, needles):
    assert_one_line_error(run_cli(*MEM, *words), *needles)


def test_the_rules_accept_what_the_fork_runs():
    """fsdp2 + FP8 weights on Hopper at cp = pp = 1, the BF16-weight profile under dist_opt, MXFP8 on Blackwell,
    an unknown GPU (80 GiB: H100 or A100) unchecked."""
    res = run_cli(*MEM, "--precision", "hopper_blockwise_fp8_weight", "--optimizer", "fsdp2", "--gpu-mem", "H100",
                  "--json")  # fmt: skip
    assert res.rc in (0, 1), res.err
    doc = res.json()
    assert doc["precision"] == "hopper_blockwise_fp8_weight" and doc["params_detail"]["fp8_data"] > 0
    TrainingOptions(precision="hopper_blockwise_bf16_weight")
    TrainingOptions(optimizer="fsdp2", precision="mxfp8_fp8_weight", gpu="GB200")
    TrainingOptions(optimizer="fsdp2", precision="mxfp8_fp8_weight")  # GPU unknown
    assert TrainingOptions(gpu_memory_gib=141.0).gpu == "H200" and TrainingOptions().gpu == ""


def test_export_refuses_the_mesh_rule_and_writes_nothing(tmp_path):
    out = tmp_path / "x"
    res = run_cli("export", "Qwen3-8B", "--nodes", "1", "--target", "verl-mlite-grpo", "--optimizer", "fsdp2",
                  "--precision", "hopper_blockwise_fp8_weight", "--cp", "2", "--out", out)  # fmt: skip
    assert_one_line_error(res, "cp: 2", "hopper-blockwise-fp8-contract.md")
    assert not out.exists()


def test_the_profile_reaches_the_mlite_launcher_and_reads_back(tmp_path):
    from mlite.export import ExportPlan
    from mlite.export.importer import import_launcher
    from mlite.export.writer import render

    o = TrainingOptions(optimizer="fsdp2", precision="hopper_blockwise_fp8_weight")
    plan = ExportPlan(model="Qwen3-8B", target="verl-mlite-grpo", parallel=ParallelConfig(), options=o, nodes=1)
    res = render(plan)
    text = res.files[res.launcher]
    assert "+actor_rollout_ref.actor.engine.precision=hopper_blockwise_fp8_weight" in text
    assert import_launcher("l", text=text).training_options().precision == "hopper_blockwise_fp8_weight"


# ---------------------------------------------------------------------------------------------- rollout TP
def test_deepseek_v4_rollout_tp_16_is_refused_with_the_block_rule_and_tp_8_suggested():
    res = run_cli("rl-memory", "DeepSeek-V4-Flash", "--ngpu", "64", "--ep", "8", "--rollout", "vllm",
                  "--rollout-tp", "16", "--prompt-len", "512", "--response-len", "512", "--rollout-n", "4",
                  "--rollout-batch", "64")  # fmt: skip
    assert_one_line_error(
        res,
        "--rollout-tp 16: block rule",
        "o_a_proj.weight keeps 0 of its 8192 output rows per rank",
        "128x128",
        "vllm-project/vllm#17569",
        "ds4_vllm_tp16_rollout_memory.md @ 017aa887",
        "use --rollout-tp 8",
    )


def test_deepseek_v4_keeps_whole_blocks_at_tp_1_2_4_8_only():
    spec = from_hf_config("DeepSeek-V4-Flash")
    for tp in (1, 2, 4, 8):
        check_rollout_tp(spec, tp)
    for tp in (16, 32, 64):
        with pytest.raises(MliteError, match="block rule"):
            check_rollout_tp(spec, tp)
    # vLLM's n_local_groups = o_groups // tp whole groups of o_lora_rank rows: 0 at TP 16
    assert next((v.name, v.per_rank) for v in block_violations(spec, 16, 128)) == ("self_attn.o_a_proj.weight", 0)
    # experts whole under vLLM expert parallelism: still refused by o_a_proj at 32, with 8 suggested
    with pytest.raises(MliteError, match=r"block rule.*use --rollout-tp 8$"):
        check_rollout_tp(spec, 32, expert_parallel=True)


def test_the_o_groups_rule_when_no_block_is_cut():
    """A DeepSeek-V4 checkpoint without block quantization (--rollout-weight-block 0) still needs o_groups
    divisible by the rollout TP (the mlite preflight)."""
    spec = from_hf_config("DeepSeek-V4-Flash")
    with pytest.raises(MliteError, match=r"--rollout-tp 16: o_groups rule: .*o_groups 8 .*use --rollout-tp 8$"):
        check_rollout_tp(spec, 16, 0)
    check_rollout_tp(spec, 8, 0)


def test_the_block_rule_follows_vllms_checks_on_a_block_fp8_moe():
    """Qwen3-235B-A22B's FP8 checkpoint (128x128 blocks): experts of width 1536 give 192 per rank at TP 8, not a
    multiple of 128 (the public ``output_size of gate's and up's weight = 192`` reports); TP 4 (384) loads, and
    TP 8 with expert parallelism (experts whole) does."""
    spec = from_hf_config("Qwen3-235B-A22B")
    assert check_rollout_tp(spec, 8) is None  # no quantization_config in the bf16 config: nothing to check
    with pytest.raises(MliteError, match=r"experts.gate_up_proj keeps 192 of its 1536 output rows .*--rollout-tp 4"):
        check_rollout_tp(spec, 8, 128)
    check_rollout_tp(spec, 4, 128)
    check_rollout_tp(spec, 8, 128, expert_parallel=True)
    bad = {v.name: v for v in block_violations(spec, 8, 128)}
    assert bad["mlp.experts.down_proj"].dim == "input" and bad["mlp.experts.gate_up_proj"].dim == "output"
    # the checkpoint's own quantization_config is read
    quantized = dict(spec.config, quantization_config={"quant_method": "fp8", "weight_block_size": [128, 128]})
    with pytest.raises(MliteError, match="block rule"):
        check_rollout_tp(from_hf_config(quantized, name="Qwen3-235B-A22B-FP8"), 8)


def test_export_and_import_launcher_apply_the_rollout_rule(tmp_path):
    out = tmp_path / "x"
    res = run_cli("export", "DeepSeek-V4-Flash", "--nodes", "8", "--ep", "8", "--target", "verl-mlite-grpo",
                  "--rollout-tp", "16", "--out", out)  # fmt: skip
    assert_one_line_error(res, "--rollout-tp 16: block rule", "use --rollout-tp 8")
    assert not out.exists()
    res = run_cli("export", "DeepSeek-V4-Flash", "--nodes", "8", "--ep", "8", "--target", "verl-mlite-grpo",
                  "--rollout-tp", "8", "--out", out)  # fmt: skip
    assert res.rc == 0, res.err
    launcher = next(out.glob("*.sh"))
    assert "ROLLOUT_TP=${ROLLOUT_TP:-8}" in launcher.read_text()
    for tp, valid in ((16, False), (8, True)):
        res = run_cli("import-launcher", launcher, "--env", f"ROLLOUT_TP={tp}", "--json")
        doc = res.json()
        assert doc["valid"] and doc["rollout"]["tensor_model_parallel_size"] == tp
        assert res.rc == 0 and bool(doc["rollout_errors"]) is not valid  # the exit status is the mesh's verdict
        if not valid:
            (err,) = doc["rollout_errors"]
            assert "actor_rollout_ref.rollout.tensor_model_parallel_size 16: block rule" in err
            assert "DeepSeek-V4's block-FP8 rollout checkpoint" in err


def test_the_rollout_weight_block_is_a_rollout_option():
    assert RolloutOptions().weight_block_size is None
    with pytest.raises(MliteError, match="weight_block_size"):
        RolloutOptions(weight_block_size=-1)
    spec = from_hf_config("DeepSeek-V4-Flash")
    plan = resolve(spec, 64, ParallelConfig(ep=8), seq_len=1024, auto_uneven=True)
    assert plan.valid


def test_the_mesh_table_leaves_out_the_meshes_a_profile_refuses():
    """The planner's table (mlite.memory.mesh_table, behind the mesh widget and ``mlite time``'s ranking) lists
    only the cp = pp = 1 meshes for a Hopper profile, and all of them for bf16."""
    from mlite.memory import mesh_table

    spec = from_hf_config("Qwen3-8B")
    every = {repr(m.plan.parallel) for m in mesh_table(spec, 8, TrainingOptions())}
    hopper = mesh_table(spec, 8, TrainingOptions(precision="hopper_blockwise_bf16_weight"))
    assert {(m.plan.parallel.cp, m.plan.parallel.pp) for m in hopper} == {(1, 1)}
    kept = {
        repr(m.plan.parallel)
        for m in mesh_table(spec, 8, TrainingOptions())
        if m.plan.parallel.cp == 1 == m.plan.parallel.pp
    }
    assert {repr(m.plan.parallel) for m in hopper} == kept and len(kept) < len(every)


def test_verls_deepseek_v3_launcher_is_told_to_drop_the_fp8_quantization_config():
    """verl's DeepSeek-V3 671B launcher runs rollout TP 32 and says to remove ``quantization_config`` from the
    config: with the hub config's 128x128 blocks TP 32 cuts the dense MLP (18432 / 32 = 576, not a multiple of 128),
    which import-launcher reports as a rollout error (the actor's mesh verdict stays valid)."""
    from mlite.export.importer import import_launcher

    path = REPO / "tests/data/launchers/verl/main/examples/grpo_trainer/run_deepseek_v3_671b_megatron.sh"
    doc = import_launcher(path).to_dict()
    assert doc["valid"] and doc["rollout"]["tensor_model_parallel_size"] == 32
    (err,) = doc["rollout_errors"]
    assert "mlp.gate_proj.weight keeps 576 of its 18432 output rows" in err and "quantization_config" in err
    spec = from_hf_config("DeepSeek-V3")
    check_rollout_tp(spec, 32, 0)  # the launcher's BF16 rollout checkpoint: no block to keep


def test_a_model_without_tensor_shapes_is_refused_fp8_weights():
    """Hy3 is read on transformers' meta device (no native inventory, no shapes): FP8 weights are refused in one
    line rather than counted as BF16; the BF16-weight profile needs no shapes."""
    assert from_hf_config("Hy3").source == "transformers-meta"
    res = run_cli("memory", "Hy3", "--ngpu", "64", "--ep", "8", "--optimizer", "fsdp2", "--precision",
                  "hopper_blockwise_fp8_weight")  # fmt: skip
    assert_one_line_error(res, "precision: hopper_blockwise_fp8_weight needs the tensor shapes", "meta device")


def test_the_memory_view_sets_the_precision_profile_and_shows_its_refusal():
    """The memory view's precision picker reaches the estimate (the same bytes as the estimator's), and a profile the
    backend refuses shows the rule inline, in one line, with no estimate."""
    from widgets.memory_view import MemoryView
    from widgets.planner import MeshPlanner

    planner = MeshPlanner("Qwen3-8B", ngpu=4)
    view = MemoryView(planner, optimizer="fsdp2", gpu="H100")
    view.set(precision="hopper_blockwise_fp8_weight")
    o = view.options()
    assert o.precision == "hopper_blockwise_fp8_weight"
    spec = from_hf_config("Qwen3-8B")
    want = estimate(spec, resolve(spec, 4, ParallelConfig(), seq_len=o.seq_len), o).to_dict()
    got = view.estimate.to_dict()
    assert got["precision"] == want["precision"] and got["params_detail"] == want["params_detail"]
    assert got["params_detail"]["fp8_data"] > 0
    assert "--precision hopper_blockwise_fp8_weight" in view.command()
    view.controls["optimizer"].value = "dist_opt"  # FP8 weights: fsdp2 only
    msg = view.errors.message
    assert view.estimate is None or view._results.layout.display == "none"
    assert "fsdp2" in msg and "\n" not in msg and "Traceback" not in msg
