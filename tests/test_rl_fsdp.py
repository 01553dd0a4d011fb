"""verl's FSDP / FSDP2 actor and reference in the RL memory model (mlite/memory/rl_fsdp.py): the byte rules against
verl's code (verl-project/verl v0.7.0 = f9c855f7cf04d603c9546bc01776c74806a879c1 for ``verl/workers/fsdp_workers.py``
and ``verl/workers/actor/dp_actor.py``; main = 1dda039b9c6311889a9c9a26040677e1254814f9 for the config and the FSDP
engine), an oracle (torch FSDP2 on 2 CPU processes, gloo, HF models built from data/models configs the way verl's
``apply_fsdp2`` wraps them: sharded bytes per rank, what stays gathered), ``mlite rl-memory --strategy``, and
``mlite import-launcher`` of verl's public FSDP launchers (tests/data/launchers/verl_fsdp/)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from conftest import run_cli

from mlite.errors import MliteError
from mlite.memory.activations import layer_bytes
from mlite.memory.estimate import GIB
from mlite.memory.rl import rl_estimate
from mlite.memory.rl_fsdp import (
    CE_STATS_BYTES,
    FsdpOptions,
    forward_only,
    fsdp_actor,
    fsdp_group,
    fsdp_ref,
    micro_tokens,
    passes,
    root_params,
    trained_params,
)
from mlite.memory.rl_keys import fsdp_kwargs, fsdp_overrides
from mlite.memory.rl_options import RolloutOptions
from mlite.mesh import ParallelConfig, resolve
from mlite.models import from_hf_config
from mlite.options import TrainingOptions
from mlite.options.rl_fsdp import FSDP_ROWS

REPO = Path(__file__).resolve().parents[1]
LAUNCHERS = REPO / "tests" / "data" / "launchers" / "verl_fsdp" / "main" / "examples" / "grpo_trainer"
QWEN7 = "Qwen2.5-Math-7B-derived"


def _spec(name=QWEN7):
    return from_hf_config(name)


# ------------------------------------------------------------------------------------------- the options rows


def test_rows_are_the_dataclass_fields_in_order_with_its_defaults():
    from dataclasses import fields

    f = FsdpOptions()
    assert [r.field for r in FSDP_ROWS] == [x.name for x in fields(FsdpOptions)]
    for r in FSDP_ROWS:
        assert r.default == getattr(f, r.field), r.field
        assert r.help.startswith(r.mlite.key)


def test_keys_round_trip_and_verl_defaults():
    """Overrides written from options read back to the same options; nothing set reads verl's defaults (strategy:
    the caller's; ppo_trainer's is fsdp)."""
    f = FsdpOptions(
        strategy="fsdp2",
        use_remove_padding=False,
        use_dynamic_bsz=True,
        ppo_max_token_len_per_gpu=24576,
        log_prob_max_token_len_per_gpu=32768,
        param_offload=True,
        fsdp_size=4,
        ulysses_sequence_parallel_size=2,
        entropy_coeff=0.001,
    )
    ov = fsdp_overrides(f, defaults=FsdpOptions())
    assert ov["actor_rollout_ref.actor.strategy"] == "fsdp2"
    assert ov["actor_rollout_ref.model.use_remove_padding"] is False
    assert FsdpOptions(**fsdp_kwargs(ov)) == f
    assert FsdpOptions(**fsdp_kwargs({}, default_strategy="fsdp")) == FsdpOptions(strategy="fsdp")
    nested = {"actor_rollout_ref": {"actor": {"strategy": "fsdp2", "fsdp_config": {"fsdp_size": 8}}}}
    assert fsdp_kwargs(nested)["fsdp_size"] == 8


def test_bad_values_name_the_field():
    with pytest.raises(MliteError, match=r"actor\.strategy must be one of megatron, fsdp, fsdp2"):
        FsdpOptions(strategy="deepspeed")
    with pytest.raises(MliteError, match="fsdp_size must be -1"):
        FsdpOptions(fsdp_size=0)
    with pytest.raises(MliteError, match="offload_policy=True is FSDP2's"):
        FsdpOptions(strategy="fsdp", offload_policy=True)
    with pytest.raises(MliteError, match="use_dynamic_bsz='maybe': not a valid bool"):
        fsdp_kwargs({"actor_rollout_ref.actor.use_dynamic_bsz": "maybe"})
    problems: list = []
    assert "fsdp_size" not in fsdp_kwargs({"actor_rollout_ref.actor.fsdp_config.fsdp_size": "$N"}, problems=problems)
    assert problems and "fsdp_size" in problems[0]


# ------------------------------------------------------------------------------------- byte rules (verl's code)


def test_fp32_state_sharded_over_the_fsdp_group_and_hsdp():
    """model_dtype fp32 (``_generated_ppo_trainer.yaml`` @ main): params, grads, AdamW moments 4 bytes each over the
    FSDP group; ``create_device_mesh``: fsdp_size < world is HSDP, the shard group is fsdp_size."""
    spec, o = _spec(), TrainingOptions()
    n = trained_params(spec)
    a = fsdp_actor(spec, 16, o, FsdpOptions(strategy="fsdp2"), 2048)
    assert (a.params, a.grads, a.exp_avg, a.exp_avg_sq, a.master) == (n * 4 / 16, n * 4 / 16, n * 4 / 16, n * 4 / 16, 0)
    h = fsdp_actor(spec, 16, o, FsdpOptions(strategy="fsdp2", fsdp_size=8), 2048)
    assert h.params == n * 4 / 8 and h.optimizer == 2 * n * 4 / 8
    assert fsdp_group(FsdpOptions(fsdp_size=32), 16) == 16  # >= world: all of them
    bf = fsdp_actor(spec, 16, o, FsdpOptions(strategy="fsdp2", model_dtype="bf16"), 2048)
    assert bf.params == n * 2 / 16
    with pytest.raises(MliteError, match="fsdp_size 3 must divide the 16 GPUs"):
        fsdp_group(FsdpOptions(fsdp_size=3), 16)


def test_trained_params_are_the_hf_model_tied_or_not():
    tied, untied = _spec("tiny-qwen2"), _spec("tiny-llama")
    assert tied.tie_word_embeddings and not untied.tie_word_embeddings
    emb = tied.vocab_size * tied.hidden_size
    assert trained_params(tied) == sum(x.params for x in tied.main_layers) + emb + tied.hidden_size
    assert trained_params(untied) == sum(x.params for x in untied.main_layers) + 2 * emb + untied.hidden_size


def test_offload_flags_move_state_to_host_and_out_of_idle():
    """``param_offload``: the params to host; ``optimizer_offload``: the moments; FSDP2 ``offload_policy``: all three
    always on the host. No gradients between updates: ``update_policy`` ends with ``zero_grad()`` (dp_actor.py line
    555 @ v0.7.0), which torch's AdamW runs with ``set_to_none=True`` (tests/test_rl_lazy.py holds torch to it)."""
    spec, o, w = _spec(), TrainingOptions(), 8
    base = fsdp_actor(spec, w, o, FsdpOptions(strategy="fsdp"), 2048)
    assert base.idle_gpu == base.params + base.optimizer and not base.host and base.grads > 0
    assert base.static == base.params + base.grads + base.optimizer  # the update holds them
    p = fsdp_actor(spec, w, o, FsdpOptions(strategy="fsdp", param_offload=True), 2048)
    assert p.idle_gpu == p.optimizer and p.host == {"params": p.params}
    po = fsdp_actor(spec, w, o, FsdpOptions(strategy="fsdp", param_offload=True, optimizer_offload=True), 2048)
    assert po.idle_gpu == 0 and sum(po.host.values()) == po.params + po.optimizer
    pol = fsdp_actor(spec, w, o, FsdpOptions(strategy="fsdp2", offload_policy=True), 2048)
    assert pol.params == pol.grads == pol.optimizer == 0
    assert sum(pol.host.values()) == sum(po.host.values()) + po.grads  # CPUOffloadPolicy: grads on the host
    assert pol.peak < po.peak  # the update itself keeps nothing resident


def test_root_unit_fsdp1_vs_fsdp2():
    """``apply_fsdp2`` wraps an untied embedding as its own unit; FSDP1 (layers only) leaves it in the root."""
    spec = _spec()  # untied
    emb = spec.vocab_size * spec.hidden_size
    r1, r2 = root_params(spec, FsdpOptions(strategy="fsdp")), root_params(spec, FsdpOptions(strategy="fsdp2"))
    assert r1 - r2 == emb and r2 == emb + spec.hidden_size  # FSDP2 root: lm_head + final norm


def test_micro_batch_tokens_dynamic_padded_and_ulysses():
    """dp_actor.py: dynamic bsz packs ``ppo_max_token_len_per_gpu`` x SP tokens and Ulysses slices them (per GPU the
    token budget); rows x (P + R) otherwise, divided by SP."""
    f = FsdpOptions(strategy="fsdp2", use_dynamic_bsz=True, ppo_max_token_len_per_gpu=24576)
    assert micro_tokens(f, 3072, 4, 24576) == 24576
    assert micro_tokens(replace(f, ulysses_sequence_parallel_size=4), 3072, 4, 24576) == 24576
    assert micro_tokens(f, 40000, 4, 24576) == 40000  # one sequence longer than the budget still runs whole
    g = FsdpOptions(strategy="fsdp2")
    assert micro_tokens(g, 3072, 4, None) == 4 * 3072
    assert micro_tokens(replace(g, ulysses_sequence_parallel_size=2), 3072, 4, None) == 2 * 3072
    p = passes(
        FsdpOptions(strategy="fsdp", ppo_micro_batch_size_per_gpu=2, log_prob_micro_batch_size_per_gpu=8),
        TrainingOptions(),
        1024,
    )
    assert (p.update, p.old_log_prob, p.ref) == (2048, 8192, 2048)


V07 = "0.7.0"
"""dp_actor.py @ v0.7.0, the path these working-set tests read (verl >= 0.8: the engine worker)."""


def test_log_prob_and_entropy_working_set():
    """_forward_micro_batch: bf16 logits [T, V]; flash-attn's in-place cross-entropy adds none; the compiled
    entropy none, the eager one under bf16 autocast six bf16 [T, V] copies (fp32 softmax; logsumexp's fp32 input and
    temporary: autocast's fp32 list), the chunked one four fp32 [chunk, V]; fused kernels no logits. The update keeps
    the eager entropy's fp32 softmax and logsumexp input unless entropy_checkpointing."""
    spec, o, w = _spec(), TrainingOptions(), 8
    T, V = 8192, spec.vocab_size
    f = FsdpOptions(strategy="fsdp2", ppo_micro_batch_size_per_gpu=2)
    a = fsdp_actor(spec, w, o, f, 4096, verl_version=V07)
    assert a.activations["logits"] == T * V * 2 and "entropy_softmax" not in a.activations
    assert a.transients["logits_grad"] == 0  # entropy_coeff 0: only the in-place cross-entropy gradient
    e = fsdp_actor(spec, w, o, replace(f, entropy_coeff=0.01, use_torch_compile=False), 4096, verl_version=V07)
    assert e.activations["entropy_softmax"] == e.activations["entropy_logsumexp_input"] == 2 * T * V * 2  # fp32
    assert e.transients["logits_grad"] == T * V * 2 + 6 * T * V * 2
    ck = fsdp_actor(
        spec,
        w,
        o,
        replace(f, entropy_coeff=0.01, use_torch_compile=False, entropy_checkpointing=True),
        4096,
        verl_version=V07,
    )
    assert "entropy_softmax" not in ck.activations
    fused = fsdp_actor(spec, w, o, replace(f, use_fused_kernels=True), 4096, verl_version=V07)
    assert "logits" not in fused.activations
    eager = forward_only(spec, replace(f, use_torch_compile=False), T, entropy=True, verl_version=V07)
    compiled = forward_only(spec, f, T, entropy=True, verl_version=V07)
    chunked = forward_only(
        spec,
        replace(f, use_torch_compile=False, entropy_from_logits_with_chunking=True),
        T,
        entropy=True,
        verl_version=V07,
    )
    assert eager - compiled == 6 * T * V * 2
    assert chunked - compiled == 4 * 2048 * V * 4


@pytest.mark.parametrize("version", ["0.3", "0.4", "0.5", "0.6", "0.7.0"])
def test_padded_entropy_is_eager_whatever_use_torch_compile(version):
    """dp_actor.py's padded branch calls verl_F.entropy_from_logits itself at every legacy release (not the compiled
    self.compute_entropy_from_logits, not the chunked one): six bf16 [R, V] copies under autocast whatever
    use_torch_compile or the chunking flag say. Without gradients the response copy logprobs_from_logits reshapes is
    freed before the entropy: the two are not held together."""
    spec, T = _spec(), 8192
    V = spec.vocab_size
    f = FsdpOptions(strategy="fsdp2", use_remove_padding=False)
    compiled = forward_only(spec, f, T, entropy=True, verl_version=version)
    eager = forward_only(spec, replace(f, use_torch_compile=False), T, entropy=True, verl_version=version)
    chunked = forward_only(
        spec, replace(f, entropy_from_logits_with_chunking=True), T, entropy=True, verl_version=version
    )
    assert compiled == eager == chunked
    no_entropy = forward_only(spec, f, T, entropy=False, verl_version=version)
    assert compiled - no_entropy == 6 * T * V * 2 - T * V * 2
    rmpad = FsdpOptions(strategy="fsdp2")  # unpadded: the compiled entropy fuses its temporaries away
    assert forward_only(spec, rmpad, T, entropy=True, verl_version=version) == forward_only(
        spec, rmpad, T, entropy=False, verl_version=version
    )


def test_gradient_checkpointing_keeps_layer_inputs_only():
    """HF's per-layer checkpoint: each layer's input (activations.py's full-recompute rule) and one layer rebuilt."""
    spec, o = _spec(), TrainingOptions()
    f = FsdpOptions(strategy="fsdp2", ppo_micro_batch_size_per_gpu=1)
    on = fsdp_actor(spec, 8, o, f, 4096)
    off = fsdp_actor(spec, 8, o, replace(f, enable_gradient_checkpointing=False), 4096)
    L, h = len(spec.main_layers), spec.hidden_size
    assert on.activations["layer_inputs"] == L * 2 * 4096 * h
    assert "recompute_layer" in on.transients and "recompute_layer" not in off.transients
    from mlite.memory.activations import ActDims

    per_layer = sum(
        layer_bytes(spec, spec.main_layers[0], ActDims(4096, 1, 1, 1, False, True, False, "none", frozenset())).values()
    )
    kept = sum(v for k, v in off.activations.items() if k not in ("logits", "log_prob_stats", "root_unit_unsharded"))
    assert kept == pytest.approx(L * per_layer)
    assert off.peak > on.peak


def test_reference_is_cpu_offloaded_fp32_shards_and_gathered_units():
    """verl forces the FSDP reference's CPU offload; its model_dtype defaults to fp32 (the generated config)."""
    spec = _spec()
    n = trained_params(spec)
    gpu, host = fsdp_ref(spec, 8, FsdpOptions(strategy="fsdp"))
    assert host == n * 4 / 8
    biggest = max(x.params for x in spec.main_layers)
    assert gpu == 2 * (root_params(spec, FsdpOptions(strategy="fsdp")) + 2 * biggest) + biggest * 4 / 8


# -------------------------------------------------------------------------------- the RL phases, the CLI


def _plan(spec, ngpu=8, **par):
    return resolve(spec, ngpu, ParallelConfig(**par), seq_len=4096)


def test_rl_phases_with_the_fsdp_actor():
    spec = _spec()
    r = RolloutOptions(prompt_length=1024, response_length=3072, n=5, train_batch_size=512, gpu_memory_utilization=0.5)
    o = TrainingOptions(seq_len=4096)
    f = FsdpOptions(strategy="fsdp2", use_dynamic_bsz=True, ppo_max_token_len_per_gpu=24576)
    est = rl_estimate(spec, _plan(spec), o, r, f)
    act = fsdp_actor(spec, 8, o, f, 4096)
    ph = est.phases
    assert ph["actor_update"].gpu["actor_training_peak"] == act.peak
    assert ph["rollout"].gpu["actor_resident"] == act.idle_gpu
    assert "ref_params" not in ph["rollout"].gpu  # the FSDP reference lives on the host
    assert ph["rollout"].host["ref_offloaded_params"] == fsdp_ref(spec, 8, f)[1]
    assert ph["ref"].gpu["ref_params"] == fsdp_ref(spec, 8, f)[0]
    d = est.to_dict()
    assert d["actor_strategy"] == "fsdp2" and d["fsdp"]["ppo_max_token_len_per_gpu"] == 24576
    # the Megatron path is untouched and keeps its document's keys
    meg = rl_estimate(spec, _plan(spec), o, r).to_dict()
    assert "actor_strategy" not in meg and meg == rl_estimate(spec, _plan(spec), o, r, FsdpOptions()).to_dict()
    with pytest.raises(MliteError, match=r"--tp 2 with actor\.strategy=fsdp2"):
        rl_estimate(spec, _plan(spec, tp=2), o, r, f)
    with pytest.raises(MliteError, match="ulysses_sequence_parallel_size 3 must divide"):
        rl_estimate(spec, _plan(spec), o, r, replace(f, ulysses_sequence_parallel_size=3))


def test_offload_shrinks_the_rollout_phase_by_the_offloaded_state():
    spec = _spec()
    r = RolloutOptions(prompt_length=1024, response_length=1024, n=4, train_batch_size=128)
    o = TrainingOptions(seq_len=2048)
    f = FsdpOptions(strategy="fsdp")
    a = rl_estimate(spec, _plan(spec), o, r, f).phases
    b = rl_estimate(spec, _plan(spec), o, r, replace(f, param_offload=True, optimizer_offload=True)).phases
    act = fsdp_actor(spec, 8, o, f, 2048)
    assert a["rollout"].gpu_total - b["rollout"].gpu_total == pytest.approx(act.params + act.optimizer)  # no grads
    assert b["rollout"].host_total - a["rollout"].host_total == pytest.approx(act.params + act.optimizer)


ARGS = [
    "rl-memory", QWEN7, "--ngpu", "8", "--rollout", "vllm", "--rollout-tp", "2", "--prompt-len", "1024",
    "--response-len", "3072", "--rollout-n", "5", "--rollout-batch", "512",
]  # fmt: skip


def test_cli_strategy_fsdp2_json_agrees_with_the_api():
    res = run_cli(*ARGS, "--strategy", "fsdp2", "--dynamic-bsz", "--ppo-max-token-len", "24576",
                  "--fsdp-param-offload", "--json")  # fmt: skip
    assert res.rc == 0, res.err
    d = res.json()
    spec = _spec()
    r = RolloutOptions(prompt_length=1024, response_length=3072, n=5, train_batch_size=512)
    f = FsdpOptions(strategy="fsdp2", use_dynamic_bsz=True, ppo_max_token_len_per_gpu=24576, param_offload=True)
    api = rl_estimate(spec, _plan(spec), TrainingOptions(seq_len=4096), r, f).to_dict()
    assert d == api
    assert {"phases", "peak_phase", "fits", "kv_cache", "host_per_node", "warnings", "errors"} <= set(d)
    text = run_cli(*ARGS, "--strategy", "fsdp2")
    assert text.rc in (0, 1) and "actor fsdp2" in text.out


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (("--strategy", "fsdp2", "--param-offload"), "--param-offload is Megatron's offload; with --strategy fsdp2"),
        (("--strategy", "fsdp", "--tp", "2"), "--tp 2 with actor.strategy=fsdp"),
        (("--strategy", "fsdp", "--fsdp-size", "3"), "fsdp_size 3 must divide the 8 GPUs"),
        (("--strategy", "fsdp", "--fsdp-offload-policy"), "offload_policy=True is FSDP2's"),
        (("--strategy", "zero3"), "invalid choice"),
    ],
)
def test_cli_bad_fsdp_input_exits_2_in_one_line(extra, needle):
    res = run_cli(*ARGS, *extra)
    assert res.rc == 2, (res.out, res.err)
    assert needle in res.err and "Traceback" not in res.err


# ------------------------------------------------------------------------------ import-launcher: verl's launchers


@pytest.mark.parametrize(
    ("name", "strategy", "model", "fsdp"),
    [
        (
            "run_qwen3_8b_fsdp.sh",
            "fsdp",
            "Qwen3-8B",
            {"use_dynamic_bsz": True, "ppo_max_token_len_per_gpu": 24576, "use_remove_padding": True},
        ),
        (
            "run_qwen2_5_32b_fsdp.sh",
            "fsdp",
            "Qwen2.5-32B",
            {"use_remove_padding": False, "ppo_micro_batch_size_per_gpu": 2, "log_prob_micro_batch_size_per_gpu": 2},
        ),
        (
            "run_qwen3_30b_a3b_fsdp.sh",
            "fsdp2",
            "Qwen3-30B-A3B",
            {"param_offload": True, "optimizer_offload": True, "log_prob_max_token_len_per_gpu": 32768},
        ),
    ],
)
def test_import_public_fsdp_launchers_as_fsdp(name, strategy, model, fsdp):
    res = run_cli("import-launcher", str(LAUNCHERS / name), "--estimate", "--json")
    assert res.rc in (0, 1), res.err
    d = res.json()
    assert d["target"] == "verl-fsdp-grpo" and d["strategy"] == strategy and d["model_config"] == model
    for k, v in fsdp.items():
        assert d["fsdp"][k] == v, k
    assert d["estimate"] is None  # never a Megatron estimate
    assert not any("fsdp_config.param_offload" in w and "not read" in w for w in d["warnings"])
    # the estimate is the FSDP model's: the API on the same inputs
    spec = from_hf_config(model)
    f = FsdpOptions(**d["fsdp"])
    ngpu = d["ngpu"]
    r = RolloutOptions(**d["rollout"])
    o = TrainingOptions(**d["options"])
    act = fsdp_actor(spec, ngpu, o, f, r.seq_tokens, r.response_length / r.seq_tokens)
    assert d["fsdp_estimate"]["peak"] == round(act.peak)
    assert d["fsdp_estimate"]["params"] == round(trained_params(spec) * 4 / ngpu) * (0 if f.offload_policy else 1)
    assert d["rl_estimate"] == rl_estimate(spec, resolve(spec, ngpu, seq_len=o.seq_len), o, r, f).to_dict()
    assert d["rl_estimate"]["actor_strategy"] == strategy
    assert res.rc == (0 if d["fsdp_estimate"]["fits"] and d["rl_estimate"]["fits"] else 1)


def test_import_text_names_the_strategy_and_no_megatron_estimate():
    res = run_cli("import-launcher", str(LAUNCHERS / "run_qwen3_30b_a3b_fsdp.sh"), "--estimate", "--gpu-mem", "H200")
    assert "actor fsdp2" in res.out and "FSDP actor update (fsdp2)" in res.out
    assert "dist_opt" not in res.out


def test_import_bad_strategy_exits_2(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text(
        "python3 -m verl.trainer.main_ppo actor_rollout_ref.model.path=Qwen/Qwen3-8B "
        "actor_rollout_ref.actor.strategy=deepspeed trainer.n_gpus_per_node=8 trainer.nnodes=1\n"
    )
    res = run_cli("import-launcher", str(script))
    assert res.rc == 2 and "actor_rollout_ref.actor.strategy=deepspeed" in res.err
    assert "Traceback" not in res.err


def test_import_defaults_to_fsdp_without_a_strategy_key(tmp_path):
    """verl's ppo_trainer config: actor.strategy fsdp (main's _generated_ppo_trainer.yaml)."""
    script = tmp_path / "run.sh"
    script.write_text(
        "python3 -m verl.trainer.main_ppo actor_rollout_ref.model.path=Qwen/Qwen3-8B "
        "trainer.n_gpus_per_node=8 trainer.nnodes=1 actor_rollout_ref.actor.fsdp_config.fsdp_size=4\n"
    )
    d = json.loads(run_cli("import-launcher", str(script), "--json").out)
    assert d["strategy"] == "fsdp" and d["fsdp"]["fsdp_size"] == 4


# ------------------------------------------------------------------------------------ the oracle: torch FSDP2 (CPU)


def _fsdp2_worker(rank, world, model_name):
    """verl's apply_fsdp2 on an HF model from data/models (fp32 params, bf16 compute, fp32 reduce), one forward /
    backward / AdamW step: the bytes each rank holds and what stays gathered."""
    from torch import nn
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from torch.distributed.tensor import DTensor, Shard
    from transformers import AutoConfig, AutoModelForCausalLM

    from mlite.models.reader import load_config

    _, cfg = load_config(model_name)
    config = AutoConfig.for_model(**cfg)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("fsdp",))

    def placement(p):  # verl's get_shard_placement_fn: the first dim the group divides
        for i, s in enumerate(p.shape):
            if s % world == 0:
                return Shard(i)
        return Shard(0)

    kw = {
        "mesh": mesh,
        "mp_policy": MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32),
        "reshard_after_forward": True,
        "shard_placement_fn": placement,
    }
    layer_cls = set(model._no_split_modules)
    for m in list(model.modules()):
        if type(m).__name__ in layer_cls or (isinstance(m, nn.Embedding) and not config.tie_word_embeddings):
            fully_shard(m, **kw)
    fully_shard(model, **kw)
    layers = model.model.layers
    seen: dict = {}

    def unsharded(skip):
        return {
            n: (p.numel(), str(p.dtype))
            for n, p in model.named_parameters()
            if not isinstance(p, DTensor) and not n.startswith(skip)
        }

    def at_forward(m, a):  # after FSDP's own pre-forward (the all-gather); hooks return None
        seen.setdefault("fwd_layer1", {n: p for n, p in layers[1].named_parameters() if not isinstance(p, DTensor)})

    def at_backward(m, gi, go):
        seen.setdefault("bwd", unsharded("model.layers.0."))

    layers[1].register_forward_pre_hook(at_forward)
    layers[0].register_full_backward_hook(at_backward)

    def local_bytes(t):
        t = t._local_tensor if isinstance(t, DTensor) else t
        return t.numel() * t.element_size()

    params = sum(local_bytes(p) for p in model.parameters())
    ids = torch.randint(0, config.vocab_size, (1, 16))
    out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    opt.step()
    grads = sum(local_bytes(p.grad) for p in model.parameters())
    moments = sum(local_bytes(s[k]) for s in opt.state.values() for k in ("exp_avg", "exp_avg_sq"))
    layer_dtypes = sorted({str(p.dtype) for p in seen["fwd_layer1"].values()})
    gathered_numel = sum(p.numel() for p in seen["fwd_layer1"].values())
    return {
        "params": params,
        "grads": grads,
        "moments": moments,
        "numel": sum(p.numel() for p in model.parameters()),
        "gathered_layer_dtypes": layer_dtypes,
        "gathered_layer_numel": gathered_numel,
        "still_gathered_in_backward": seen["bwd"],
    }


@pytest.mark.parametrize("model_name", ["tiny-qwen2", "tiny-llama"])
def test_oracle_torch_fsdp2_sharded_bytes_and_the_root_unit(model_name):
    from mlite.runtime.dist import run_local

    spec = from_hf_config(model_name)
    f = FsdpOptions(strategy="fsdp2")
    world = 2
    act = fsdp_actor(spec, world, TrainingOptions(), f, 16)
    res = run_local(_fsdp2_worker, world, (model_name,), timeout_s=300)
    for r in res:
        assert r["numel"] == trained_params(spec)
        assert r["params"] == act.params  # fp32 shards, per rank
        assert r["grads"] == act.grads
        assert r["moments"] == act.exp_avg + act.exp_avg_sq
        assert r["gathered_layer_dtypes"] == ["torch.bfloat16"]  # a gathered unit is param_dtype
        assert r["gathered_layer_numel"] == spec.main_layers[1].params  # the whole layer, unsharded
        kept = r["still_gathered_in_backward"]  # the root (not resharded after forward) at the last layer's backward
        assert sum(n for n, _ in kept.values()) == root_params(spec, f)
        assert {d for _, d in kept.values()} == {"torch.bfloat16"}


def test_gib_sanity_qwen3_8b_update_per_gpu():
    """Qwen3-8B on 8 GPUs, FSDP, 24576-token micro-batches: 16 bytes x 8.2 B / 8 of state (about 15 GiB) plus the
    logits [24576, 151936] bf16 (about 7 GiB) and 36 layer inputs (about 7 GiB)."""
    spec = from_hf_config("Qwen3-8B")
    f = FsdpOptions(strategy="fsdp", use_dynamic_bsz=True, ppo_max_token_len_per_gpu=24576)
    a = fsdp_actor(spec, 8, TrainingOptions(), f, 3072)
    assert 14.5 < (a.params + a.grads + a.optimizer) / GIB < 16
    assert a.activations["logits"] / GIB == pytest.approx(24576 * 151936 * 2 / GIB)
    assert 30 < a.peak / GIB < 45


def test_padded_path_copies_the_response_logits_and_allocates_the_full_gradient():
    """dp_actor.py @ v0.7.0, not rmpad: ``logits[:, -R-1:-1, :]`` is a strided view; ``logprobs_from_logits``
    reshapes it (a contiguous bf16 copy of the R positions) and the slice's backward makes a zero gradient of the
    whole [b, P + R, V]."""
    spec, o = _spec(), TrainingOptions()
    P, R, rows = 1024, 3072, 2
    f = FsdpOptions(strategy="fsdp", use_remove_padding=False, ppo_micro_batch_size_per_gpu=rows)
    a = fsdp_actor(spec, 8, o, f, P + R, R / (P + R), verl_version=V07)
    T, V = rows * (P + R), spec.vocab_size
    assert a.activations["logits"] == T * V * 2
    assert a.activations["logits_response_copy"] == rows * R * V * 2
    assert a.transients["logits_grad"] == T * V * 2
    rm = fsdp_actor(spec, 8, o, replace(f, use_remove_padding=True), P + R, R / (P + R), verl_version=V07)
    assert "logits_response_copy" not in rm.activations and rm.transients["logits_grad"] == 0
    assert a.peak - rm.peak == pytest.approx(rows * R * V * 2, rel=1e-4)  # the gradient is not at the peak here


def test_fsdp_step_keeps_the_colocated_budget_terms():
    """The FSDP actor's step has main's engine terms: sibling contexts in every phase, and the resync export peak
    of an FSDP actor (``full_tensor()`` of the largest parameter in model_dtype, one copy: mlite/memory/rl_resync.py)."""
    spec = _spec()
    r = RolloutOptions(prompt_length=1024, response_length=1024, n=4, train_batch_size=128, sibling_contexts=2)
    f = FsdpOptions(strategy="fsdp2")
    est = rl_estimate(spec, _plan(spec), TrainingOptions(seq_len=2048), r, f)
    for p in est.phases.values():
        assert p.gpu["sibling_contexts"] == 2 * r.sibling_context_gib * GIB
    assert est.resync is not None and est.resync.gather == "fsdp" and est.resync.copies == 1
    biggest = max(g.numel for g in (*spec.pre, *spec.post, *(g for x in spec.main_layers for g in x.groups)))
    assert est.resync.to_dict()["tensor_bytes"] == biggest * 4


def test_engine_worker_padded_path_counts_the_fp32_entropy_and_the_unchanged_raw_logits():
    """verl >= 0.8 (engine_workers.py over transformer_impl.py @ 859c7129), use_remove_padding=False: forward_step
    keeps the model's bf16 logits while prepare_model_outputs divides them out of place; old_log_prob's eager
    entropy under autocast holds pd (fp32) and, inside logsumexp, an fp32 cast and an fp32 temporary: 8 bf16 [T, V]
    copies; the branch ignores use_torch_compile and the chunking flag. The reference (no entropy): raw, divided,
    the valid-position cat copy. The update (no entropy): the cat copy kept, then raw + divided or the two backward
    gradients. rmpad adds only the raw copy beside the out-of-place division."""
    from mlite.memory.rl_fsdp import engine_worker

    assert [engine_worker(v) for v in ("0.7.0", "0.7.1", "0.8", "0.9", "main")] == [False, False, True, True, True]
    spec, o = _spec(), TrainingOptions()
    T, V = 8192, spec.vocab_size
    b = T * V * 2
    f = FsdpOptions(strategy="fsdp2", use_remove_padding=False, use_dynamic_bsz=True, ppo_max_token_len_per_gpu=T)
    base = forward_only(spec, replace(f, use_fused_kernels=True), T, entropy=False, verl_version="0.9")
    stats = T * CE_STATS_BYTES
    ent = forward_only(spec, f, T, entropy=True, verl_version="0.9")
    assert ent - base == 8 * b
    for flags in ({"use_torch_compile": False}, {"entropy_from_logits_with_chunking": True}):
        assert forward_only(spec, replace(f, **flags), T, entropy=True, verl_version="0.9") == ent
    assert forward_only(spec, f, T, entropy=False, verl_version="0.9") - base == 3 * b
    assert ent > forward_only(spec, f, T, entropy=True, verl_version="0.7.0")
    up = fsdp_actor(spec, 8, o, f, 4096, verl_version="0.9")
    assert up.activations["logits_valid_copy"] == b and "logits" not in up.activations
    assert up.transients["logits_grad"] == 2 * b and up.activations["log_prob_stats"] == stats
    rm = replace(f, use_remove_padding=True)
    assert fsdp_actor(spec, 8, o, rm, 4096, verl_version="0.9").transients["logits_grad"] == b
    assert fsdp_actor(spec, 8, o, rm, 4096, verl_version="0.7.0").transients["logits_grad"] == 0
