"""Speed of the lite runtime on one GPU next to Hugging Face transformers + plain FSDP2, in the same process.

    python3 bench/gpu_speed.py --out bench/results/gpu_speed_raw.json      # on the GPU
    .venv/bin/python bench/gpu_speed.py --report bench/results/gpu_speed_raw.json --csv bench/results/gpu_speed.csv

Sections (each timed, each kept when a later one fails):
  throughput  the ~1 B dense model (bench/gpu_configs.py DENSE_1B), bf16, one 4096-token sequence per micro-batch,
              4 micro-batches per optimizer step: the lite runtime (fsdp2, fp32 master) and transformers'
              Qwen3ForCausalLM with the same config under fully_shard per decoder layer + root
              (MixedPrecisionPolicy bf16 compute, fp32 reduce; fp32 parameters; torch AdamW fused): tokens/s of
              whole optimizer steps (3 warm-up, 6 timed) and MFU = model FLOPs/token x tokens/s / 989 TFLOP/s.
  offload     offload_fraction 1.0 vs 0 step time (DENSE_SMALL), and the runtime context offload round trip
              (params + optimizer state to CPU and back) in seconds per GB moved.
  pao_bitwise tiny-dense in bf16 on CUDA, PAO vs fp32 master, 20 steps in lockstep (same gradient bits): losses and
              weights bitwise equal.
  fla         whether flash-linear-attention's chunk kernels run forward and backward on this GPU, and which path the
              lite runtime's Gated DeltaNet takes.
"""

from __future__ import annotations

import argparse
import csv
import gc
import json
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_configs import DENSE_1B, DENSE_SMALL  # noqa: E402

PEAK_BF16 = 989e12
"""H100/H200 SXM dense bf16 peak (vendor datasheet), the MFU denominator."""
CMD = "python3 bench/gpu_speed.py --out bench/results/gpu_speed_raw.json"
REPORT = "python3 bench/gpu_speed.py --report bench/results/gpu_speed_raw.json --csv bench/results/gpu_speed.csv"


def _batches(seq, n, vocab, seed=0):
    import torch

    from mlite.runtime.batch import PackedBatch

    g = torch.Generator().manual_seed(seed)
    return [PackedBatch.from_sequences([torch.randint(0, vocab, (seq,), generator=g).tolist()]) for _ in range(n)]


def _time_steps(step, warm, iters):
    import torch

    for _ in range(warm):
        step()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(iters):
        step()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / iters


class _Phases:
    """Wall time of the forward+backward and the optimizer phase of a step, averaged over the recorded steps."""

    def __init__(self):
        self.total = {"forward_backward": 0.0, "optimizer": 0.0}
        self.steps = 0

    def run(self, forward_backward, optimizer, record: bool) -> None:
        import torch

        t = time.perf_counter()
        forward_backward()
        if record:
            torch.cuda.synchronize()
            self.total["forward_backward"] += time.perf_counter() - t
            t = time.perf_counter()
        optimizer()
        if record:
            torch.cuda.synchronize()
            self.total["optimizer"] += time.perf_counter() - t
            self.steps += record

    def mean(self) -> dict:
        return {k: v / max(1, self.steps) for k, v in self.total.items()}


def lite_throughput(cfg, seq, n_mb, opt=None, warm=3, iters=6):
    import torch

    from mlite.models import from_hf_config
    from mlite.runtime.config import MegatronLiteConfig, OptimizerConfig, RuntimeConfig
    from mlite.runtime.runtime import create_runtime

    rt = create_runtime(RuntimeConfig(hf_path=cfg, device="cuda", param_dtype="bf16", backend_cfg=MegatronLiteConfig(
        optimizer=OptimizerConfig(lr=1e-4, **(opt or {})))))
    h = rt.build_model()
    mbs = [b.to("cuda") for b in _batches(seq, n_mb, cfg["vocab_size"])]

    phases = _Phases()

    def optimizer():
        rt.optimizer_step(h)
        rt.zero_grad(h)

    def step(record=False):
        phases.run(lambda: rt.forward_backward(h, mbs, num_microbatches=n_mb), optimizer, record)

    torch.cuda.reset_peak_memory_stats()
    dt = _time_steps(step, warm, iters)
    for _ in range(2):
        step(record=True)
    spec = from_hf_config(cfg)
    tokens = seq * n_mb
    out = {"step_s": dt, "tokens_per_s": tokens / dt, "flops_per_token": spec.flops_per_token(seq),
           "mfu": spec.flops_per_token(seq) * tokens / dt / PEAK_BF16, "peak_bytes": torch.cuda.max_memory_allocated(),
           "phase_s": phases.mean()}
    return out, rt, h


def hf_fsdp2_throughput(cfg, seq, n_mb, warm=3, iters=6):
    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from transformers import AutoConfig, AutoModelForCausalLM

    from mlite.models import from_hf_config

    c = {k: v for k, v in cfg.items() if k not in ("architectures", "model_type")}
    hc = AutoConfig.for_model(cfg["model_type"], **c)
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(hc, dtype=torch.float32, attn_implementation="sdpa")
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in model.model.layers:
        fully_shard(layer, mp_policy=mp)
    fully_shard(model, mp_policy=mp)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    g = torch.Generator().manual_seed(0)
    ids = [torch.randint(0, cfg["vocab_size"], (1, seq), generator=g).cuda() for _ in range(n_mb)]

    phases = _Phases()

    def forward_backward():
        for x in ids:
            (model(input_ids=x, labels=x).loss / n_mb).backward()

    def optimizer():
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    def step(record=False):
        phases.run(forward_backward, optimizer, record)

    torch.cuda.reset_peak_memory_stats()
    dt = _time_steps(step, warm, iters)
    for _ in range(2):
        step(record=True)
    spec = from_hf_config(cfg)
    tokens = seq * n_mb
    res = {"step_s": dt, "tokens_per_s": tokens / dt, "mfu": spec.flops_per_token(seq) * tokens / dt / PEAK_BF16,
           "peak_bytes": torch.cuda.max_memory_allocated(), "phase_s": phases.mean()}
    return res


def sec_throughput(res, n_mb=4, key="throughput", warm=3, iters=6):
    import torch

    lite, rt, h = lite_throughput(DENSE_1B, 4096, n_mb, warm=warm, iters=iters)
    del h, rt
    gc.collect()
    torch.cuda.empty_cache()
    hf = hf_fsdp2_throughput(DENSE_1B, 4096, n_mb, warm=warm, iters=iters)
    gc.collect()
    torch.cuda.empty_cache()
    res[key] = {"model": "dense-1b", "seq": 4096, "microbatches": n_mb, "lite": lite, "hf_fsdp2": hf,
                "ratio_lite_over_hf": lite["tokens_per_s"] / hf["tokens_per_s"]}


def sec_offload(res):
    import torch

    out = {}
    for name, opt in (("offload_0", {}), ("offload_1.0", {"offload_fraction": 1.0})):
        r, rt, h = lite_throughput(DENSE_SMALL, 4096, 1, opt, warm=1, iters=2)
        out[name] = r
        if name == "offload_0":
            stats = rt.memory_stats(h)
            moved = stats["params"]["bytes"] + stats["optimizer_bytes"]
            rt.zero_grad(h)
            torch.cuda.synchronize()
            t = time.perf_counter()
            rt.to(h, "cpu")
            torch.cuda.synchronize()
            t_off = time.perf_counter() - t
            t = time.perf_counter()
            rt.to(h, "cuda")
            torch.cuda.synchronize()
            t_on = time.perf_counter() - t
            out["runtime_offload"] = {"bytes": moved, "to_cpu_s": t_off, "to_gpu_s": t_on,
                                      "roundtrip_s_per_gb": (t_off + t_on) / (moved / 1e9)}
        del h, rt
        gc.collect()
        torch.cuda.empty_cache()
    out["offload_overhead_x"] = out["offload_1.0"]["step_s"] / out["offload_0"]["step_s"]
    res["offload"] = out


def sec_pao(res, device="cuda"):
    """PAO vs fp32 master in lockstep: both runs get the same gradient bits every step (CUDA backward uses atomics,
    so two independent backward passes differ in the last bits); the forward is deterministic, so equal weights give
    equal losses. What is compared is the optimizer arithmetic on the bf16 CUDA path."""
    import torch

    from mlite.runtime.config import MegatronLiteConfig, OptimizerConfig, RuntimeConfig
    from mlite.runtime.data import sft_iterator
    from mlite.runtime.runtime import create_runtime

    runs = []
    for opt in ({}, {"use_precision_aware_optimizer": True}):
        rt = create_runtime(RuntimeConfig(hf_path="tiny-dense", device=device, param_dtype="bf16",
                                          backend_cfg=MegatronLiteConfig(optimizer=OptimizerConfig(lr=2e-3, **opt))))
        runs.append((rt, rt.build_model()))
    (ra, a), (rb, b) = runs
    it = sft_iterator(tokens_per_microbatch=1024, seed=0)
    la, lb = [], []
    for _ in range(20):
        mbs = [x.to(device) for x in next(it)]
        la.append(float(ra.forward_backward(a, mbs)["loss"]))
        lb.append(float(rb.forward_backward(b, mbs)["loss"]))
        with torch.no_grad():
            for pa, pb in zip(a.model.parameters(), b.model.parameters()):
                pb.grad.to_local().copy_(pa.grad.to_local())
        for rt, h in runs:
            rt.optimizer_step(h)
            rt.zero_grad(h)
    same_w = all(torch.equal(pa.detach().to_local(), pb.detach().to_local())
                 for pa, pb in zip(a.model.parameters(), b.model.parameters()))
    res["pao_bitwise"] = {"losses_equal": la == lb, "weights_equal": bool(same_w), "first_loss": la[0],
                          "last_loss": la[-1], "steps": 20}
    del runs, a, b


def sec_fla(res):
    import torch
    import torch.nn.functional as F

    out = {}
    try:
        import triton

        out["triton"] = triton.__version__
        import importlib

        from fla.ops.gated_delta_rule import chunk_gated_delta_rule

        out["fla"] = getattr(importlib.import_module("fla"), "__version__", "?")
        T, H, D = 512, 4, 64
        g = torch.Generator(device="cuda").manual_seed(0)
        q, k, v = (torch.randn(1, T, H, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3))
        gg = -F.softplus(torch.randn(1, T, H, device="cuda", generator=g))
        beta = torch.sigmoid(torch.randn(1, T, H, device="cuda", generator=g)).bfloat16()
        xs = [x.requires_grad_() for x in (q, k, v, gg, beta)]
        try:
            o, _ = chunk_gated_delta_rule(*xs[:3], xs[3], xs[4], use_qk_l2norm_in_kernel=True)
            out["forward"] = "ok"
            try:
                o.float().sum().backward()
                out["backward"] = "ok"
            except Exception as e:  # noqa: BLE001
                out["backward"] = f"refused: {type(e).__name__}: {str(e).splitlines()[0][:300]}"
        except Exception as e:  # noqa: BLE001
            out["forward"] = f"refused: {type(e).__name__}: {str(e).splitlines()[0][:300]}"
    except Exception as e:  # noqa: BLE001
        out["import"] = f"{type(e).__name__}: {e}"[:300]
    from mlite.runtime import gdn

    out["lite_backend"] = gdn.backend_for(torch.device("cuda"), torch.bfloat16)
    res["fla"] = out


def measure(a) -> int:
    import torch

    res = {"gpu": torch.cuda.get_device_name(), "torch_version": torch.__version__, "command": CMD}
    t0 = time.perf_counter()
    sections = (("throughput", sec_throughput), ("pao_bitwise", sec_pao), ("offload", sec_offload), ("fla", sec_fla),
                ("throughput_8mb", lambda r: sec_throughput(r, 8, "throughput_8mb", 2, 4)))
    wanted = set(a.only.split(",")) if a.only else None
    if a.merge and Path(a.merge).exists():
        earlier = json.loads(Path(a.merge).read_text())
        res.update({k: v for k, v in earlier.items() if k not in res})
        res["command"] = f"{earlier.get('command', '')} && {CMD} --merge {a.merge} --only {a.only}"
    for name, fn in sections:
        if wanted and name not in wanted:
            continue
        if time.perf_counter() - t0 > a.deadline_s:
            res[name] = {"skipped": "deadline"}
            continue
        t = time.perf_counter()
        try:
            fn(res)
        except Exception as e:  # noqa: BLE001 -- keep the other sections
            traceback.print_exc()
            res[name] = {"error": f"{type(e).__name__}: {e}"[:600]}
        print(f"== {name} ({time.perf_counter() - t:.1f} s): {json.dumps(res.get(name), default=str)[:600]}",
              flush=True)
        Path(a.out).write_text(json.dumps(res, indent=1, default=str))
    import torch.distributed as dist

    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
    return 0


def report(a) -> int:
    r = json.loads(Path(a.report).read_text())
    rows = []
    for key in ("throughput", "throughput_8mb"):
        tp = r.get(key, {})
        if "lite" not in tp:
            continue
        tag = f"dense-1b seq4096 x{tp['microbatches']}"
        for who in ("lite", "hf_fsdp2"):
            rows.append({"measurement": f"{tag} tokens/s ({who})", "value": round(tp[who]["tokens_per_s"]),
                         "unit": "tokens/s"})
            rows.append({"measurement": f"{tag} MFU ({who})", "value": round(tp[who]["mfu"], 4),
                         "unit": "fraction of 989 TFLOP/s"})
            for phase, sec in (tp[who].get("phase_s") or {}).items():
                rows.append({"measurement": f"{tag} {phase} time per step ({who})", "value": round(sec, 4),
                             "unit": "s"})
        rows.append({"measurement": f"{tag} lite / hf_fsdp2 tokens/s", "value": round(tp["ratio_lite_over_hf"], 3),
                     "unit": "ratio"})
    off = r.get("offload", {})
    if "offload_overhead_x" in off:
        rows.append({"measurement": "dense-small step time offload_fraction 1.0 / 0", "value":
                     round(off["offload_overhead_x"], 2), "unit": "ratio"})
        rows.append({"measurement": "runtime offload round trip", "value":
                     round(off["runtime_offload"]["roundtrip_s_per_gb"], 4), "unit": "s per GB"})
    pao = r.get("pao_bitwise", {})
    if "losses_equal" in pao:
        rows.append({"measurement": "PAO vs fp32 master, 20 steps bf16 CUDA: losses and weights bitwise equal",
                     "value": int(pao["losses_equal"] and pao["weights_equal"]), "unit": "1 = yes"})
    for row in rows:
        row.update(gpu=r["gpu"], torch_version=r["torch_version"], command=f"{r['command']} && {REPORT}")
        print(f"{row['measurement']:70s} {row['value']} {row['unit']}")
    print("fla:", json.dumps(r.get("fla")))
    if a.csv and rows:
        with open(a.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="measure on this GPU and write the raw JSON here")
    ap.add_argument("--report", default=None, help="summarise a raw JSON into the CSV")
    ap.add_argument("--csv", default=None)
    ap.add_argument("--deadline-s", type=float, default=150.0)
    ap.add_argument("--only", default="", help="comma-separated sections")
    ap.add_argument("--merge", default=None, help="start from an earlier raw JSON (sections run now replace its)")
    a = ap.parse_args()
    return report(a) if a.report else measure(a)


if __name__ == "__main__":
    raise SystemExit(main())
