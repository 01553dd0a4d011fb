"""RL memory by phase (``mlite.memory.rl``, ``mlite rl-memory``): KV bytes per token from the published configs,
the engines' start-up rules, offload flags and sleep levels moving bytes between GPU and host, the CLI contract,
and the published verl runs (predicted next to logged)."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest
from conftest import REPO, assert_one_line_error, run_cli

from mlite.errors import MliteError
from mlite.memory import GIB, TrainingOptions, estimate
from mlite.memory.rl import PHASES, rl_estimate
from mlite.memory.rl_engine import profile_activations, rollout_weights
from mlite.memory.rl_kv import kv_layout
from mlite.memory.rl_options import RolloutOptions
from mlite.mesh import ParallelConfig, resolve
from mlite.models import from_hf_config

MODELS = REPO / "data" / "models"


def _cfg(name):
    d = json.loads((MODELS / f"{name}.json").read_text())
    return d.get("text_config", d)


# ------------------------------------------------------------------------------------------------ KV per token
def _gqa_oracle(name, tp):
    """2 x max(1, kv_heads // tp) x head_dim x 2 bytes x full-attention layers, read from the raw config.json."""
    c = _cfg(name)
    head_dim = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
    types = c.get("layer_types")
    full = sum(t == "full_attention" for t in types) if types else c["num_hidden_layers"]
    return 2 * max(1, c["num_key_value_heads"] // tp) * head_dim * 2 * full


@pytest.mark.parametrize(
    "name, tp, want",
    [
        ("Qwen3-8B", 1, 147456),
        ("Qwen3-8B", 2, 73728),
        ("Qwen3-8B", 16, 18432),  # 8 KV heads: replicated past TP 8
        ("Qwen3-30B-A3B", 1, 98304),
        ("Qwen3-30B-A3B", 8, 24576),
        ("Qwen3.5-35B-A3B", 1, 20480),
        ("Qwen3.5-35B-A3B", 2, 10240),  # 10 of 40 layers are full attention
    ],
)
def test_kv_bytes_per_token_gqa(name, tp, want):
    assert _gqa_oracle(name, tp) == want
    lay = kv_layout(from_hf_config(name), tp)
    assert lay.bytes_per_token == want
    assert lay.kind == "gqa"


def test_qwen35_linear_layers_keep_a_fixed_state_per_sequence():
    c = _cfg("Qwen3.5-35B-A3B")
    spec = from_hf_config("Qwen3.5-35B-A3B")
    lin = sum(t == "linear_attention" for t in c["layer_types"])
    assert lin == 30
    conv_dim = (
        2 * c["linear_num_key_heads"] * c["linear_key_head_dim"]
        + c["linear_num_value_heads"] * c["linear_value_head_dim"]
    )
    ssm = 4 if c["mamba_ssm_dtype"] == "float32" else 2
    for tp in (1, 2):
        per_layer = (conv_dim // tp) * (c["linear_conv_kernel_dim"] - 1) * 2 + (c["linear_num_value_heads"] // tp) * c[
            "linear_key_head_dim"
        ] * c["linear_value_head_dim"] * ssm
        lay = kv_layout(spec, tp)
        assert lay.state_bytes_per_seq == per_layer * lin
        assert lay.linear_layers == lin and lay.kv_layers == 10
        # a sequence costs its tokens plus the state, whatever its length
        assert lay.seq_bytes(1000) - lay.seq_bytes(0) == 1000 * lay.bytes_per_token


@pytest.mark.parametrize("tp", [1, 8, 16])
def test_kv_bytes_per_token_mla_latent(tp):
    c = _cfg("DeepSeek-V3")
    want = (c["kv_lora_rank"] + c["qk_rope_head_dim"]) * 2 * c["num_hidden_layers"]  # MTP layer not served
    assert want == 70272
    lay = kv_layout(from_hf_config("DeepSeek-V3"), tp)
    assert (lay.bytes_per_token, lay.kind, lay.kv_heads_per_gpu) == (want, "mla", 1)  # the same on every TP rank


def test_fp8_kv_halves_bytes_per_token():
    spec = from_hf_config("Qwen3-8B")
    assert kv_layout(spec, 2, kv_dtype="fp8").bytes_per_token * 2 == kv_layout(spec, 2).bytes_per_token


def test_unmodelled_attention_kind_is_named():
    with pytest.raises(MliteError, match=r"csa|hca"):
        kv_layout(from_hf_config("DeepSeek-V4-Flash"), 8)


# ------------------------------------------------------------------------------------------------ helpers
Q8 = from_hf_config("Qwen3-8B")
Q30 = from_hf_config("Qwen3-30B-A3B")


def _rl(spec=Q8, ngpu=8, mesh=None, train=None, **ro):
    o = train or TrainingOptions(seq_len=1536, gpu_memory_gib=141.0)
    plan = resolve(spec, ngpu, ParallelConfig(**(mesh or {})), seq_len=o.seq_len)
    base = {
        "prompt_length": 512,
        "response_length": 1024,
        "n": 8,
        "train_batch_size": 256,
        "max_model_len": 1536,
        "tensor_model_parallel_size": 2,
        "gpu_memory_utilization": 0.6,
    }
    base.update(ro)
    return rl_estimate(spec, plan, o, RolloutOptions(**base)), estimate(spec, plan, o, explain=False).worst


def _gpu(e, ph):
    return e.phases[ph].gpu_total


def _host(e, ph):
    return e.phases[ph].host_total


# ------------------------------------------------------------------------------------------------ engine rules
def test_vllm_share_is_a_fraction_of_total_memory_and_kv_is_what_is_left():
    e, _ = _rl()
    eng = e.engine
    device = 141 * GIB
    assert eng.share == pytest.approx(0.6 * device)
    assert eng.weights == pytest.approx((Q8.total + Q8.components["norms"]) * 2 / 2)  # norms on every rank
    assert eng.kv == pytest.approx(eng.share - eng.weights - profile_activations(Q8, e.rollout) - eng.overhead)
    kv = e.to_dict()["kv_cache"]
    assert kv["bytes_per_token"] == 73728
    assert kv["tokens"] == int(eng.kv // 73728)
    assert kv["max_concurrent_seqs"] == int(eng.kv // (73728 * 1536))
    # the awake engine in the rollout phase holds its whole share plus the CUDA graphs captured after it
    parts = e.phases["rollout"].gpu
    engine = sum(
        v
        for k, v in parts.items()
        if k in ("engine_weights", "kv_cache", "engine_activations", "engine_overhead", "cuda_graphs")
    )
    assert engine == pytest.approx(eng.share + eng.cuda_graphs)


def test_vllm_share_does_not_depend_on_what_the_actor_leaves_but_sglang_does():
    a, _ = _rl(name="vllm")
    b, _ = _rl(name="vllm", train=TrainingOptions(seq_len=1536, gpu_memory_gib=141.0, optimizer_offload=True))
    assert a.engine.share == b.engine.share and a.engine.kv == b.engine.kv
    sa, act = _rl(name="sglang")
    sb, act_b = _rl(name="sglang", train=TrainingOptions(seq_len=1536, gpu_memory_gib=141.0, optimizer_offload=True))
    # the engine starts before the first update: Adam's moments do not exist yet (mlite/memory/rl_lazy.py)
    start_a = act.idle_gpu - act.exp_avg - act.exp_avg_sq
    free_a = 141 * GIB - start_a - sa.phases["rollout"].gpu["ref_params"] - sum(act.other.values())
    assert sa.engine.free_at_start == pytest.approx(free_a)
    assert sa.engine.share == pytest.approx(0.6 * free_a)  # mem_fraction_static x free at start
    assert sa.engine.kv == pytest.approx(sa.engine.share - sa.engine.weights)  # weights + KV
    assert sb.engine.kv - sa.engine.kv == pytest.approx(0.6 * (start_a - act_b.idle_gpu))


def test_vllm_refuses_a_share_larger_than_what_is_free_at_rollout_start():
    o = TrainingOptions(seq_len=1536, gpu_memory_gib=80.0)
    e, _act = _rl(train=o, gpu_memory_utilization=0.9)
    assert not e.fits
    assert any("gpu_memory_utilization 0.9" in x and "free when the rollout starts" in x for x in e.errors)
    # offloading the actor and dropping the reference frees enough
    o2 = replace(o, param_offload=True, optimizer_offload=True, grad_offload=True)
    e2, act2 = _rl(train=o2, gpu_memory_utilization=0.9, ref="none")
    assert act2.idle_gpu == 0
    assert not any("free when the rollout starts" in x for x in e2.errors)


def test_engine_share_smaller_than_its_weights_is_an_error():
    e, _ = _rl(
        spec=Q30,
        tensor_model_parallel_size=1,
        gpu_memory_utilization=0.3,
        max_model_len=4096,
        train=TrainingOptions(
            seq_len=1536, gpu_memory_gib=80.0, param_offload=True, optimizer_offload=True, grad_offload=True
        ),
    )
    assert rollout_weights(Q30, e.rollout) > 0.3 * 80 * GIB
    assert any("no KV cache left" in x for x in e.errors)
    assert e.to_dict()["kv_cache"]["tokens"] == 0 and not e.fits


def test_kv_cache_smaller_than_one_max_model_len_request_is_an_error():
    # Qwen3-8B's own max_position_embeddings (40960 tokens = 2.8 GiB at TP 2) is verl's default max_model_len
    o = TrainingOptions(
        seq_len=1536, gpu_memory_gib=80.0, param_offload=True, optimizer_offload=True, grad_offload=True
    )
    need = 40960 * 73728
    ok, _ = _rl(train=o, max_model_len=None, gpu_memory_utilization=0.5)
    assert ok.engine.kv > need and not any("max_model_len" in x for x in ok.errors)
    util = (ok.engine.weights + profile_activations(Q8, ok.rollout) + ok.engine.overhead + need / 2) / (80 * GIB)
    bad, _ = _rl(train=o, max_model_len=None, gpu_memory_utilization=round(util, 4))
    assert 0 < bad.engine.kv < need
    assert any("max_model_len=40960" in x for x in bad.errors)


# ------------------------------------------------------------------------------------------------ offload flags
@pytest.mark.parametrize("flag, part", [("param_offload", "params"), ("optimizer_offload", "optimizer")])
def test_runtime_offload_moves_actor_state_from_gpu_to_host_outside_the_update(flag, part):
    o = TrainingOptions(seq_len=1536, gpu_memory_gib=141.0)
    a, act = _rl(train=o)
    b, _ = _rl(train=replace(o, **{flag: True}))
    moved = getattr(act, part)
    assert moved > 0
    # verl's offload_megatron_model_to_cpu (verl/utils/megatron_utils.py @ 1dda039b) also frees the DDP gradient
    # buffer (resize_(0), no host copy); eval-mode loads and the weight sync bring it back only for the update
    freed = act.grads if flag == "param_offload" else 0.0
    for ph in ("rollout", "ref"):
        assert _gpu(a, ph) - _gpu(b, ph) == pytest.approx(moved + freed)
    for ph in PHASES:
        assert _host(b, ph) - _host(a, ph) == pytest.approx(moved)
    assert _gpu(a, "actor_update") == pytest.approx(_gpu(b, "actor_update"))  # everything is loaded to train
    # the weights come back for the actor's own forward and for the sync (without their gradients); the optimizer
    # does not
    same = ("old_log_prob", "weight_sync") if flag == "param_offload" else ()
    for ph in same:
        assert _gpu(a, ph) - _gpu(b, ph) == pytest.approx(freed)
    if flag == "optimizer_offload":
        assert _gpu(a, "weight_sync") - _gpu(b, "weight_sync") == pytest.approx(moved)


def test_grad_offload_moves_the_dist_opt_grad_buffer():
    o = TrainingOptions(seq_len=1536, gpu_memory_gib=141.0)
    a, act = _rl(train=o)
    b, _ = _rl(train=replace(o, grad_offload=True))
    assert _gpu(a, "rollout") - _gpu(b, "rollout") == pytest.approx(act.grads)
    assert _host(b, "rollout") - _host(a, "rollout") == pytest.approx(act.grads)


def test_ref_offload_moves_reference_weights_to_host_except_in_its_own_phase():
    a, act = _rl()
    b, _ = _rl(ref_param_offload=True)
    for ph in ("rollout", "old_log_prob", "actor_update", "weight_sync"):
        assert _gpu(a, ph) - _gpu(b, ph) == pytest.approx(act.params)
    assert _gpu(a, "ref") == pytest.approx(_gpu(b, "ref"))
    assert _host(b, "ref") - _host(a, "ref") == pytest.approx(act.params)
    c, _ = _rl(ref="none")
    assert "ref" not in c.phases


# ------------------------------------------------------------------------------------------------ sleep levels
def test_vllm_sleep_level_1_moves_weights_to_host_level_2_frees_them():
    l1, _ = _rl(sleep_level=1)
    l2, _ = _rl(sleep_level=2)
    w = l1.engine.weights
    for ph in ("old_log_prob", "ref", "actor_update"):
        assert "kv_cache" not in l1.phases[ph].gpu and "engine_weights" not in l1.phases[ph].gpu
        assert _gpu(l1, ph) == pytest.approx(_gpu(l2, ph))
        assert _host(l1, ph) - _host(l2, ph) == pytest.approx(w)
    # back on the GPU for the sync and the next rollout
    for ph in ("rollout", "weight_sync"):
        assert _host(l1, ph) == pytest.approx(_host(l2, ph))
        assert l1.phases[ph].gpu["engine_weights"] == pytest.approx(w)
    assert "kv_cache" not in l1.phases["weight_sync"].gpu  # weights woken first, KV after the sync


def test_free_cache_engine_false_keeps_weights_and_kv_through_training():
    on, _ = _rl()
    off, _ = _rl(free_cache_engine=False)
    eng = on.engine
    held = eng.weights + eng.kv + eng.activations
    for ph in ("old_log_prob", "ref", "actor_update"):
        assert _gpu(off, ph) - _gpu(on, ph) == pytest.approx(held)
        assert off.phases[ph].gpu["kv_cache"] == pytest.approx(eng.kv)
    assert _gpu(off, "weight_sync") - _gpu(on, "weight_sync") == pytest.approx(eng.kv)
    assert _gpu(off, "rollout") == pytest.approx(_gpu(on, "rollout"))
    assert any("free_cache_engine=False" in w for w in off.warnings)


def test_verl_sleep_level_per_mode():
    assert RolloutOptions().resolved_sleep_level == 2
    assert RolloutOptions(mode="colocated").resolved_sleep_level == 1
    assert RolloutOptions(lora_as_adapter=True).resolved_sleep_level == 1
    assert RolloutOptions(mtp_rollout=True).resolved_sleep_level == 1
    assert RolloutOptions(mode="colocated", sleep_level=2).resolved_sleep_level == 2


def test_sglang_level_1_keeps_weights_on_the_gpu():
    l1, _ = _rl(name="sglang", sleep_level=1)
    l2, _ = _rl(name="sglang", sleep_level=2)
    assert _gpu(l1, "actor_update") - _gpu(l2, "actor_update") == pytest.approx(l1.engine.weights)
    assert _host(l1, "actor_update") == pytest.approx(_host(l2, "actor_update"))
    # verl's SGLang server releases weights and KV in colocated mode too; only a LoRA adapter keeps the weights
    col, _ = _rl(name="sglang", mode="colocated")
    assert "engine_weights" not in col.phases["actor_update"].gpu
    lora, _ = _rl(name="sglang", lora_as_adapter=True)
    assert lora.phases["actor_update"].gpu["engine_weights"] == pytest.approx(lora.engine.weights)


# ------------------------------------------------------------------------------------------------ verdicts
def test_peak_phase_and_host_per_node():
    e, _ = _rl(
        train=TrainingOptions(seq_len=1536, gpu_memory_gib=141.0, param_offload=True, optimizer_offload=True),
        host_mem_gib=64,
    )
    d = e.to_dict()
    assert d["peak_phase"] == max(d["phases"], key=lambda n: d["phases"][n]["gpu"])
    assert d["host_per_node"] == pytest.approx(8 * max(p["host_per_gpu"] for p in d["phases"].values()), abs=8)
    assert not d["fits"] and any("--host-mem 64 GiB" in x for x in d["errors"])
    assert rl_estimate(
        Q8, resolve(Q8, 8, ParallelConfig(), seq_len=1536), e.training, replace(e.rollout, host_mem_gib=4096)
    ).fits


def test_a_phase_over_the_device_does_not_fit_and_is_named():
    e, _ = _rl(train=TrainingOptions(seq_len=1536, gpu_memory_gib=80.0), gpu_memory_utilization=0.3, max_model_len=2048)
    d = e.to_dict()
    assert not d["fits"]
    over = [n for n, p in d["phases"].items() if p["gpu"] > e.usable]
    assert over and all(any(w.startswith(f"{n} does not fit") for w in d["warnings"]) for n in over)


# ------------------------------------------------------------------------------------------------ CLI
ARGS = [
    "Qwen3-8B",
    "--ngpu",
    "8",
    "--gpu-mem",
    "H200",
    "--rollout",
    "vllm",
    "--rollout-tp",
    "2",
    "--prompt-len",
    "512",
    "--response-len",
    "1024",
    "--rollout-n",
    "8",
    "--rollout-batch",
    "256",
    "--max-model-len",
    "1536",
]


def test_cli_json_document_keys_and_agreement_with_the_api():
    res = run_cli(
        "rl-memory", *ARGS, "--gpu-memory-utilization", "0.6", "--param-offload", "--optimizer-offload", "--json"
    )
    assert res.rc == 0, res.err
    d = res.json()
    base = {"phases", "peak_phase", "fits", "kv_cache", "host_per_node", "warnings", "errors"}
    assert set(d) == base | {"resync", "vllm_kv_rule"} | {  # the colocated budget's keys (tests/test_rl_budget.py)
        "predicted_metrics",
        "predicted_metrics_assumed",
    }  # the last two: tests/test_rl_metrics.py
    assert set(d["phases"]) == set(PHASES)
    for p in d["phases"].values():
        assert set(p) == {"gpu", "host_per_gpu", "parts"}
        assert abs(sum(p["parts"].values()) - p["gpu"]) <= len(p["parts"])
    assert set(d["kv_cache"]) == {"bytes_per_token", "bytes", "tokens", "max_concurrent_seqs"}
    e, _ = _rl(train=TrainingOptions(seq_len=1536, gpu_memory_gib=141.0, param_offload=True, optimizer_offload=True))
    assert e.fits and d["fits"] and not d["errors"]
    assert d["kv_cache"]["bytes"] == round(e.engine.kv)
    assert d["phases"]["rollout"]["gpu"] == round(_gpu(e, "rollout"))


def test_cli_flags_reach_the_estimate():
    base = run_cli("rl-memory", *ARGS, "--json").json()
    off = run_cli(
        "rl-memory",
        *ARGS,
        "--param-offload",
        "--optimizer-offload",
        "--grad-offload",
        "--ref",
        "none",
        "--sleep-level",
        "1",
        "--json",
    ).json()
    assert off["phases"]["rollout"]["gpu"] < base["phases"]["rollout"]["gpu"]
    assert "ref" not in off["phases"]
    assert off["phases"]["actor_update"]["host_per_gpu"] > base["phases"]["actor_update"]["host_per_gpu"]
    keep = run_cli("rl-memory", *ARGS, "--no-free-cache-engine", "--json").json()
    assert "kv_cache" in keep["phases"]["actor_update"]["parts"]
    sg = run_cli("rl-memory", *ARGS[:6], "sglang", *ARGS[7:], "--mem-fraction-static", "0.5", "--json")
    assert sg.rc in (0, 1) and "phases" in sg.json()


def test_cli_rollout_flags_name_their_verl_keys_and_set_their_fields():
    """Each rollout flag sets its RolloutOptions field, and --help names that field's verl key from the one rollout
    key table (mlite.memory.rl_keys)."""
    from mlite.cli import build_parser
    from mlite.cli.rl_memory import rollout_from_args
    from mlite.memory.rl_keys import REF_OFFLOAD_KEYS, ROLLOUT_KEYS

    flags = {
        "--rollout": ("name", "sglang"),
        "--rollout-tp": ("tensor_model_parallel_size", 4),
        "--rollout-dp": ("data_parallel_size", 2),
        "--mem-fraction-static": ("gpu_memory_utilization", 0.7),
        "--prompt-len": ("prompt_length", 100),
        "--response-len": ("response_length", 200),
        "--rollout-n": ("n", 3),
        "--rollout-batch": ("train_batch_size", 5),
        "--max-model-len": ("max_model_len", 400),
    }
    words = ["rl-memory", "Qwen3-8B", "--ngpu", "8"] + [str(w) for f, (_, v) in flags.items() for w in (f, v)]
    words += ["--no-free-cache-engine", "--sleep-level", "1", "--ref", "none", "--ref-offload", "--host-mem", "64"]
    r = rollout_from_args(build_parser().parse_args(words))
    for field, value in flags.values():
        assert getattr(r, field) == value, field
    assert (r.free_cache_engine, r.sleep_level, r.ref, r.ref_param_offload, r.host_mem_gib) == (
        False,
        1,
        "none",
        True,
        64,
    )
    text = " ".join(run_cli("rl-memory", "--help").out.split())
    key = dict(ROLLOUT_KEYS)
    for field, _ in flags.values():
        assert key[field] in text, key[field]
    assert key["free_cache_engine"] in text and all(k in text for k in REF_OFFLOAD_KEYS)


def test_cli_text_names_the_peak_and_exit_1_when_it_does_not_fit():
    res = run_cli("rl-memory", *ARGS, "--gpu-mem", "80", "--gpu-memory-utilization", "0.9")
    assert res.rc == 1
    assert "<- peak" in res.out and "would not start" in res.out


@pytest.mark.parametrize(
    "extra, needle",
    [
        (["--rollout-tp", "3"], "--rollout-tp 3"),
        (["--mem-fraction-static", "0.5"], "--mem-fraction-static"),
        (["--gpu-memory-utilization", "1.5"], "--gpu-memory-utilization 1.5"),
        (["--gpu-memory-utilization", "0"], "--gpu-memory-utilization 0"),
        (["--gpu-memory-utilization", "0.5", "--mem-fraction-static", "0.5"], "not allowed with"),
        (["--rollout", "sglang", "--mem-fraction-static", "1.5"], "--mem-fraction-static 1.5"),
        (["--rollout", "sgl"], "--rollout"),
        (["--rollout-dp", "3"], "--rollout-tp 2 x --rollout-dp 3 must divide --ngpu 8"),
        (["--rollout-dp", "0"], "--rollout-dp"),
        (["--prompt-len", "0"], "--prompt-len"),
        (["--max-model-len", "0"], "max_model_len"),
        (["--host-mem", "-1"], "host"),
        (["--host-mem", "nan"], "--host-mem"),  # nan compares False with every figure: the host check never failed
        (["--sleep-level", "3"], "--sleep-level"),
        (["--ref", "frozen"], "--ref"),
    ],
)
def test_cli_bad_input_exits_2_with_one_line(extra, needle):
    assert_one_line_error(run_cli("rl-memory", *ARGS, *extra), needle)


def test_rollout_tp_and_kv_heads_one_divides_the_other():
    """vLLM's and SGLang's ``QKVParallelLinear`` split the KV heads over TP (``divide(kv_heads, tp)``) or replicate
    them past it (``divide(tp, kv_heads)``): Qwen2.5-Math-7B's 4 KV heads take TP 1, 2, 4 or a multiple of 4, not 7
    (which divides its 28 attention heads)."""
    c = _cfg("Qwen2.5-Math-7B-derived")
    assert (c["num_attention_heads"], c["num_key_value_heads"]) == (28, 4)
    spec = from_hf_config("Qwen2.5-Math-7B-derived")
    o = TrainingOptions(seq_len=1024, gpu_memory_gib=141.0)
    plan = resolve(spec, 14, ParallelConfig(), seq_len=1024)
    with pytest.raises(MliteError, match="--rollout-tp 7 and the 4 KV heads"):
        rl_estimate(spec, plan, o, RolloutOptions(tensor_model_parallel_size=7))
    assert rl_estimate(spec, plan, o, RolloutOptions(tensor_model_parallel_size=2)).phases
    # past the KV heads they are replicated: Qwen3-8B's 8 at TP 16 is accepted, one head per GPU
    plan16 = resolve(Q8, 16, ParallelConfig(), seq_len=1024)
    e = rl_estimate(Q8, plan16, o, RolloutOptions(tensor_model_parallel_size=16))
    assert e.engine.layout.kv_heads_per_gpu == 1
    args = ["Qwen2.5-Math-7B-derived", "--ngpu", "14", *ARGS[3:]]
    assert_one_line_error(run_cli("rl-memory", *args, "--rollout-tp", "7"), "--rollout-tp 7", "4 KV heads")


def test_cli_from_another_directory_with_a_relative_config_creates_nothing(tmp_path):
    """The config may be a relative path; a good run and a refused one leave the working directory as it was."""
    import os
    import shutil
    import subprocess
    import sys

    shutil.copy(MODELS / "Qwen3-8B.json", tmp_path / "q8.json")
    env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONWARNINGS="ignore")

    def run(*extra):
        cmd = [sys.executable, "-m", "mlite", "rl-memory", "q8.json", *ARGS[1:], *extra]
        return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)

    ok = run("--gpu-memory-utilization", "0.6", "--param-offload", "--optimizer-offload", "--json")
    assert ok.returncode == 0, ok.stderr
    assert set(json.loads(ok.stdout)["phases"]) == set(PHASES)
    bad = run("--gpu-memory-utilization", "1.5")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and not bad.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["q8.json"]


def test_cli_unmodelled_model_exits_2():
    args = ["DeepSeek-V4-Flash", *ARGS[1:], "--ep", "8"]
    assert_one_line_error(run_cli("rl-memory", *args), "not modelled")


# ------------------------------------------------------------------------------------------------ published runs
RUNS = REPO / "tests" / "data" / "rl"


def test_published_run_settings_are_read_from_verl_config_dumps():
    from mlite.validation.rl_check import predict, verl_config_from_log

    runs = json.loads((RUNS / "runs.json").read_text())["runs"]
    assert len({r["log"] for r in runs}) >= 3
    for run in runs:
        cfg = verl_config_from_log(RUNS / run["log"])
        _est, o, r, _spec, plan = predict(run, RUNS)
        rc = cfg["actor_rollout_ref"]["rollout"]
        assert (r.gpu_memory_utilization, r.tensor_model_parallel_size, r.n) == (
            rc["gpu_memory_utilization"],
            rc["tensor_model_parallel_size"],
            rc["n"],
        )
        assert (r.prompt_length, r.response_length, r.train_batch_size) == (
            cfg["data"]["max_prompt_length"],
            cfg["data"]["max_response_length"],
            cfg["data"]["train_batch_size"],
        )
        assert plan.ngpu == cfg["trainer"]["nnodes"] * cfg["trainer"]["n_gpus_per_node"]
        assert r.ref == "none"  # none of these runs uses a KL term
        assert o.param_offload == cfg["actor_rollout_ref"]["actor"]["fsdp_config"]["param_offload"]


def test_readme_rl_memory_example_is_what_the_cli_prints():
    """The console example of the README's "RL memory" section: its command line, run today, prints its output."""
    import shlex

    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("### RL memory") :]
    block = section[section.index("```console\n$ mlite rl-memory") + len("```console\n") :]
    block = block[: block.index("```")]
    lines = block.splitlines()
    n = next(i for i, ln in enumerate(lines) if not ln.rstrip().endswith("\\")) + 1
    words = shlex.split(" ".join(ln.rstrip().rstrip("\\") for ln in lines[:n]).removeprefix("$ "))
    assert words[:2] == ["mlite", "rl-memory"]
    res = run_cli(*words[1:])
    assert res.rc == 0, res.err
    assert res.out.splitlines() == lines[n:], "README 'RL memory' example is stale: paste the command's output"


def test_published_runs_table_predicted_next_to_logged():
    """The README table is what this code computes; where the run says how the engine shows in PyTorch's
    statistics, the prediction is within 15 % of the logged max_memory_allocated, and the actor alone is far below
    it (in colocated verl the metric is not the training peak)."""
    from mlite.validation.rl_check import compare_runs, markdown_table

    rows = compare_runs(RUNS)
    table = markdown_table(rows)
    readme = (REPO / "README.md").read_text()
    assert table in readme, "README 'RL memory' table is stale: paste markdown_table(compare_runs(...))"
    # the figures the prose under the table quotes are today's too
    logged = {r["run"]: r["logged"]["max_memory_allocated_gb"] for r in rows}
    err = [(r["predicted"]["applies"] / logged[r["run"]] - 1) * 100 for r in rows if not r["run"].endswith("_h200")]
    share = [r["predicted"]["outside"] / logged[r["run"]] * 100 for r in rows]
    h200 = next(r for r in rows if r["run"].endswith("_h200"))
    frees = h200["predicted"]["torch_frees"]
    flat = " ".join(readme.split())
    for quoted in (
        f"within {round(min(err)):+d} % to {round(max(err)):+d} % of the logged peak",
        f"predicted at {round(min(share))}-{round(max(share))} % of it",
        f"pool freed, {frees:.1f} GiB, {round((frees / logged[h200['run']] - 1) * 100):+d} %",
    ):
        assert quoted in flat, f"README 'RL memory' prose is stale: {quoted!r}"
    for row in rows:
        logged = row["logged"]["max_memory_allocated_gb"]
        assert row["predicted"]["outside"] < 0.6 * logged
        assert row["logged"]["max_memory_reserved_gb"] >= logged
        if not row["run"].endswith("_h200"):  # the alternative reading of an unknown card
            assert abs(row["predicted"]["applies"] - logged) <= 0.15 * logged, row


# ------------------------------------------------------------------------------------------------ verl keys
def test_rollout_keys_round_trip_both_ways():
    from mlite.memory.rl_keys import ROLLOUT_KEYS, rollout_kwargs, rollout_overrides

    r = RolloutOptions(
        name="sglang",
        tensor_model_parallel_size=4,
        gpu_memory_utilization=0.72,
        free_cache_engine=False,
        n=16,
        max_model_len=9000,
        max_num_batched_tokens=16384,
        max_num_seqs=512,
        enforce_eager=True,
        update_weights_bucket_megabytes=1024,
        prompt_length=777,
        response_length=3333,
        train_batch_size=96,
        data_parallel_size=2,
        expert_parallel_size=8,
        ref="none",  # no KL key in the overrides: verl builds no reference
    )
    ov = rollout_overrides(r)
    assert set(ov) == {k for _, k in ROLLOUT_KEYS}
    back = RolloutOptions(**rollout_kwargs(ov))
    assert back == r
    # strings as a shell writes them read back the same; only what differs from the defaults is written on request
    assert RolloutOptions(**rollout_kwargs({k: str(v) for k, v in ov.items()})) == r
    assert rollout_overrides(RolloutOptions(n=16), defaults=RolloutOptions()) == {"actor_rollout_ref.rollout.n": 16}
    with pytest.raises(MliteError, match=re.escape("actor_rollout_ref.rollout.n")):
        rollout_kwargs({"actor_rollout_ref.rollout.n": "many"})


def test_reference_read_from_the_kl_settings():
    from mlite.memory.rl_keys import rollout_kwargs

    assert rollout_kwargs({"actor_rollout_ref.actor.use_kl_loss": True})["ref"] == "colocated"
    assert (
        rollout_kwargs({"actor_rollout_ref.actor.use_kl_loss": False, "algorithm.use_kl_in_reward": False})["ref"]
        == "none"
    )
    assert rollout_kwargs({"actor_rollout_ref.ref.megatron.param_offload": "True"})["ref_param_offload"] is True
    # neither key set: verl's defaults (both False, need_reference_policy) build no reference
    assert rollout_kwargs({})["ref"] == "none"
    assert rollout_kwargs({"algorithm.use_kl_in_reward": "True"})["ref"] == "colocated"


def test_export_plan_memory_share_is_the_rollout_engines_rule():
    """The plan's rollout share obeys the one rule of RolloutOptions, (0, 1] as vLLM's ``gpu_memory_utilization``:
    1.0 is a share ``mlite rl-memory`` takes, so the plan takes it too; 0 and 1.5 are refused by the same check."""
    from mlite.export.plan import ExportPlan

    plan = ExportPlan(model="Qwen3-8B", target="verl-mlite-grpo", nodes=1, rollout_gpu_memory_utilization=1.0)
    assert plan.rollout_options.gpu_memory_utilization == 1.0
    for bad in (0.0, 1.5):
        with pytest.raises(MliteError, match=r"must be in \(0, 1\], got"):
            ExportPlan(model="Qwen3-8B", target="verl-mlite-grpo", nodes=1, rollout_gpu_memory_utilization=bad)


@pytest.mark.parametrize("target", ["verl-mlite-grpo", "verl-megatron-grpo"])
def test_grpo_export_rollout_knobs_read_back_by_import_launcher(target, tmp_path):
    """What the GRPO launchers write today (name, TP, gpu_memory_utilization, n, P, R, free_cache_engine) comes back
    through import-launcher's overrides into RolloutOptions."""
    from mlite.export import import_launcher
    from mlite.export.plan import ExportPlan
    from mlite.export.writer import write
    from mlite.memory.rl_keys import rollout_kwargs

    plan = ExportPlan(
        model="Qwen3-8B", target=target, nodes=1, rollout_tp=2, rollout_n=12, rollout_gpu_memory_utilization=0.55
    )
    res = write(plan, tmp_path)
    imp = import_launcher(tmp_path / res.launcher)
    assert imp.rollout == rollout_kwargs({o.key: o.value for o in imp.overrides})
    assert imp.to_dict()["rollout"] == imp.rollout  # import-launcher --json carries them
    r = RolloutOptions(**imp.rollout)
    assert (r.name, r.tensor_model_parallel_size, r.gpu_memory_utilization, r.n, r.free_cache_engine) == (
        "vllm",
        2,
        0.55,
        12,
        True,
    )
    assert (r.prompt_length, r.response_length) == (plan.prompt_length, plan.response_length)


def test_reference_is_bf16_even_when_the_fsdp_actor_keeps_fp32_parameters():
    o = TrainingOptions(seq_len=1536, gpu_memory_gib=141.0, optimizer="fsdp2", param_dtype="fp32")
    e, act = _rl(train=o)
    assert e.phases["ref"].gpu["ref_params"] == pytest.approx(act.params / 2)
    assert e.phases["ref"].gpu["ref_params"] == pytest.approx(Q8.total * 2 / 8)  # bf16, sharded over 8 GPUs


# ------------------------------------------------------------------------------------------------ engine logs
def _engine_logs():
    return json.loads((RUNS / "engine_kv_logs.json").read_text())["logs"]


def test_gqa_bytes_per_token_match_sglangs_allocation_line():
    log = _engine_logs()[0]
    lay = kv_layout(from_hf_config(log["model"]), log["tp"])  # 4 KV heads at TP 4: one per GPU
    assert lay.kv_heads_per_gpu == 1
    # the K pool is half the bytes per token; the logged GiB have two decimals (+-0.005)
    slots = log["tokens"] + log["page_size"]
    k_lo, k_hi = ((log["k_size_gb"] + d) * GIB / slots for d in (-0.005, 0.005))
    assert k_lo <= lay.bytes_per_token / 2 <= k_hi


@pytest.mark.parametrize("i", [1, 2])
def test_dsa_bytes_per_token_match_sglangs_allocation_line(i):
    log = _engine_logs()[i]
    glm5 = kv_layout(from_hf_config("GLM-5"), 8, kv_dtype="fp8")  # same latent and indexer sizes per layer
    per_layer = glm5.bytes_per_token / 78
    assert per_layer == 656 + 132  # fp8_ds_mla latent + indexer (128 fp8 + fp32 scale)
    want = per_layer if log["includes_indexer"] else 656
    slots = log["tokens"] + log["page_size"]
    lo, hi = ((log["kv_size_gb"] + d) * GIB / slots for d in (-0.005, 0.005))
    assert lo <= want * log["dsa_layers"] <= hi


def test_engine_weights_per_gpu_match_vllms_model_loading_line():
    log = json.loads((RUNS / "engine_kv_logs.json").read_text())["weights"][0]
    spec = from_hf_config(log["model"])
    w = rollout_weights(spec, RolloutOptions(tensor_model_parallel_size=log["tp"]))
    assert w == pytest.approx(log["gib"] * GIB, rel=2e-3)
    naive = spec.total * 2 / log["tp"]  # everything split over TP: the router and norms are not
    assert abs(w - log["gib"] * GIB) < abs(naive - log["gib"] * GIB)


def test_rollout_data_parallel_splits_only_the_routed_experts():
    """vLLM flattens TP across DP for the MoE layers (``FusedMoEParallelConfig.make``): with rollout DP the routed
    experts are split over TP x DP, attention and the dense parts over TP only; expert_parallel_size = TP x DP holds
    the same bytes; a dense model does not change; the replicas of TP x DP GPUs must tile the GPUs."""
    c = Q30.components
    tp1 = rollout_weights(Q30, RolloutOptions(tensor_model_parallel_size=2))
    dp4 = rollout_weights(Q30, RolloutOptions(tensor_model_parallel_size=2, data_parallel_size=4))
    assert tp1 - dp4 == pytest.approx(c["routed_experts"] * 2 * (1 / 2 - 1 / 8))
    ep = RolloutOptions(tensor_model_parallel_size=2, data_parallel_size=4, expert_parallel_size=8)
    assert rollout_weights(Q30, ep) == dp4
    dense = [rollout_weights(Q8, RolloutOptions(data_parallel_size=d)) for d in (1, 4)]
    assert dense[0] == dense[1]
    with pytest.raises(MliteError, match="expert_parallel_size 4 must be 1 or"):
        RolloutOptions(tensor_model_parallel_size=2, data_parallel_size=4, expert_parallel_size=4)
    o = TrainingOptions(seq_len=1536, gpu_memory_gib=141.0)
    plan = resolve(Q30, 8, ParallelConfig(ep=8), seq_len=1536)
    with pytest.raises(MliteError, match="must divide --ngpu 8"):
        rl_estimate(Q30, plan, o, RolloutOptions(tensor_model_parallel_size=2, data_parallel_size=3))
    e = rl_estimate(Q30, plan, o, RolloutOptions(tensor_model_parallel_size=2, data_parallel_size=4))
    assert e.engine.weights == dp4 and e.phases["rollout"].gpu["engine_weights"] == dp4
    cli = run_cli("rl-memory", "Qwen3-30B-A3B", "--ep", "8", *ARGS[1:], "--rollout-dp", "4", "--json").json()
    assert cli["phases"]["rollout"]["parts"]["engine_weights"] == round(dp4)


def test_launcher_rollout_data_and_expert_parallel_reach_the_engine():
    """verl's Qwen3.5-397B example runs its rollout at TP 8 x DP 16 with EP 128: import-launcher reads both, and the
    engine holds a 128th of the routed experts, not an 8th (which would not fit an H200 at 0.6)."""
    from mlite.export import import_launcher

    path = REPO / "tests/data/launchers/verl/main/examples/grpo_trainer/run_qwen3_5_397b_megatron.sh"
    imp = import_launcher(path)
    r = RolloutOptions(**imp.rollout)
    assert (r.tensor_model_parallel_size, r.data_parallel_size, r.expert_parallel_size) == (8, 16, 128)
    spec = from_hf_config(imp.model_ref())
    mp, training = imp.estimate(gpu_memory_gib=141.0)
    e = rl_estimate(spec, mp, training.options, r)
    assert e.engine.weights == rollout_weights(spec, r)
    tp_only = rollout_weights(spec, replace(r, data_parallel_size=1, expert_parallel_size=1))
    assert e.engine.weights < 0.2 * tp_only and tp_only > 0.6 * 141 * GIB
    assert not any("would not start" in x for x in e.errors), e.errors


def test_unresolved_launcher_values_are_left_out_not_fatal():
    from mlite.memory.rl_keys import rollout_kwargs

    problems = []
    kw = rollout_kwargs(
        {"actor_rollout_ref.rollout.tensor_model_parallel_size": "$ROLLOUT_TP", "actor_rollout_ref.rollout.n": 4},
        problems=problems,
    )
    assert kw == {"n": 4, "ref": "none"} and len(problems) == 1 and "tensor_model_parallel_size" in problems[0]


# ------------------------------------------------------------------------------------------------ the widget
def _rl_view(**rollout):
    from widgets.memory_view import MemoryView
    from widgets.planner import MeshPlanner
    from widgets.rl_view import RLView

    planner = MeshPlanner("Qwen3-8B", ngpu=8, tp=2)
    memory = MemoryView(planner, gpu="H100")
    return planner, memory, RLView(memory, **rollout)


def test_rl_view_follows_the_memory_view_and_agrees_with_the_cli():
    planner, memory, rl = _rl_view(
        tensor_model_parallel_size=2,
        prompt_length=512,
        response_length=1024,
        n=8,
        train_batch_size=128,
        max_model_len=1536,
    )
    assert rl.errors.message == ""
    e = rl.estimate
    want = rl_estimate(planner.spec, planner.plan, replace(memory.options(), seq_len=1536), rl.rollout_options())
    assert e.to_dict() == want.to_dict()
    svg = rl.chart.value
    assert svg.count('class="mlite-rl-bar') == len(e.phases)
    assert svg.count("mlite-rl-oom") == sum(not e.phase_fits(n) for n in e.phases)
    # the view's command line prints the same document
    cmd = rl.command().split()
    assert cmd[:2] == ["mlite", "rl-memory"]
    res = run_cli(*cmd[1:], "--json")
    assert res.rc in (0, 1), res.err
    assert res.json() == e.to_dict()
    # ticking param_offload in the memory view moves the actor's weights off the rollout phase
    before = e.phases["rollout"].gpu_total
    memory.set(param_offload=True)
    assert rl.estimate.phases["rollout"].gpu_total < before
    # a knob under verl's name re-estimates; bad input shows one line inline, no traceback
    rl.set(gpu_memory_utilization=0.3)
    assert rl.estimate.rollout.gpu_memory_utilization == 0.3
    # rollout.data_parallel_size reaches the estimate and the command line (a dense model: every DP rank of the
    # engine holds its whole TP shard, so the weights per GPU stay; the MoE split is tested on the CLI)
    weights = rl.estimate.phases["rollout"].gpu["engine_weights"]
    rl.set(data_parallel_size=2)
    assert rl.estimate.rollout.data_parallel_size == 2
    assert rl.estimate.phases["rollout"].gpu["engine_weights"] == weights
    cmd = rl.command().split()
    assert "--rollout-dp" in cmd and cmd[cmd.index("--rollout-dp") + 1] == "2"
    res = run_cli(*cmd[1:], "--json")
    assert res.rc in (0, 1), res.err
    assert res.json() == rl.estimate.to_dict()
    rl.set(data_parallel_size=1)
    rl.set(tensor_model_parallel_size=16)
    assert "--rollout-tp 16 must divide --ngpu 8" in rl.errors.message and rl.estimate is None


def test_notebook_01_rl_view_opens_on_a_step_that_fits():
    """Notebook 01's cells that build the explorer, planner, memory view and RL view, run as they are: the RL view
    opens on a step that starts and fits (issue 30: it opened red, "vLLM would not start", on its own defaults),
    and the memory view's verdict and the RL view's command line say the same as ``mlite rl-memory``."""
    cells = [
        "".join(c["source"])
        for c in json.loads((REPO / "notebooks" / "01_plan.ipynb").read_text())["cells"]
        if c["cell_type"] == "code"
    ]
    wanted = ("ModelExplorer(MODEL)", "MeshPlanner(explorer", "MemoryView(planner", "RLView(memory")
    ns: dict = {}
    for marker in wanted:
        (src,) = [s for s in cells if marker in s]
        exec(compile(src, f"<01_plan: {marker}>", "exec"), ns)
    rl = ns["rl"]
    assert rl.errors.message == "" and rl.estimate is not None
    d = rl.estimate.to_dict()
    assert d["errors"] == [] and d["fits"] is True, d["errors"]
    assert "mlite-rl-oom" not in rl.chart.value
    res = run_cli(*rl.command().split()[1:], "--json")
    assert res.rc == 0 and res.json()["fits"] is True, res.out[-400:]


def test_rl_view_offers_to_offload_the_actor_when_the_engine_would_not_start():
    """With the actor resident, notebook 01's plan leaves vLLM too little to start: the view says so and offers the
    fix (the memory view's param_offload and optimizer_offload); one click and the step starts, the button hides."""
    from widgets.memory_view import MemoryView
    from widgets.planner import MeshPlanner
    from widgets.rl_view import RLView

    memory = MemoryView(MeshPlanner("Qwen3-30B-A3B", ngpu=16, ep=8), gpu="H100")
    rl = RLView(memory, tensor_model_parallel_size=4, prompt_length=512, response_length=1024, n=8)
    assert any("vLLM would not start" in e for e in rl.estimate.errors)
    assert rl.offload_actor.layout.display is None and "mlite-rl-offload-actor" in rl.offload_actor._dom_classes
    rl.offload_actor.click()
    o = memory.options()
    assert o.param_offload and o.optimizer_offload
    assert rl.estimate.errors == [] and rl.estimate.fits
    assert rl.offload_actor.layout.display == "none"
    assert "--param-offload --optimizer-offload" in rl.command()
