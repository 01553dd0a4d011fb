"""Measured memory of the lite runtime, per optimizer mode: the figures the memory estimator is checked against.

For each mode (fp32 master, PAO remainders, PAO + bf16 moments, offload_fraction=1.0, PAO + offload) one process
builds the model, runs a few steps on random packed sequences and prints, next to each other: the bytes the
runtime holds by kind (``memory_stats``: params, grads, master / remainder, exp_avg, exp_avg_sq) and the allocator's
view (``memory_allocated`` after build, after the step, ``max_memory_allocated`` of the step). On CUDA the static
part (params + state after ``zero_grad``) must equal ``memory_allocated`` up to allocator rounding; the rest of the
peak is transient (gradients, unsharded units, activations, the update's chunk temporaries). Also prints step time.

    .venv/bin/python bench/runtime_memory.py --model tiny-moe --device cpu --seq 512 --steps 2
    python3 bench/runtime_memory.py --model qwen3-1.7b --device cuda --seq 4096 --steps 3 --json out.json
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from mlite.runtime.batch import PackedBatch
from mlite.runtime.config import MegatronLiteConfig, OptimizerConfig, RuntimeConfig
from mlite.runtime.runtime import create_runtime
from mlite.units import GIB

MODELS = {
    # Qwen3-1.7B's shape (tied embeddings): ~1.7 B parameters
    "qwen3-1.7b": {
        "model_type": "qwen3",
        "architectures": ["Qwen3ForCausalLM"],
        "hidden_size": 2048,
        "num_hidden_layers": 28,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "intermediate_size": 6144,
        "vocab_size": 151936,
        "tie_word_embeddings": True,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "max_position_embeddings": 40960,
    },
    # a small Qwen3-MoE: 32 experts, top-4, ~0.9 B parameters
    "qwen3-moe-small": {
        "model_type": "qwen3_moe",
        "architectures": ["Qwen3MoeForCausalLM"],
        "hidden_size": 1024,
        "num_hidden_layers": 12,
        "num_attention_heads": 16,
        "num_key_value_heads": 4,
        "head_dim": 64,
        "intermediate_size": 2816,
        "moe_intermediate_size": 512,
        "num_experts": 32,
        "num_experts_per_tok": 4,
        "norm_topk_prob": True,
        "vocab_size": 32000,
        "tie_word_embeddings": False,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "max_position_embeddings": 40960,
    },
}

MODES = {
    "fp32_master": {},
    "pao": {"use_precision_aware_optimizer": True},
    "pao_bf16_moments": {"use_precision_aware_optimizer": True, "exp_avg_dtype": "bf16", "exp_avg_sq_dtype": "bf16"},
    "offload_1.0": {"offload_fraction": 1.0},
    "pao_offload_1.0": {"use_precision_aware_optimizer": True, "offload_fraction": 1.0},
}


def batch(seq: int, vocab: int, seed: int) -> PackedBatch:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (seq,), generator=g).tolist()
    return PackedBatch.from_sequences([ids])


def measure(model, mode: str, device: str, seq: int, steps: int) -> dict:
    cuda = device == "cuda"
    cfg = RuntimeConfig(
        hf_path=MODELS.get(model, model),
        device=device,
        param_dtype="bf16",
        backend_cfg=MegatronLiteConfig(optimizer=OptimizerConfig(lr=1e-4, **MODES[mode])),
    )
    rt = create_runtime(cfg)
    if cuda:
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
    h = rt.build_model()
    vocab = h.spec.vocab_size
    rec = {"model": model, "mode": mode, "device": device, "seq": seq, "numel": None, "steps": []}
    if cuda:
        torch.cuda.synchronize()
        rec["allocated_after_build"] = torch.cuda.memory_allocated() - base
    for k in range(steps):
        if cuda:
            torch.cuda.reset_peak_memory_stats()
            torch.cuda.synchronize()
        t = time.perf_counter()
        rt.forward_backward(h, [batch(seq, vocab, k)])
        with_grads = rt.memory_stats(h)
        if cuda:
            torch.cuda.synchronize()
        t_fb = time.perf_counter() - t
        ok, norm, _ = rt.optimizer_step(h)
        rt.zero_grad(h)
        if cuda:
            torch.cuda.synchronize()
        dt = time.perf_counter() - t
        s = rt.memory_stats(h)
        step = {
            "step": k,
            "time_s": round(dt, 4),
            "forward_backward_s": round(t_fb, 4),
            "optimizer_s": round(dt - t_fb, 4),
            "tokens_per_s": round(seq / dt, 1),
            "ok": ok,
            "grad_norm": round(norm, 4),
            "grads_bytes": with_grads["grads"]["bytes"],
        }
        for key in ("params", "master", "remainder", "exp_avg", "exp_avg_sq"):
            step[key] = s[key]["by_device"]
        step["optimizer_bytes"] = s["optimizer_bytes"]
        if cuda:
            step["max_allocated"] = torch.cuda.max_memory_allocated() - base
            step["allocated_after_step"] = torch.cuda.memory_allocated() - base
            on_gpu = s["params"]["by_device"].get(str(rt.device), 0) + sum(
                s[k]["by_device"].get(str(rt.device), 0) for k in ("master", "remainder", "exp_avg", "exp_avg_sq")
            )
            step["static_runtime_bytes_on_gpu"] = on_gpu
        step["cpu_rss"] = s["cpu_rss"]
        rec["steps"].append(step)
        rec["numel"] = s["params"]["numel"]
    del h
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    return rec


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny-moe", help="data/models name, or one of " + ", ".join(MODELS))
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--json", default=None, help="write all records here")
    a = ap.parse_args()
    torch.manual_seed(0)
    out = []
    for mode in a.modes.split(","):
        rec = measure(a.model, mode, a.device, a.seq, a.steps)
        out.append(rec)
        last = rec["steps"][-1]
        parts = ", ".join(
            f"{k}={v / GIB:.3f}@{d}"
            for k in ("master", "remainder", "exp_avg", "exp_avg_sq")
            for d, v in last[k].items()
        )
        line = (
            f"{a.model:16s} {mode:18s} N={rec['numel'] / 1e9:.3f}B params={sum(last['params'].values()) / GIB:.3f}"
            f" grads={last['grads_bytes'] / GIB:.3f} state={last['optimizer_bytes'] / GIB:.3f} GiB ({parts})"
        )
        if a.device == "cuda":
            line += (
                f" | gpu static {last['static_runtime_bytes_on_gpu'] / GIB:.3f} allocated "
                f"{last['allocated_after_step'] / GIB:.3f} peak {last['max_allocated'] / GIB:.3f} GiB"
            )
        line += (
            f" | {last['tokens_per_s']:.0f} tok/s (fwd+bwd {last['forward_backward_s']:.3f} s, "
            f"optimizer {last['optimizer_s']:.3f} s)"
        )
        print(line, flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1))
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
