"""The lite runtime's public API: configs (mlite names, one-line errors), checkpoint save/load (resume gives the
same next losses), export_weights, train/eval mode, memory_stats (bytes per parameter as documented), and the
local multi-process runner."""

from __future__ import annotations

import json

import pytest
import torch
from runtime_workers import runtime_config, same_bits, snapshot, synthetic_microbatches, train

from mlite.errors import MliteError
from mlite.runtime.config import MegatronLiteConfig, OptimizerConfig, RuntimeConfig
from mlite.runtime.dist import free_port, resolve_device, run_local


# ---------------------------------------------------------------------------------------------- configs
def test_config_names_defaults_and_json_roundtrip():
    cfg = RuntimeConfig(
        hf_path="tiny-moe",
        backend_cfg=MegatronLiteConfig(
            impl_cfg={"recompute": ["full"], "optimizer": "fsdp2"},
            optimizer=OptimizerConfig(
                use_precision_aware_optimizer=True, exp_avg_dtype=torch.bfloat16, offload_fraction=1.0
            ),
        ),
    )
    bc = cfg.backend_cfg
    assert (cfg.backend, bc.model_name, bc.impl) == ("mlite", "auto", "lite")
    assert (bc.parallel.tp, bc.parallel.pp, bc.parallel.cp, bc.parallel.ep, bc.parallel.etp) == (1, 1, 1, 1, None)
    assert bc.recompute == "full" and bc.optimizer_backend == "fsdp2"
    o = bc.optimizer
    assert o.exp_avg_dtype == "bf16" and o.pao and o.decoupled and o.fraction == 1.0 and o.clip_grad == 1.0
    d = json.loads(json.dumps(cfg.to_dict()))
    back = RuntimeConfig.from_dict(d)
    assert back.to_dict() == cfg.to_dict()
    assert back.backend_cfg.optimizer == o
    # impl_cfg's optimizer (verl's +engine.impl_cfg.optimizer) wins over OptimizerConfig.optimizer
    assert MegatronLiteConfig(impl_cfg={"optimizer": "dist_opt"}).optimizer_backend == "dist_opt"


@pytest.mark.parametrize(
    "make,needle",
    [
        (lambda: RuntimeConfig(), "hf_path"),
        (lambda: RuntimeConfig(hf_path="tiny-moe", backend="megatron"), "backend"),
        (lambda: RuntimeConfig(hf_path="tiny-moe", param_dtype="fp16"), "param_dtype"),
        (lambda: MegatronLiteConfig(impl="mcore"), "impl"),
        (lambda: MegatronLiteConfig(impl_cfg={"recompte": "full"}), "recompte"),
        (lambda: MegatronLiteConfig(impl_cfg={"recompute": "everything"}), "recompute"),
        (lambda: MegatronLiteConfig(impl_cfg={"optimizer": "zero3"}), "impl_cfg.optimizer"),
    ],
)
def test_config_errors_are_one_line_and_name_the_field(make, needle):
    with pytest.raises(MliteError) as e:
        make()
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_invalid_dist_opt_settings_and_unavailable_devices_are_refused_clearly():
    import torch.distributed as dist

    from mlite.runtime.config import OptimizerConfig

    was_up = dist.is_initialized()
    pao_ddp = OptimizerConfig(use_precision_aware_optimizer=True, use_distributed_optimizer=False)
    for bc, needle in (
        (dict(impl_cfg={"optimizer": "dist_opt"}, optimizer=pao_ddp), "needs the distributed optimizer"),
        (dict(optimizer=OptimizerConfig(optimizer="dist_opt", offload_fraction=0.5)), "offload_fraction"),
        (dict(optimizer=OptimizerConfig(main_grads_dtype="bf16")), "main_grads_dtype"),
    ):
        with pytest.raises(MliteError) as e:
            RuntimeConfig(hf_path="tiny-moe", device="cpu", backend_cfg=MegatronLiteConfig(**bc))
        assert needle in str(e.value) and "\n" not in str(e.value)
    assert dist.is_initialized() == was_up
    with pytest.raises(MliteError, match="device"):
        resolve_device("tpu")
    if torch.cuda.is_available():
        assert resolve_device("cuda").type == "cuda"
    else:
        with pytest.raises(MliteError, match="CUDA is not available"):
            resolve_device("cuda")
    assert resolve_device("cpu") == torch.device("cpu") and 0 < free_port() < 65536


ONE_PROCESS_GROUP = r"""
import os
import torch, torch.distributed as dist
from mlite.errors import MliteError
from mlite.runtime.dist import destroy_distributed, init_distributed
for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
    os.environ.pop(k, None)
info = init_distributed("cpu")
x = torch.ones(2)
dist.all_reduce(x)
store = dist.distributed_c10d._get_default_store()
print(info.world_size, x.tolist(), "MASTER_PORT" in os.environ, type(store.underlying_store).__name__)
destroy_distributed()
os.environ["WORLD_SIZE"] = "2"
try:
    init_distributed("cpu")
except MliteError as e:
    print(e)
"""


def test_a_one_process_group_binds_no_port_and_a_multi_process_one_needs_master_port():
    """Without torchrun the group lives on an in-process store: no TCPStore listens on a port chosen beforehand, so no
    other program can take it between choosing and binding (CI lost that race as EADDRINUSE). A multi-process run
    without ``MASTER_PORT`` is refused in one line."""
    import subprocess
    import sys

    res = subprocess.run([sys.executable, "-c", ONE_PROCESS_GROUP], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    first, second = res.stdout.strip().splitlines()
    assert first == "1 [1.0, 1.0] False HashStore"
    assert second.startswith("MASTER_PORT is not set for a multi-process run")


# ---------------------------------------------------------------------------------------------- runtime in 2 procs
def _api_worker(rank, world, tmp):
    from mlite.runtime.optim.optimizer import local
    from mlite.runtime.runtime import (
        create_runtime,
        eval_mode,
        export_weights,
        load_checkpoint,
        memory_stats,
        save_checkpoint,
        train_mode,
    )

    out = {}
    # ---- checkpoint: resume gives the same next losses and weights (fp32 master and PAO)
    for pao in (False, True):
        rt = create_runtime(runtime_config("tiny-moe", use_precision_aware_optimizer=pao))
        a = rt.build_model()
        train(a, 3, rank=rank)
        path = save_checkpoint(a, f"{tmp}/ckpt_pao{pao}")
        cont = [m["loss"] for m in train(a, 3, rank=rank, start=3)]
        b = create_runtime(runtime_config("tiny-moe", use_precision_aware_optimizer=pao, seed=123)).build_model()
        fresh_differs = same_bits(snapshot(a)["params"], snapshot(b)["params"]) != []
        load_checkpoint(b, path)
        resumed = [m["loss"] for m in train(b, 3, rank=rank, start=3)]
        sa, sb = snapshot(a), snapshot(b)
        out[f"ckpt{pao}"] = {
            "cont": cont,
            "resumed": resumed,
            "fresh_differs": fresh_differs,
            "params": same_bits(sa["params"], sb["params"]),
            "state": [n for n in sa["state"] if same_bits(sa["state"][n], sb["state"][n])],
            "counts": (a.optimizer.step_count, b.optimizer.step_count, a.scheduler.num_steps, b.scheduler.num_steps),
        }
    # loading a PAO checkpoint into an fp32-master run is refused in one line
    c = create_runtime(runtime_config("tiny-moe")).build_model()
    try:
        load_checkpoint(c, f"{tmp}/ckpt_paoTrue")
        out["layout_error"] = None
    except MliteError as e:
        out["layout_error"] = str(e)
    # a checkpoint saved before the first step (no optimizer state yet) loads, and state stays lazy
    d = create_runtime(runtime_config("tiny-moe", seed=7)).build_model()
    p0 = save_checkpoint(d, f"{tmp}/ckpt_step0")
    e = create_runtime(runtime_config("tiny-moe", seed=8)).build_model()
    load_checkpoint(e, p0)
    out["step0"] = (same_bits(snapshot(d)["params"], snapshot(e)["params"]), e.optimizer.initialized)

    # ---- export_weights: full tensors under the model's names; this rank's shard is its slice of them
    full = dict(export_weights(d))
    names = [n for n, _ in d.model.named_parameters()]
    shards_ok = []
    for n, p in d.model.named_parameters():
        loc = local(p).detach()
        rows = full[n].shape[0]
        start = 0 if rank == 0 else (rows + world - 1) // world  # torch.chunk split, as FSDP2 shards dim 0
        shards_ok.append(torch.equal(full[n][start : start + loc.shape[0]], loc.cpu()))
    out["export"] = {
        "names": list(full) == names,
        "shapes": all(tuple(full[n].shape) == tuple(p.shape) for n, p in d.model.named_parameters()),
        "shards": all(shards_ok),
        "device": {str(t.device) for t in full.values()},
    }
    train_mode(d)
    t1 = d.model.training
    eval_mode(d)
    out["modes"] = (t1, d.model.training)

    # ---- memory_stats: bytes per local parameter element as documented
    mem = {}
    for name, dtype, opts in [
        ("fp32_master", "bf16", {}),
        ("pao", "bf16", {"use_precision_aware_optimizer": True}),
        (
            "pao_bf16m",
            "bf16",
            {"use_precision_aware_optimizer": True, "exp_avg_dtype": "bf16", "exp_avg_sq_dtype": "bf16"},
        ),
        ("fp32_params", "fp32", {}),
    ]:
        rt = create_runtime(runtime_config("tiny-moe", param_dtype=dtype, **opts))
        h = rt.build_model()
        lazy = memory_stats(h)["optimizer_bytes"]
        train(h, 1, rank=rank)
        rt.forward_backward(h, synthetic_microbatches(1, rank))
        s = memory_stats(h)
        mem[name] = {
            "lazy": lazy,
            "numel": s["params"]["numel"],
            "params": s["params"]["bytes"],
            "grads": s["grads"]["bytes"],
            **{k: s[k]["bytes"] for k in ("master", "remainder", "exp_avg", "exp_avg_sq")},
            "total_state": s["optimizer_bytes"],
            "cuda": s["max_memory_allocated"],
            "rss": s["cpu_rss"],
        }
    out["mem"] = mem
    return out


@pytest.fixture(scope="module")
def api_results(tmp_path_factory):
    return run_local(_api_worker, 2, (str(tmp_path_factory.mktemp("ckpt")),), timeout_s=300)


@pytest.mark.slow
def test_checkpoint_resume_gives_identical_next_losses(api_results):
    for r in api_results:
        for pao in (False, True):
            c = r[f"ckpt{pao}"]
            assert c["fresh_differs"]  # the loaded model really started elsewhere
            assert c["resumed"] == c["cont"]  # exact float equality
            assert c["params"] == [] and c["state"] == []
            assert c["counts"] == (6, 6, 6, 6)
        assert "layout" in r["layout_error"] and "\n" not in r["layout_error"]
        assert r["step0"] == ([], False)


@pytest.mark.slow
def test_export_weights_and_modes(api_results):
    for r in api_results:
        assert r["export"] == {"names": True, "shapes": True, "shards": True, "device": {"cpu"}}
        assert r["modes"] == (True, False)


@pytest.mark.slow
def test_memory_stats_bytes_per_parameter(api_results):
    from mlite.models import from_hf_config

    total = from_hf_config("tiny-moe").training_params
    expect = {
        "fp32_master": (2, 2, 4, 0, 4, 4),
        "pao": (2, 2, 0, 2, 4, 4),
        "pao_bf16m": (2, 2, 0, 2, 2, 2),
        "fp32_params": (4, 4, 0, 0, 4, 4),
    }
    per_param = {"fp32_master": 16, "pao": 14, "pao_bf16m": 10, "fp32_params": 16}
    for name, (p, g, m, rem, ea, es) in expect.items():
        numels = [r["mem"][name]["numel"] for r in api_results]
        assert sum(numels) == total
        for r, n in zip(api_results, numels):
            s = r["mem"][name]
            assert s["lazy"] == 0  # optimizer state is allocated at the first step
            assert (s["params"], s["grads"], s["master"], s["remainder"], s["exp_avg"], s["exp_avg_sq"]) == (
                p * n,
                g * n,
                m * n,
                rem * n,
                ea * n,
                es * n,
            )
            assert s["params"] + s["grads"] + s["total_state"] == per_param[name] * n
            assert s["rss"] > 0 and s["cuda"] is None  # a CPU run: no CUDA allocator figures


def _failing_worker(rank, world):
    if rank == 1:
        raise ValueError("boom from rank 1")
    return rank


@pytest.mark.slow
def test_run_local_reports_a_failing_rank_with_its_traceback():
    with pytest.raises(RuntimeError) as e:
        run_local(_failing_worker, 2, timeout_s=60)
    assert "rank 1" in str(e.value) and "boom from rank 1" in str(e.value) and "ValueError" in str(e.value)
