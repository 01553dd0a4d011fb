"""FSDP2's per-unit host work in one training step (issue 31), on CPU (gloo): the lite runtime's MoE against the
transformers + FSDP2 baseline of bench/gpu_speed.py, the same layout (bench/gpu_configs.py MOE_SMALL: 12 layers, 32
experts top-4) at CPU size.

    python3 bench/fsdp_units.py --out DIR [--ranks 1,2] [--steps 3] [--profile]   # DIR/fsdp_units_raw.json
    python3 bench/fsdp_units.py --report DIR/fsdp_units_raw.json --csv DIR/fsdp_units.csv

Per side and rank count: FSDP units (``fully_shard`` modules), all-gather and reduce-scatter calls per step (counted
at ``torch.distributed.all_gather_single`` / ``reduce_scatter_single``, what FSDP2's collectives call), FSDP hook
calls per step and the host time spent inside them (``FSDPParamGroup.pre_forward`` / ``post_forward`` /
``pre_backward`` / ``post_backward`` and the root's final backward callback: copy-in, collectives, copy-out, the
gradient reduction), and the whole step's time. ``--profile`` adds the top functions of one step by cumulative time
(cProfile). CPU time is not GPU time: the hook counts and their host cost are what carries over (one GPU also runs
every hook and copy, FSDP2 skips only the collective itself at world size 1).
"""

from __future__ import annotations

import argparse
import cProfile
import csv
import json
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_configs import MOE_SMALL, cpu_sized

CPU_MOE = dict(
    cpu_sized(MOE_SMALL, intermediate_size=256, moe_intermediate_size=32),
    num_hidden_layers=MOE_SMALL["num_hidden_layers"],
)
"""MOE_SMALL's layout (12 layers, 32 experts top-4) at CPU size."""
SEQ = 256
HOOKS = ("pre_forward", "post_forward", "pre_backward", "post_backward")
REPORT_CMD = "python3 bench/fsdp_units.py --report DIR/fsdp_units_raw.json --csv DIR/fsdp_units.csv"


class Counter:
    """Calls and host seconds of FSDP2's hooks and collectives (class-level wrappers, installed once per process)."""

    def __init__(self):
        import torch.distributed as dist
        from torch.distributed.fsdp._fully_shard._fsdp_param_group import FSDPParamGroup
        from torch.distributed.fsdp._fully_shard._fsdp_state import FSDPState

        self.calls: dict[str, int] = {}
        self.seconds: dict[str, float] = {}
        for name in HOOKS:
            self._wrap(FSDPParamGroup, name, name)
        self._wrap(FSDPState, "_root_post_backward_final_callback", "final_callback")
        self._wrap(dist, "all_gather_single", "all_gather")
        self._wrap(dist, "reduce_scatter_single", "reduce_scatter")
        self._wrap(dist, "all_reduce", "all_reduce")

    def _wrap(self, owner, attr: str, key: str) -> None:
        orig = getattr(owner, attr)

        def wrapped(*a, **k):
            t = time.perf_counter()
            try:
                return orig(*a, **k)
            finally:
                self.calls[key] = self.calls.get(key, 0) + 1
                self.seconds[key] = self.seconds.get(key, 0.0) + time.perf_counter() - t

        setattr(owner, attr, wrapped)

    def reset(self) -> None:
        self.calls.clear()
        self.seconds.clear()


def fsdp_units(model) -> int:
    """Modules ``fully_shard`` was applied to."""
    from torch.distributed.fsdp import FSDPModule

    return sum(isinstance(m, FSDPModule) for m in model.modules())


def _lite(cfg, n_mb, rank):
    import torch

    from mlite.runtime.batch import PackedBatch
    from mlite.runtime.config import MegatronLiteConfig, OptimizerConfig, RuntimeConfig
    from mlite.runtime.runtime import create_runtime

    rt = create_runtime(
        RuntimeConfig(
            hf_path=cfg,
            device="cpu",
            param_dtype="bf16",
            backend_cfg=MegatronLiteConfig(optimizer=OptimizerConfig(lr=1e-4)),
        )
    )
    h = rt.build_model()
    g = torch.Generator().manual_seed(rank)
    mbs = [
        PackedBatch.from_sequences([torch.randint(0, cfg["vocab_size"], (SEQ,), generator=g).tolist()])
        for _ in range(n_mb)
    ]

    def step():
        rt.forward_backward(h, mbs, num_microbatches=n_mb)
        rt.optimizer_step(h)
        rt.zero_grad(h)

    return h.model, step


def _hf(cfg, n_mb, rank):
    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from transformers import AutoConfig, AutoModelForCausalLM

    c = {k: v for k, v in cfg.items() if k not in ("architectures", "model_type")}
    model = AutoModelForCausalLM.from_config(
        AutoConfig.for_model(cfg["model_type"], **c), dtype=torch.float32, attn_implementation="sdpa"
    )
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in model.model.layers:  # as bench/gpu_speed.py hf_run
        fully_shard(layer, mp_policy=mp)
    fully_shard(model, mp_policy=mp)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(rank)
    ids = [torch.randint(0, cfg["vocab_size"], (1, SEQ), generator=g) for _ in range(n_mb)]

    def step():
        for x in ids:
            (model(input_ids=x, labels=x).loss / n_mb).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    return model, step


def _measure(counter, model, step, steps: int, profile: bool) -> dict:
    step()  # warm-up (lazy init)
    counter.reset()
    t = time.perf_counter()
    for _ in range(steps):
        step()
    wall = (time.perf_counter() - t) / steps
    out = {
        "units": fsdp_units(model),
        "step_s": wall,
        "calls_per_step": {k: v / steps for k, v in sorted(counter.calls.items())},
        "hook_s_per_step": {k: v / steps for k, v in sorted(counter.seconds.items())},
    }
    out["hooks_s"] = sum(out["hook_s_per_step"].get(k, 0.0) for k in (*HOOKS, "final_callback"))
    if profile:
        pr = cProfile.Profile()
        pr.enable()
        step()
        pr.disable()
        st = pstats.Stats(pr)
        rows = []
        for (file, line, fn), (_, ncalls, _, cum, _) in st.stats.items():  # type: ignore[attr-defined]
            rows.append((cum, ncalls, f"{Path(file).name}:{line}({fn})"))
        out["profile_top"] = [
            {"cum_s": round(c, 5), "calls": n, "fn": f} for c, n, f in sorted(rows, reverse=True)[:40]
        ]
    return out


def worker(rank: int, world: int, n_mbs: tuple, steps: int, profile: bool) -> dict:
    import torch

    torch.manual_seed(0)
    counter = Counter()
    res: dict = {}
    for side, build in (("lite", _lite), ("hf_fsdp2", _hf)):
        for n_mb in n_mbs:
            model, step = build(CPU_MOE, n_mb, rank)
            res[f"{side} mb{n_mb}"] = _measure(counter, model, step, steps, profile)  # every rank: same collectives
            del model, step
    return res


def measure(a) -> int:
    from mlite.runtime.dist import run_local

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    raw: dict = {"config": CPU_MOE, "seq": SEQ, "steps": a.steps, "torch": _torch_version(), "runs": {}}
    for world in [int(x) for x in a.ranks.split(",")]:
        res = run_local(worker, world, (tuple(a.mbs), a.steps, a.profile), timeout_s=300)
        raw["runs"][str(world)] = res[0]
        (out / "fsdp_units_raw.json").write_text(json.dumps(raw, indent=1))
        for k, v in res[0].items():
            c = v["calls_per_step"]
            print(
                f"ranks {world} {k:14s} units {v['units']:3d}  step {v['step_s'] * 1e3:8.1f} ms  FSDP hooks "
                f"{v['hooks_s'] * 1e3:7.1f} ms  all-gather {c.get('all_gather', 0):5.1f}  reduce-scatter "
                f"{c.get('reduce_scatter', 0):5.1f}  hook calls "
                f"{sum(c.get(h, 0) for h in HOOKS):5.1f}",
                flush=True,
            )
    if a.csv:
        write_csv(raw, a.csv)
    return 0


def _torch_version() -> str:
    import torch

    return torch.__version__


def rows(raw: dict) -> list[dict]:
    out = []
    for world, runs in raw["runs"].items():
        for k, v in runs.items():
            c = v["calls_per_step"]
            base = {"ranks": world, "run": k}
            out.append({**base, "metric": "fsdp units", "value": v["units"]})
            out.append({**base, "metric": "all-gather calls / step", "value": c.get("all_gather", 0)})
            out.append({**base, "metric": "reduce-scatter calls / step", "value": c.get("reduce_scatter", 0)})
            out.append({**base, "metric": "fsdp hook calls / step", "value": sum(c.get(h, 0) for h in HOOKS)})
            out.append({**base, "metric": "fsdp hook host ms / step", "value": round(v["hooks_s"] * 1e3, 2)})
            out.append({**base, "metric": "step ms", "value": round(v["step_s"] * 1e3, 2)})
    return out


def write_csv(raw: dict, path) -> None:
    r = rows(raw)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["ranks", "run", "metric", "value", "torch", "command"])
        w.writeheader()
        for row in r:
            w.writerow({**row, "torch": raw["torch"], "command": REPORT_CMD})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="directory for fsdp_units_raw.json")
    ap.add_argument("--ranks", default="1,2", help="process counts, comma-separated")
    ap.add_argument("--mbs", type=int, nargs="+", default=[1, 4], help="micro-batches per step")
    ap.add_argument("--steps", type=int, default=3, help="timed steps after one warm-up")
    ap.add_argument("--profile", action="store_true", help="cProfile one step (rank 0)")
    ap.add_argument("--report", help="raw JSON to turn into --csv")
    ap.add_argument("--csv", help="CSV to write")
    a = ap.parse_args()
    if a.report:
        p = Path(a.report)
        if not p.is_file():
            ap.error(f"--report {a.report}: no such file")
        write_csv(json.loads(p.read_text()), a.csv or p.with_suffix(".csv"))
        return 0
    if not a.out:
        ap.error("--out DIR is needed (or --report FILE)")
    return measure(a)


if __name__ == "__main__":
    raise SystemExit(main())
