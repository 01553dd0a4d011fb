"""FSDP2 in the lite runtime (2 processes, gloo, CPU): sharding over the dense and expert meshes, mixed precision,
loss normalisation over the global batch (checked against an unsharded model fed the whole global batch),
gradient accumulation, global grad norm / num_zeros, skip on non-finite norm, every model kind trains, and the
parallel settings the lite runtime refuses."""

from __future__ import annotations

import pytest
import torch
from runtime_workers import runtime_config, same_bits, synthetic_microbatches, train

from mlite.errors import MliteError
from mlite.runtime.config import MegatronLiteConfig, OptimizerConfig, RuntimeConfig
from mlite.runtime.dist import run_local
from mlite.runtime.fsdp import check_lite_parallel


def _oracle_grads(model_name: str, seed: int, mbs_all: list, dtype=torch.float32) -> dict:
    """Gradients of an unsharded model on the whole global batch, loss = sum of token losses / global tokens."""
    from mlite.runtime.models import build_lite_model

    m = build_lite_model(model_name, param_dtype=dtype, device="cpu", seed=seed)
    total = sum(mb.num_loss_tokens() for mb in mbs_all)
    for mb in mbs_all:
        loss_sum, _ = m.loss(mb)
        (loss_sum / total).backward()
    return {n: p.grad.detach().clone() for n, p in m.named_parameters()}, m


def _fsdp_worker(rank, world):
    from torch.distributed.tensor import DTensor, Shard

    from mlite.runtime.optim.optimizer import ShardedAdamW, local
    from mlite.runtime.runtime import create_runtime

    out = {}
    # ---- sharding facts + normalisation oracle (fp32 params so the comparison is tight)
    rt = create_runtime(runtime_config("tiny-moe", param_dtype="fp32", clip_grad=0.0, lr_warmup_steps=0))
    h = rt.build_model()
    facts = {
        "dtensor": all(isinstance(p, DTensor) for p in h.model.parameters()),
        "shard0": all(tuple(p.placements) == (Shard(0),) for p in h.model.parameters()),
        "mesh_names": sorted({(s.expert, p.device_mesh.mesh_dim_names) for s in h.optimizer.slots for p in [s.param]}),
        "local_numel": sum(local(p).numel() for p in h.model.parameters()),
        "global_numel": sum(p.numel() for p in h.model.parameters()),
        "n_expert_params": sum(s.expert for s in h.optimizer.slots),
        "reduce_dtype": str(h.model.blocks[0]._get_fsdp_state()._fsdp_param_group.mp_policy.reduce_dtype),
    }
    mbs = {r: synthetic_microbatches(0, r, num_microbatches=2) for r in range(world)}
    metrics = rt.forward_backward(h, mbs[rank])
    fsdp_grads = {n: p.grad.full_tensor() for n, p in h.model.named_parameters()}
    norm, zeros = rt.grad_norm(h)
    oracle, plain = _oracle_grads("tiny-moe", 0, mbs[0] + mbs[1])
    total = sum(mb.num_loss_tokens() for mb in mbs[0] + mbs[1])
    with torch.no_grad():
        ref_loss = sum(float(plain.loss(mb)[0]) for mb in mbs[0] + mbs[1]) / total
    facts.update(
        loss=metrics["loss"],
        ref_loss=ref_loss,
        num_tokens=metrics["num_tokens"],
        ref_tokens=total,
        norm=norm,
        ref_norm=float(torch.nn.utils.get_total_norm(list(oracle.values()))),
        zeros=zeros,
        ref_zeros=sum(int((g == 0).sum()) for g in fsdp_grads.values()),
    )
    facts["max_grad_err"] = max(
        float((fsdp_grads[n] - oracle[n]).abs().max() / (oracle[n].abs().max() + 1e-12)) for n in oracle
    )
    # one update: sharded update == the same AdamW on the unsharded oracle model
    ok, _, _ = rt.optimizer_step(h)
    ref_opt = ShardedAdamW(plain.named_parameters(), rt.cfg.optimizer, expert_names=set(), device="cpu")
    ref_opt.step(lr=h.scheduler.lr)
    facts["ok"] = ok
    facts["max_param_err"] = max(
        float((p.full_tensor() - dict(plain.named_parameters())[n]).abs().max()) for n, p in h.model.named_parameters()
    )
    rt.zero_grad(h)
    # forward_only: same loss as the forward of a training call, no gradients
    ev = rt.forward_backward(h, mbs[rank], forward_only=True)
    facts["eval_grads"] = any(p.grad is not None for p in h.model.parameters())
    tr = rt.forward_backward(h, mbs[rank])
    facts["eval_loss"], facts["train_loss"] = ev["loss"], tr["loss"]
    rt.zero_grad(h)
    # gradient accumulation: one PackedBatch split in 2 micro-batches == the same sequences as 1 micro-batch
    from mlite.runtime.batch import PackedBatch

    one = PackedBatch.concat(mbs[rank])
    a = rt.forward_backward(h, one, num_microbatches=1)
    ga = {n: p.grad.full_tensor() for n, p in h.model.named_parameters()}
    rt.zero_grad(h)
    b = rt.forward_backward(h, one, num_microbatches=2)
    gb = {n: p.grad.full_tensor() for n, p in h.model.named_parameters()}
    rt.zero_grad(h)
    facts["accum_loss"] = (a["loss"], b["loss"], a["num_microbatches"], b["num_microbatches"])
    facts["accum_err"] = max(float((ga[n] - gb[n]).abs().max()) for n in ga)
    out["fp32"] = facts

    # ---- bf16 run: grads stored in the param dtype; non-finite norm skips the update
    rt = create_runtime(runtime_config("tiny-moe", param_dtype="bf16"))
    h = rt.build_model()
    train(h, 2, rank=rank)
    rt.forward_backward(h, synthetic_microbatches(5, rank))
    skip = {"grad_dtypes": sorted({str(p.grad.dtype) for p in h.model.parameters()})}
    before = {n: local(p).detach().clone() for n, p in h.model.named_parameters()}
    state_before = {s.name: s.state["exp_avg"].clone() for s in h.optimizer.slots}
    steps_before, lr_steps = h.optimizer.step_count, h.scheduler.num_steps
    for bad in (float("inf"), float("nan")):
        if rank == 0:
            local(h.model.blocks[1].mlp.experts.down_proj.grad).view(-1)[0] = bad
        skip[str(bad)] = rt.optimizer_step(h)
    after = {n: local(p).detach().clone() for n, p in h.model.named_parameters()}
    skip["params_changed"] = same_bits(before, after)
    skip["state_changed"] = same_bits(state_before, {s.name: s.state["exp_avg"] for s in h.optimizer.slots})
    skip["counts"] = (h.optimizer.step_count - steps_before, h.scheduler.num_steps - lr_steps)
    rt.zero_grad(h)
    m = rt.train_step(h, synthetic_microbatches(6, rank))
    skip["recovered"] = m["ok"]
    out["skip"] = skip

    # ---- every model kind trains (bf16, experts over EDP)
    out["train"] = {}
    for name in ("tiny-dense", "tiny-moe", "tiny-hybrid"):
        h = create_runtime(runtime_config(name, param_dtype="bf16")).build_model()
        out["train"][name] = [m["loss"] for m in train(h, 12, rank=rank)]
    return out


@pytest.fixture(scope="module")
def fsdp_results():
    return run_local(_fsdp_worker, 2, timeout_s=300)


@pytest.mark.slow
def test_params_are_sharded_over_dense_and_expert_meshes(fsdp_results):
    f0, f1 = fsdp_results[0]["fp32"], fsdp_results[1]["fp32"]
    from mlite.models import from_hf_config

    assert f0["dtensor"] and f0["shard0"]
    assert f0["mesh_names"] == [(False, ("dp_cp",)), (True, ("dp_cp",))]  # EP = 1: the experts in their block's unit
    assert f0["n_expert_params"] == 2 * 4  # gate_up_proj + down_proj per MoE layer
    assert f0["global_numel"] == from_hf_config("tiny-moe").training_params
    assert f0["local_numel"] + f1["local_numel"] == f0["global_numel"]
    assert f0["local_numel"] < f0["global_numel"]
    assert f0["reduce_dtype"] == "torch.float32"


@pytest.mark.slow
def test_loss_and_grads_normalised_over_the_global_batch(fsdp_results):
    for f in (r["fp32"] for r in fsdp_results):
        assert f["num_tokens"] == f["ref_tokens"]
        assert f["loss"] == pytest.approx(f["ref_loss"], rel=1e-5)
        assert f["max_grad_err"] < 1e-4
        assert f["norm"] == pytest.approx(f["ref_norm"], rel=1e-4)
        assert f["zeros"] == f["ref_zeros"]
        assert f["ok"] and f["max_param_err"] < 1e-5
    assert fsdp_results[0]["fp32"]["norm"] == fsdp_results[1]["fp32"]["norm"]


@pytest.mark.slow
def test_forward_only_and_gradient_accumulation(fsdp_results):
    f = fsdp_results[0]["fp32"]
    assert not f["eval_grads"] and f["eval_loss"] == f["train_loss"]
    la, lb, na, nb = f["accum_loss"]
    assert (na, nb) == (1, 2) and la == pytest.approx(lb, rel=1e-6)
    assert f["accum_err"] < 1e-6


@pytest.mark.slow
def test_non_finite_grad_norm_skips_the_update(fsdp_results):
    for s in (r["skip"] for r in fsdp_results):
        assert s["grad_dtypes"] == ["torch.bfloat16"]  # sharded grads in the param dtype
        ok, norm, _ = s["inf"]
        assert ok is False and norm == float("inf")
        ok, norm, _ = s["nan"]
        assert ok is False and norm != norm
        assert s["params_changed"] == [] and s["state_changed"] == []
        assert s["counts"] == (0, 0)
        assert s["recovered"] is True


@pytest.mark.slow
def test_every_model_kind_trains(fsdp_results):
    for name, losses in fsdp_results[0]["train"].items():
        assert sum(losses[-3:]) / 3 < sum(losses[:3]) / 3 - 0.2, (name, losses)
        assert losses == fsdp_results[1]["train"][name]


@pytest.mark.parametrize(
    "kw,needle", [(dict(pp=2), "parallel.pp=2"), (dict(vpp=2), "parallel.vpp=2"), (dict(etp=2), "parallel.etp=2")]
)
def test_unsupported_parallelism_is_a_clear_error(kw, needle):
    from mlite.mesh import ParallelConfig
    from mlite.runtime.runtime import create_runtime

    with pytest.raises(MliteError) as e:
        check_lite_parallel(ParallelConfig(**kw))
    assert needle in str(e.value) and "real mlite" in str(e.value)
    import torch.distributed as dist

    cfg = RuntimeConfig(
        hf_path="tiny-dense",
        device="cpu",
        backend_cfg=MegatronLiteConfig(parallel=ParallelConfig(**kw), optimizer=OptimizerConfig()),
    )
    was_up = dist.is_initialized()
    with pytest.raises(MliteError):  # refused before any process group is created
        create_runtime(cfg)
    assert dist.is_initialized() == was_up
