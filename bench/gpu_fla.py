"""fla's Gated DeltaNet chunk kernels against the lite runtime's PyTorch path on one GPU: which path mlite takes for
each fla install, how close the two are, and how fast.

    python3 bench/gpu_fla.py --out DIR --site fla0.6.0=/tmp/site060 --site ...   # on the GPU: DIR/gpu_fla_raw.json
    python3 bench/gpu_fla.py --report bench/results/gpu_fla_raw.json --csv bench/results/gpu_fla.csv
    python3 bench/gpu_fla.py --smoke --out DIR --site local=                       # the same code on the CPU, tiny

Each ``--site LABEL=PATH`` is one fla install (``pip install --target PATH``; an empty PATH: whatever the interpreter
already has). Every step runs in its own child process (``PYTHONPATH=PATH:repo``) under its own time limit, so a
kernel that refuses, fails to compile or corrupts its CUDA context ends that step only; its exit status and the last
line of its stderr (the exception) are recorded, nothing is caught around a kernel. Steps:

- ``op_ref`` / ``op_torch`` (once): :func:`mlite.runtime.gdn.gated_delta_rule` with ``MLITE_GDN_BACKEND=torch`` on
  the op shape (packed varlen, GVA), in fp32 (the reference) and in bf16; output and the gradients of q, k, v, g,
  beta for a fixed output gradient; time per forward+backward (CUDA events, median after warm-up);
- ``env`` (per site): torch / Triton / fla / tilelang versions, the GPU, nvcc, mlite's fla probe (ok + message,
  ``gdn._fla_probe`` on bf16) and the backend ``auto`` selects (``gdn.backend_for``);
- ``op_fla`` (per site): the same call with ``MLITE_GDN_BACKEND=fla`` (mlite's own dispatch into fla, GVA as the
  model calls it; refused with the probe's message when the probe fails);
- ``op_fla_expanded`` (per site): fla's ``chunk_gated_delta_rule`` called directly with q, k repeated to the value
  heads (equal head counts: runs on fla versions without GVA, e.g. 0.4.x), the raw fla error when it refuses;
- ``train_torch`` (once) and ``train_fla`` (per site whose probe passed): a few optimizer steps of a small Qwen3.5-
  style hybrid (3 Gated DeltaNet + 1 gated attention layer, MoE) with ``MLITE_GDN_BACKEND`` torch / fla, same
  weights and batches; loss, grad norm, step time and the backends the layers actually took.

The driver (no GPU work of its own) compares the saved outputs and gradients on the CPU: max |a - b| and that over
max |b|, fla against the bf16 torch path and both against the fp32 reference. The raw JSON is rewritten after every
step; the CSV (``--report``) is a function of it alone. ``--smoke``: CPU, tiny shapes, no fla import; fla's naive
recurrent reference (loaded from its file) stands in for the kernel variants when fla is installed.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

from gpu_configs import HYBRID_SMALL  # bench/ is on sys.path: this file runs as a script
from result_csv import write_measurements

REPO = Path(__file__).resolve().parents[1]

REPORT_CMD = "python3 bench/gpu_fla.py --report bench/results/gpu_fla_raw.json --csv bench/results/gpu_fla.csv"
"""The step that turns the raw JSON into the CSV (tests/test_bench_results.py re-runs it)."""
GRADS = ("o", "dq", "dk", "dv", "dg", "dbeta")
"""The compared tensors: the output and the gradient of each input of the gated delta rule."""

OP_GPU = dict(lengths=(1536, 1024, 768, 512, 256), H=16, HV=32, K=128, V=128)
"""Op shape on the GPU: T = 4096 packed from 5 sequences, Qwen3.5-35B-A3B's linear-attention heads (16 key heads,
32 value heads of 128)."""
OP_SMOKE = dict(lengths=(25, 15), H=2, HV=4, K=16, V=16)
TRAIN_GPU = {
    **HYBRID_SMALL,
    "num_hidden_layers": 4,
    "layer_types": HYBRID_SMALL["layer_types"][:4],
    "linear_num_key_heads": OP_GPU["H"],
    "linear_num_value_heads": OP_GPU["HV"],
    "linear_key_head_dim": OP_GPU["K"],
    "linear_value_head_dim": OP_GPU["V"],
    "num_experts": 8,
    "num_experts_per_tok": 2,
}
"""The training run's model: bench/gpu_configs.py HYBRID_SMALL cut to 4 layers and 8 experts, with the op's GDN heads (the same
kernel specialisations as the op steps)."""
TRAIN_SEQS_GPU = OP_GPU["lengths"]
TRAIN_SEQS_SMOKE = (40, 24)


# ---------------------------------------------------------------------- arguments
def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default=None, help="folder for gpu_fla_raw.json")
    p.add_argument("--site", action="append", default=[], metavar="LABEL=PATH", help="an fla install (repeat)")
    p.add_argument("--smoke", action="store_true", help="CPU, tiny shapes, torch path (the CI check of this code)")
    p.add_argument("--report", default=None, metavar="RAW", help="only write the CSV (--csv) from this raw JSON")
    p.add_argument("--csv", default=None, help="CSV path of --report")
    p.add_argument("--deadline-s", type=float, default=270.0, help="stop starting steps after this many seconds")
    p.add_argument("--step-timeout-s", type=float, default=100.0, help="time limit of one step")
    p.add_argument("--warmup", type=int, default=None, help="untimed forward+backward calls (default 3; smoke 1)")
    p.add_argument("--iters", type=int, default=None, help="timed forward+backward calls (default 20; smoke 2)")
    p.add_argument("--train-steps", type=int, default=None, help="optimizer steps of a training run (5; smoke 2)")
    p.add_argument("--work", default=None, help="scratch folder for saved tensors (default OUT/work)")
    p.add_argument("--step", default=None, help=argparse.SUPPRESS)  # internal: run one step (child process)
    p.add_argument("--result", default=None, help=argparse.SUPPRESS)  # internal: the child's result file
    a = p.parse_args(argv)
    if a.report is not None:
        if a.csv is None:
            p.error("--report needs --csv")
        return a
    if a.out is None:
        p.error("--out is required (or --report RAW --csv CSV)")
    sites = []
    for s in a.site:
        label, sep, path = s.partition("=")
        if not sep or not label:
            p.error(f"--site {s!r}: give LABEL=PATH (PATH may be empty: the interpreter's own packages)")
        sites.append((label, path))
    if a.step is None and not sites:
        p.error("--site: give at least one LABEL=PATH")
    a.sites = sites
    a.warmup = a.warmup if a.warmup is not None else (1 if a.smoke else 3)
    a.iters = a.iters if a.iters is not None else (2 if a.smoke else 20)
    a.train_steps = a.train_steps if a.train_steps is not None else (2 if a.smoke else 5)
    if a.iters < 1 or a.warmup < 0 or a.train_steps < 1:
        p.error("--iters and --train-steps must be at least 1, --warmup at least 0")
    a.work = a.work or str(Path(a.out) / "work")
    return a


# ---------------------------------------------------------------------- child steps (one per process)
def _device(a):
    import torch

    if a.smoke:
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise SystemExit("gpu_fla: no CUDA device (use --smoke for the CPU check)")
    return torch.device("cuda")


def _sync(dev):
    import torch

    if dev.type == "cuda":
        torch.cuda.synchronize()


def _record_backends():
    """Wrap ``gdn.backend_for`` (looked up at call time by ``gated_delta_rule``) to count the backends it returns."""
    from mlite.runtime import gdn

    seen: dict[str, int] = {}
    orig = gdn.backend_for

    def wrapped(device, dtype):
        b = orig(device, dtype)
        key = f"{device.type}/{str(dtype).removeprefix('torch.')}/{b}"
        seen[key] = seen.get(key, 0) + 1
        return b

    gdn.backend_for = wrapped
    return seen


def _versions() -> dict:
    def ver(name):
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            return None

    import torch

    out = {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "triton": ver("triton"),
        "fla_core": ver("fla-core"),
        "flash_linear_attention": ver("flash-linear-attention"),
        "tilelang": ver("tilelang"),
        "fla_origin": None,
    }
    spec = importlib.util.find_spec("fla")
    out["fla_origin"] = spec.origin if spec else None
    if torch.cuda.is_available():
        out["gpu"] = torch.cuda.get_device_name(0)
        out["capability"] = "sm_{}{}".format(*torch.cuda.get_device_capability(0))
    return out


def step_env(a, res: dict, save) -> None:
    import shutil

    import torch

    from mlite.runtime import gdn

    dev = _device(a)
    res["versions"] = _versions()
    res["nvcc"] = shutil.which("nvcc")
    res["cuda_home"] = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    save()
    if dev.type != "cuda":
        res["probe"] = {"ran": False, "message": "device cpu: mlite takes the torch path without probing fla"}
        res["auto_backend"] = gdn.backend_for(dev, torch.bfloat16)
        return
    fla_logs = _capture_fla_logs()
    t = time.perf_counter()
    ok, why = gdn._fla_probe(dev, torch.bfloat16)
    res["probe"] = {"ran": True, "ok": ok, "message": why, "dtype": "bf16", "wall_s": round(time.perf_counter() - t, 2)}
    res["fla_logs"] = fla_logs
    save()
    os.environ["MLITE_GDN_BACKEND"] = "auto"
    res["auto_backend"] = gdn.backend_for(dev, torch.bfloat16)


def _capture_fla_logs() -> list[str]:
    """fla's INFO lines (``[FLA Backend] common.chunk_bwd_dqkwg -> tilelang``: which implementation fla dispatched)."""
    import logging

    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record):
            lines.append(record.getMessage()[:300])

    lg = logging.getLogger("fla")
    lg.setLevel(logging.INFO)
    lg.addHandler(Keep())
    return lines


def _op_inputs(shape: dict, dev, dtype, seed: int = 0):
    """Packed q, k[T, H, K], v[T, HV, V], g[T, HV] (fp32 log decay), beta[T, HV] and the output gradient, made on the
    CPU from one seed (the same numbers in every process), cast to ``dtype`` (g stays fp32), moved to ``dev``."""
    import torch
    import torch.nn.functional as F

    T = sum(shape["lengths"])
    H, HV, K, V = shape["H"], shape["HV"], shape["K"], shape["V"]
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(T, H, K, generator=gen)
    k = torch.randn(T, H, K, generator=gen)
    v = torch.randn(T, HV, V, generator=gen)
    g = -F.softplus(torch.randn(T, HV, generator=gen) - 2.0)  # log decay <= 0, mostly slow (as after A_log init)
    beta = torch.sigmoid(torch.randn(T, HV, generator=gen))
    do = torch.randn(T, HV, V, generator=gen)
    cast = [x.to(dtype) for x in (q, k, v)] + [g.to(torch.promote_types(dtype, torch.float32)), beta.to(dtype)]
    xs = [x.to(dev).requires_grad_() for x in cast]
    return xs, do.to(dtype).to(dev)


def _op_fn(variant: str, shape: dict, dev):
    """The forward of one variant: ``f(q, k, v, g, beta) -> o[T, HV, V]``."""
    import torch

    from mlite.runtime import gdn

    lengths = tuple(shape["lengths"])
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], device=dev)
    rep = shape["HV"] // shape["H"]
    if variant in ("ref", "torch", "fla"):
        os.environ["MLITE_GDN_BACKEND"] = "fla" if variant == "fla" else "torch"
        return lambda q, k, v, g, beta: gdn.gated_delta_rule(
            q, k, v, g, beta, lengths=lengths, cu_seqlens=cu, use_qk_l2norm=True
        )
    if variant == "fla_native":  # mlite's own fla call (as gdn.gated_delta_rule makes it), without its probe
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule

        def f(q, k, v, g, beta):
            o, _ = chunk_gated_delta_rule(
                q[None], k[None], v[None], g[None], beta[None], cu_seqlens=cu, use_qk_l2norm_in_kernel=True
            )
            return o[0]

        return f
    if variant == "fla_expanded":
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule

        def f(q, k, v, g, beta):
            q, k = q.repeat_interleave(rep, dim=1), k.repeat_interleave(rep, dim=1)
            o, _ = chunk_gated_delta_rule(
                q[None], k[None], v[None], g[None], beta[None], cu_seqlens=cu, use_qk_l2norm_in_kernel=True
            )
            return o[0]

        return f
    if variant == "fla_naive":  # the smoke's stand-in: fla's recurrent reference, one sequence at a time
        naive = _load_fla_naive()

        def f(q, k, v, g, beta):
            q, k = gdn.l2norm(q).repeat_interleave(rep, dim=1), gdn.l2norm(k).repeat_interleave(rep, dim=1)
            outs, start = [], 0
            for n in lengths:
                s = slice(start, start + n)
                o = naive.naive_recurrent_gated_delta_rule(
                    q[None, s], k[None, s], v[None, s], beta[None, s], g[None, s]
                )[0]
                outs.append(o[0].to(v.dtype))
                start += n
            return torch.cat(outs)

        return f
    raise SystemExit(f"gpu_fla: unknown op variant {variant!r}")


def _load_fla_naive():
    """fla's ``ops/gated_delta_rule/naive.py`` on its own (importing ``fla`` pulls in Triton and every kernel)."""
    spec = importlib.util.find_spec("fla")
    if spec is None or not spec.origin:
        raise SystemExit("gpu_fla: fla is not installed (the fla_naive variant needs its naive.py)")
    path = Path(spec.origin).parent / "ops" / "gated_delta_rule" / "naive.py"
    mspec = importlib.util.spec_from_file_location("_fla_gdn_naive", path)
    mod = importlib.util.module_from_spec(mspec)
    mspec.loader.exec_module(mod)
    return mod


def step_op(a, variant: str, res: dict, save) -> None:
    import torch

    dev = _device(a)
    shape = OP_SMOKE if a.smoke else OP_GPU
    dtype = torch.float32 if variant == "ref" else torch.bfloat16
    if variant == "ref":  # a true fp32 reference: no TF32 in its matrix products
        torch.backends.cuda.matmul.allow_tf32 = False
    seen = _record_backends()
    fla_logs = _capture_fla_logs() if dev.type == "cuda" else []
    xs, do = _op_inputs(shape, dev, dtype)
    f = _op_fn(variant, shape, dev)
    res.update(variant=variant, dtype=str(dtype).removeprefix("torch."), shape=shape)

    def fb():
        return torch.autograd.grad(f(*xs), xs, do), None

    t = time.perf_counter()
    o = f(*xs)
    grads = torch.autograd.grad(o, xs, do)
    _sync(dev)
    res["first_call_s"] = round(time.perf_counter() - t, 3)
    tensors = {"o": o.detach()} | {n: gr.detach() for n, gr in zip(GRADS[1:], grads)}
    torch.save({n: x.cpu() for n, x in tensors.items()}, Path(a.work) / f"{a.result_tag}.pt")
    res["saved"] = f"{a.result_tag}.pt"
    res["backends"] = dict(seen)
    save()
    for _ in range(a.warmup):
        fb()
    times = []
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    for _ in range(a.iters):
        _sync(dev)
        t = time.perf_counter()
        if dev.type == "cuda":
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            fb()
            e1.record()
            torch.cuda.synchronize()
            times.append(e0.elapsed_time(e1))
        else:
            fb()
            times.append((time.perf_counter() - t) * 1e3)
    res["times_ms"] = [round(x, 4) for x in times]
    res["median_ms"] = round(sorted(times)[len(times) // 2], 4)
    res["peak_bytes"] = torch.cuda.max_memory_allocated() if dev.type == "cuda" else None
    res["backends"] = dict(seen)
    res["fla_logs"] = fla_logs


def step_warm(a, res: dict, save) -> None:
    """One forward+backward of fla at the op shape, to fill the kernel caches while the probes run (fla-core < 0.5
    has no GVA: q, k expanded there); its outcome is kept but not compared."""
    import torch

    dev = _device(a)
    old = _older(importlib.metadata.version("fla-core"), "0.5.0")
    variant = "fla_expanded" if old else "fla_native"
    res["variant"] = variant
    save()
    xs, do = _op_inputs(OP_GPU, dev, torch.bfloat16)
    f = _op_fn(variant, OP_GPU, dev)
    t = time.perf_counter()
    o = f(*xs)
    res["forward_s"] = round(time.perf_counter() - t, 2)
    save()
    torch.autograd.grad(o, xs, do)
    _sync(dev)
    res["forward_backward_s"] = round(time.perf_counter() - t, 2)


def step_train(a, setting: str, res: dict, save) -> None:
    import torch

    from mlite.models import from_hf_config
    from mlite.runtime.batch import PackedBatch
    from mlite.runtime.config import MegatronLiteConfig, OptimizerConfig, RuntimeConfig
    from mlite.runtime.runtime import create_runtime

    dev = _device(a)
    os.environ["MLITE_GDN_BACKEND"] = setting
    seen = _record_backends()
    cfg = "tiny-hybrid" if a.smoke else TRAIN_GPU
    rt = create_runtime(
        RuntimeConfig(
            hf_path=cfg,
            device=dev.type,
            param_dtype="bf16",
            seed=0,
            backend_cfg=MegatronLiteConfig(optimizer=OptimizerConfig(lr=1e-3)),
        )
    )
    h = rt.build_model()
    vocab = from_hf_config(cfg).vocab_size
    gen = torch.Generator().manual_seed(1)
    seqs = TRAIN_SEQS_SMOKE if a.smoke else TRAIN_SEQS_GPU
    batches = [
        PackedBatch.from_sequences([torch.randint(0, vocab, (n,), generator=gen).tolist() for n in seqs]).to(dev.type)
        for _ in range(a.train_steps)
    ]
    res.update(setting=setting, model="tiny-hybrid" if a.smoke else "TRAIN_GPU", sequences=list(seqs), steps=[])
    for i, b in enumerate(batches):
        _sync(dev)
        t = time.perf_counter()
        m = rt.forward_backward(h, b)
        ok, gn, _ = rt.optimizer_step(h)
        rt.zero_grad(h)
        _sync(dev)
        res["steps"].append(
            {"step": i + 1, "loss": float(m["loss"]), "grad_norm": float(gn), "ok": bool(ok),
             "step_s": round(time.perf_counter() - t, 4)}
        )  # fmt: skip
        res["backends"] = dict(seen)
        save()


def run_child(a) -> int:
    """One step in this process; its result file is rewritten as parts of it come in."""
    res: dict = {}
    out = Path(a.result)

    def save():
        tmp = out.with_suffix(".tmp")
        tmp.write_text(json.dumps(res, indent=1))
        tmp.replace(out)

    a.result_tag = out.stem
    kind, _, arg = a.step.partition(":")
    if kind == "env":
        step_env(a, res, save)
    elif kind == "op":
        step_op(a, arg, res, save)
    elif kind == "train":
        step_train(a, arg, res, save)
    elif kind == "warm":
        step_warm(a, res, save)
    else:
        raise SystemExit(f"gpu_fla: unknown step {a.step!r}")
    res["done"] = True
    save()
    return 0


# ---------------------------------------------------------------------- the driver
class Driver:
    """Runs the steps as child processes under one deadline; keeps the raw JSON current."""

    def __init__(self, a, argv: list[str]):
        self.a = a
        self.t0 = time.monotonic()
        self.out = Path(a.out)
        self.work = Path(a.work)
        self.out.mkdir(parents=True, exist_ok=True)
        self.work.mkdir(parents=True, exist_ok=True)
        self.raw_path = self.out / "gpu_fla_raw.json"
        self.raw: dict = {
            "what": "fla chunk_gated_delta_rule vs mlite's PyTorch chunked path (bench/gpu_fla.py)",
            "command": shlex.join(["python3", "bench/gpu_fla.py", *argv]),
            "smoke": a.smoke,
            "params": {
                "op": OP_SMOKE if a.smoke else OP_GPU,
                "warmup": a.warmup,
                "iters": a.iters,
                "train_steps": a.train_steps,
                "train_model": "tiny-hybrid" if a.smoke else TRAIN_GPU,
                "train_sequences": TRAIN_SEQS_SMOKE if a.smoke else TRAIN_SEQS_GPU,
                "deadline_s": a.deadline_s,
                "step_timeout_s": a.step_timeout_s,
            },
            "gpu": None,
            "torch_version": None,
            "shared": {},
            "sites": {label: {"path": path, "steps": {}} for label, path in a.sites},
            "finished": False,
        }
        self.save()

    def save(self):
        tmp = self.raw_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.raw, indent=1))
        tmp.replace(self.raw_path)

    def left(self) -> float:
        return self.a.deadline_s - (time.monotonic() - self.t0)

    def step(self, step: str, tag: str, site_path: str) -> dict:
        """Run ``step`` in a child with ``site_path`` first on PYTHONPATH; its record (rc, wall time, result)."""
        limit = min(self.a.step_timeout_s, self.left())
        if limit < 5:
            return {"skipped": f"deadline: {self.left():.0f} s left"}
        result = self.work / f"{tag}.json"
        result.unlink(missing_ok=True)
        cmd = [sys.executable, str(Path(__file__).resolve()), "--out", str(self.out), "--work", str(self.work)]
        cmd += ["--step", step, "--result", str(result), "--warmup", str(self.a.warmup), "--iters", str(self.a.iters)]
        cmd += ["--train-steps", str(self.a.train_steps)] + (["--smoke"] if self.a.smoke else [])
        path = [p for p in (site_path, str(REPO)) if p]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(path), PYTHONUNBUFFERED="1")
        env.pop("MLITE_GDN_BACKEND", None)
        t = time.monotonic()
        print(f"gpu_fla: {tag} ({step}, limit {limit:.0f} s)", flush=True)
        try:
            p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=limit)
            rc, err, timed_out = p.returncode, p.stderr, False
        except subprocess.TimeoutExpired as e:
            rc, timed_out = None, True
            err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        rec: dict = {"rc": rc, "timed_out": timed_out, "wall_s": round(time.monotonic() - t, 2)}
        if result.exists():
            rec["result"] = json.loads(result.read_text())
        lines = [ln for ln in err.splitlines() if ln.strip()]
        if rc != 0:
            rec["error"] = lines[-1][:500] if lines else ("timed out" if timed_out else f"exit {rc}")
            rec["stderr_tail"] = "\n".join(lines[-25:])[-4000:]
        print(f"gpu_fla: {tag} rc={rc} {rec['wall_s']} s {rec.get('error', '')}", flush=True)
        return rec

    def many(self, jobs: list[tuple[str, str, str]]) -> list[dict]:
        """Several steps at once (compile-bound work: each child compiles its own kernels on its own core)."""
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=max(1, len(jobs))) as ex:
            return list(ex.map(lambda j: self.step(*j), jobs))

    def op(self, label: str, path: str, v: str) -> None:
        """One timed kernel variant of a site, then its differences and speed against the shared torch steps."""
        site = self.raw["sites"][label]
        tag = f"{label}_op_{v}"
        site["steps"][f"op_{v}"] = self.step(f"op:{v}", tag, path)
        site.setdefault("diffs", {})[v] = {"vs_torch": self.diffs(tag, "op_torch"), "vs_ref": self.diffs(tag, "op_ref")}
        mine = site["steps"][f"op_{v}"].get("result", {})
        t = self.raw["shared"].get("op_torch", {}).get("result", {})
        if mine.get("median_ms") and t.get("median_ms"):
            site.setdefault("speed", {})[v] = {
                "median_ms": mine["median_ms"],
                "torch_median_ms": t["median_ms"],
                "torch_over_this": round(t["median_ms"] / mine["median_ms"], 3),
            }
        self.save()

    def run(self) -> int:
        """Phases in order of what the record needs most, so a deadline cuts the least needed: (1) every site's
        probe, concurrently, next to a first fla call at the op shape that fills Triton's (and TileLang's) kernel
        cache for the timed steps; (2) the torch reference and timing; (3) the timed fla op of each site whose
        probe passed; (4) the training runs; (5) the kernel called directly with q, k expanded to the value heads
        where fla has no GVA (fla-core < 0.5); (6) ``MLITE_GDN_BACKEND=fla`` where the probe failed (its refusal)."""
        a, raw = self.a, self.raw
        base = a.sites[0][1]
        sh = raw["shared"]
        jobs = [("env", f"{label}_env", path) for label, path in a.sites]
        if not a.smoke:
            jobs += [("warm", f"{label}_warm", path) for label, path in a.sites]
        recs = self.many(jobs)
        for (label, _), rec in zip(a.sites, recs):
            raw["sites"][label]["steps"]["env"] = rec
            env = rec.get("result", {})
            if raw["gpu"] is None and env.get("versions"):
                raw["gpu"] = env["versions"].get("gpu") or "cpu"
                raw["torch_version"] = env["versions"]["torch"]
        for (label, _), rec in zip(a.sites, recs[len(a.sites) :]):
            raw["sites"][label]["steps"]["warm"] = rec
        self.save()
        for v in ("ref", "torch"):
            sh[f"op_{v}"] = self.step(f"op:{v}", f"op_{v}", base)
            self.save()
        sh["torch_vs_ref"] = self.diffs("op_torch", "op_ref")
        self.save()

        def env_of(label):
            return raw["sites"][label]["steps"]["env"].get("result") or {}

        def passed(label):
            return a.smoke or bool(env_of(label).get("probe", {}).get("ok"))

        for label, path in a.sites:
            if passed(label):
                self.op(label, path, "fla")
        sh["train_torch"] = self.step("train:torch", "train_torch", base)
        self.save()
        for label, path in a.sites:
            st = raw["sites"][label]["steps"]
            if passed(label):
                st["train_fla"] = self.step("train:fla", f"{label}_train_fla", path)
            else:
                msg = env_of(label).get("probe", {}).get("message", "no probe result")
                st["train_fla"] = {"skipped": f"probe did not pass: {msg}"}
            self.save()
        for label, path in a.sites:
            versions = env_of(label).get("versions") or {}
            if a.smoke:
                if versions.get("fla_origin"):
                    self.op(label, path, "fla_naive")
            elif versions.get("fla_core") and _older(versions["fla_core"], "0.5.0"):
                self.op(label, path, "fla_expanded")
        for label, path in a.sites:
            if not passed(label):
                self.op(label, path, "fla")
        raw["finished"] = True
        raw["wall_s"] = round(time.monotonic() - self.t0, 1)
        self.save()
        print(f"gpu_fla: wrote {self.raw_path}", flush=True)
        return 0

    def diffs(self, tag: str, ref_tag: str) -> dict | None:
        """max |a - b| and max |a - b| / max |b| per tensor, from the two steps' saved tensors (None if one is
        missing)."""
        import torch

        pa, pb = self.work / f"{tag}.pt", self.work / f"{ref_tag}.pt"
        if not (pa.exists() and pb.exists()):
            return None
        ta, tb = torch.load(pa), torch.load(pb)
        out = {}
        for n in GRADS:
            x, y = ta[n].double(), tb[n].double()
            d = float((x - y).abs().max())
            scale = float(y.abs().max())
            out[n] = {"max_abs": d, "max_rel": d / scale if scale > 0 else None, "ref_max": scale}
        return out


def _older(version: str, than: str) -> bool:
    """``version < than`` for plain ``X.Y.Z`` release numbers."""

    def key(v):
        return tuple(int(p) for p in v.split("+")[0].split(".")[:3] if p.isdigit())

    return key(version) < key(than)


# ---------------------------------------------------------------------- report (a function of the raw JSON)
def _sig(x, n=4):
    return None if x is None else float(f"{x:.{n}g}")


def rows(raw: dict) -> list[dict]:
    out: list[dict] = []

    def add(measurement, value, unit):
        out.append({"measurement": measurement, "value": value, "unit": unit})

    sh = raw["shared"]
    shape = raw["params"]["op"]
    desc = (
        f"T={sum(shape['lengths'])} packed {len(shape['lengths'])} seqs, H={shape['H']} HV={shape['HV']} "
        f"K={shape['K']} V={shape['V']}"
    )
    tt = sh.get("op_torch", {}).get("result", {})
    if tt.get("median_ms") is not None:
        add("gdn torch fwd+bwd", tt["median_ms"], f"ms median of {len(tt['times_ms'])}, bf16, {desc}")
    for n, d in (sh.get("torch_vs_ref") or {}).items():
        add(f"gdn torch vs fp32 max_rel {n}", _sig(d["max_rel"]), "max|a-b|/max|ref|, bf16 torch path vs fp32")
    for label, site in raw["sites"].items():
        st = site["steps"]
        env = st.get("env", {})
        res = env.get("result") or {}
        ver = res.get("versions") or {}
        vs = f"fla-core {ver.get('fla_core')}, triton {ver.get('triton')}, tilelang {ver.get('tilelang')}"
        probe = res.get("probe")
        if probe is None:
            add(f"{label} env", "failed", (env.get("error") or env.get("skipped") or "no result")[:300])
            continue
        if probe.get("ran"):
            add(f"{label} probe ok", int(bool(probe["ok"])), f"{probe['message']} ({vs})"[:400])
        else:
            add(f"{label} probe ok", "not run", probe["message"])
        add(
            f"{label} auto backend",
            res.get("auto_backend"),
            "gdn.backend_for(device, bf16) with MLITE_GDN_BACKEND=auto",
        )
        warm = st.get("warm")
        if warm:
            wr = warm.get("result") or {}
            if warm.get("rc") == 0:
                add(f"{label} first fla call", wr.get("forward_backward_s"),
                    f"s, one fwd+bwd of fla ({wr.get('variant')}) at the op shape, compilation included, "
                    "run beside the other sites' probes")  # fmt: skip
            else:
                why = warm.get("error") or warm.get("skipped") or ""
                add(f"{label} first fla call", "failed", f"({wr.get('variant')}) {why}"[:400])
        for v, rec in ((k.removeprefix("op_"), r) for k, r in st.items() if k.startswith("op_")):
            r = rec.get("result") or {}
            if rec.get("skipped"):
                add(f"{label} {v}", "skipped", rec["skipped"])
                continue
            if rec.get("rc") != 0:
                add(f"{label} {v}", "failed", (rec.get("error") or "")[:400])
            if r.get("backends"):
                add(
                    f"{label} {v} backend",
                    ";".join(sorted(r["backends"])),
                    "device/dtype/backend gdn.backend_for returned",
                )
            if r.get("median_ms") is not None:
                add(f"{label} {v} fwd+bwd", r["median_ms"], f"ms median of {len(r['times_ms'])}, bf16, {desc}")
            sp = (site.get("speed") or {}).get(v)
            if sp:
                add(f"{label} {v} speedup over torch", sp["torch_over_this"], "torch path median / this median")
            for which in ("vs_torch", "vs_ref"):
                for n, d in ((site.get("diffs") or {}).get(v, {}).get(which) or {}).items():
                    add(f"{label} {v} {which} max_rel {n}", _sig(d["max_rel"]),
                        f"max|a-b|/max|b| ({which.removeprefix('vs_')}: {'bf16 torch path' if which == 'vs_torch' else 'fp32 torch path'})")  # fmt: skip
        tr = st.get("train_fla", {})
        if tr.get("skipped"):
            add(f"{label} train_fla", "skipped", tr["skipped"][:400])
        else:
            out.extend(_train_rows(f"{label} train_fla", tr, sh.get("train_torch", {})))
    out[:0] = _train_rows("train_torch", sh.get("train_torch", {}), None)
    return out


def _train_rows(name: str, rec: dict, torch_rec: dict | None) -> list[dict]:
    r = rec.get("result") or {}
    rows_: list[dict] = []
    if rec.get("rc") not in (0, None) or rec.get("timed_out"):
        rows_.append({"measurement": name, "value": "failed", "unit": (rec.get("error") or "")[:400]})
    steps = r.get("steps") or []
    if not steps:
        return rows_
    rows_.append({"measurement": f"{name} backend", "value": ";".join(sorted(r.get("backends", {}))),
                  "unit": "device/dtype/backend the GDN layers took"})  # fmt: skip
    rows_.append({"measurement": f"{name} losses", "value": " ".join(f"{s['loss']:.5f}" for s in steps),
                  "unit": f"loss per step, {len(steps)} steps, lr 1e-3, bf16 params"})  # fmt: skip
    later = [s["step_s"] for s in steps[1:]] or [steps[0]["step_s"]]
    rows_.append({"measurement": f"{name} step time", "value": round(sorted(later)[len(later) // 2], 4),
                  "unit": "s per optimizer step, median of steps 2.. (fwd+bwd+optimizer)"})  # fmt: skip
    ts = ((torch_rec or {}).get("result") or {}).get("steps") or []
    if ts:
        n = min(len(ts), len(steps))
        d = max(abs(steps[i]["loss"] - ts[i]["loss"]) for i in range(n))
        rows_.append({"measurement": f"{name} max loss diff vs torch", "value": _sig(d),
                      "unit": f"max |loss - loss(torch path)| over {n} steps"})  # fmt: skip
    return rows_


def write_csv(raw: dict, path: Path) -> None:
    write_measurements(raw, rows(raw), path, REPORT_CMD)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    a = parse_args(argv)
    if a.report is not None:
        write_csv(json.loads(Path(a.report).read_text()), Path(a.csv))
        return 0
    if a.step is not None:
        sys.path.insert(0, str(REPO))
        return run_child(a)
    return Driver(a, argv).run()


if __name__ == "__main__":
    sys.exit(main())
