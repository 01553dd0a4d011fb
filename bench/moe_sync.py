"""Host syncs left in one MoE layer and one lite training micro-batch on CUDA (issue 31), and the layer's time.

    python3 bench/moe_sync.py --out DIR                 # on the GPU: DIR/moe_sync_raw.json
    python3 bench/moe_sync.py --out DIR --device cpu --only layer --tokens 256 --iters 2   # CPU smoke (no counts)
    python3 bench/moe_sync.py --report DIR/moe_sync_raw.json --csv DIR/moe_sync.csv

1. One MoE layer of bench/gpu_configs.py MOE_SMALL (hidden 1024, 32 experts top-4, 4096 tokens, bf16, the expert path
   the build picks) under ``torch.cuda.set_sync_debug_mode("warn")``: syncs counted in the forward and in the
   backward, each with the source line that made it.
2. The same count over one whole lite-runtime micro-batch (``forward_backward``, fsdp2, MOE_SMALL) and one
   ``optimizer_step``: what is left outside the MoE layer.
3. The layer's forward + backward time, this dispatch against the one before issue 31 (``bincount`` counts, an
   indexing gather whose backward sorts and accumulates), written out here as the baseline.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_configs import MOE_SMALL
from result_csv import COLUMNS

REPORT_CMD = "python3 bench/moe_sync.py --report bench/results/moe_sync_raw.json --csv bench/results/moe_sync.csv"


def _layer(device):
    import torch

    from mlite.runtime.models.moe import MoE, expert_path

    c = MOE_SMALL
    m = MoE(
        c["hidden_size"],
        c["num_experts"],
        c["num_experts_per_tok"],
        c["moe_intermediate_size"],
        expert_path=expert_path(device, torch.bfloat16),
        device=device,
        dtype=torch.bfloat16,
    )
    for p in m.parameters():
        torch.nn.init.normal_(p, std=0.02)
    return m


def _legacy_forward(m, x):
    """The dispatch before issue 31 (bincount + indexing gather), the timing baseline."""
    import torch

    T, H = x.shape
    k, E = m.top_k, m.num_experts
    _, weights, ids = m.route(x)
    flat = ids.reshape(-1)
    order = torch.argsort(flat, stable=True)
    counts = torch.bincount(flat, minlength=E)
    xs = x[order // k]
    ys = m.experts(xs, counts) * weights.reshape(-1)[order, None]
    return ys.new_empty(T * k, H).index_copy(0, order, ys).view(T, k, H).sum(dim=1)


def _syncs(fn) -> list[str]:
    """Sync warnings raised while ``fn`` runs (CUDA sync debug mode "warn"), as 'file:line' of the caller."""
    import torch

    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            fn()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return [f"{Path(w.filename).name}:{w.lineno}" for w in rec if "synchroniz" in str(w.message)]


def _count(fn) -> dict:
    where = _syncs(fn)
    tally: dict[str, int] = {}
    for w in where:
        tally[w] = tally.get(w, 0) + 1
    return {"syncs": len(where), "where": tally}


def sec_layer(a, res):
    import torch

    dev = a.device
    m = _layer(dev)
    T = a.tokens
    x = torch.randn(T, m.gate.weight.shape[1], device=dev, dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn_like(x)
    out = {"tokens": T, "expert_path": m.experts.path}
    res["layer"] = out

    def fwd():
        out["_y"] = m(x)[0]

    def bwd():
        out.pop("_y").backward(dy)

    fwd()
    bwd()  # warm
    if dev == "cuda":
        torch.cuda.synchronize()
        out["forward"] = _count(fwd)
        out["backward"] = _count(bwd)
        torch.cuda.synchronize()
    out.pop("_y", None)

    def step(legacy):
        y = _legacy_forward(m, x) if legacy else m(x)[0]
        y.backward(dy)

    for name, legacy in (("current", False), ("legacy", True)):
        ts = []
        for _ in range(3):  # alternate rounds so drift hits both
            step(legacy)
            if dev == "cuda":
                torch.cuda.synchronize()
            t = time.perf_counter()
            for _ in range(a.iters):
                step(legacy)
            if dev == "cuda":
                torch.cuda.synchronize()
            ts.append((time.perf_counter() - t) / a.iters)
        out[f"{name}_fwd_bwd_s"] = sorted(ts)[1]
        out[f"{name}_fwd_bwd_all_s"] = ts
    out["legacy/current"] = out["legacy_fwd_bwd_s"] / out["current_fwd_bwd_s"]


def sec_step(a, res):
    """Syncs in one whole micro-batch (forward_backward) and one optimizer step of the lite runtime on MOE_SMALL."""
    import torch
    from gpu_speed import Env, _batches, _runtime

    env = Env(a.device, tiny=False)
    rt = _runtime(env, MOE_SMALL)
    h = rt.build_model()
    mbs = _batches(env, 1, MOE_SMALL["vocab_size"])
    out = {}
    res["step"] = out
    for _ in range(2):
        rt.forward_backward(h, mbs, num_microbatches=1)
        rt.optimizer_step(h)
        rt.zero_grad(h)
    if a.device != "cuda":
        return
    torch.cuda.synchronize()
    out["forward_backward"] = _count(lambda: rt.forward_backward(h, mbs, num_microbatches=1))
    torch.cuda.synchronize()
    out["optimizer_step"] = _count(lambda: rt.optimizer_step(h))
    out["moe_layers"] = sum(1 for b in h.model.blocks if getattr(b, "mlp_kind", "") == "moe")


def rows(r: dict) -> list[dict]:
    out = []

    def add(name, value, unit):
        out.append(
            {
                "measurement": name,
                "value": value,
                "unit": unit,
                "gpu": r.get("gpu"),
                "torch_version": r.get("torch_version"),
                "command": f"{r.get('command')} && {REPORT_CMD}",
            }
        )

    lay = r.get("layer", {})
    for ph in ("forward", "backward"):
        if ph in lay:
            add(f"moe layer {ph} host syncs", lay[ph]["syncs"], f"syncs (MOE_SMALL layer, {lay['expert_path']})")
    if "legacy/current" in lay:
        add("moe layer fwd+bwd legacy/current", round(lay["legacy/current"], 3), "time ratio (dispatch before / after)")
        add(
            "moe layer fwd+bwd ms",
            round(lay["current_fwd_bwd_s"] * 1e3, 3),
            f"ms ({lay['tokens']} tokens, median of 3 rounds)",
        )
    st = r.get("step", {})
    for ph in ("forward_backward", "optimizer_step"):
        if ph in st:
            add(f"moe step {ph} host syncs", st[ph]["syncs"], "syncs (lite fsdp2 MOE_SMALL, one micro-batch)")
    return out


def write_csv(r: dict, path) -> list[dict]:
    rs = rows(r)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(COLUMNS))
        w.writeheader()
        w.writerows(rs)
    return rs


def measure(a) -> int:
    import torch

    res = {
        "gpu": torch.cuda.get_device_name() if a.device == "cuda" else "cpu",
        "torch_version": torch.__version__,
        "command": "python3 bench/moe_sync.py " + " ".join(sys.argv[1:]),
        "errors": {},
    }
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, fn in (("layer", sec_layer), ("step", sec_step)):
        if a.only and name not in a.only.split(","):
            continue
        t = time.perf_counter()
        fn(a, res)  # a failing section raises (no broad catch around kernels); the raw JSON holds the ones before
        print(
            f"== {name} ({time.perf_counter() - t:.1f} s): {json.dumps(res.get(name), default=str)[:1500]}", flush=True
        )
        (out / "moe_sync_raw.json").write_text(json.dumps(res, indent=1, default=str))
    for row in write_csv(res, out / "moe_sync.csv"):
        print(f"{row['measurement']:40s} {row['value']} {row['unit']}")
    return 1 if res["errors"] else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None)
    ap.add_argument("--report", default=None)
    ap.add_argument("--csv", default=None)
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--tokens", type=int, default=4096, help="tokens of the layer section")
    ap.add_argument("--only", default="", help="comma-separated sections (layer, step)")
    ap.add_argument("--iters", type=int, default=10, help="layer forward+backward per timed round")
    a = ap.parse_args()
    if a.report and not Path(a.report).is_file():
        ap.error(
            f"--report {a.report}: no such file (the raw JSON a measuring run wrote, e.g. bench/results/moe_sync_raw.json)"
        )
    if a.report:
        r = json.loads(Path(a.report).read_text())
        for row in write_csv(r, a.csv) if a.csv else rows(r):
            print(f"{row['measurement']:40s} {row['value']} {row['unit']}")
        return 0
    return measure(a)


if __name__ == "__main__":
    raise SystemExit(main())
