"""``mlite run --from-plan plan.json``: debug the plan ``mlite export`` wrote, shrunk onto this node.

The run keeps what the plan decides and the lite runtime runs: the model's architecture, the mesh axes TP, CP and
EP, PAO, the moment dtype, offload_fraction and the context offloads, recompute, the parameter dtype. It shrinks what
cannot fit one small node: the depth (``--layers``, default 2: one layer of each kind first), the routed experts
(``--experts``, default the smallest multiple of EP that is at least 8, or all of them when fewer), the vocabulary of
a randomly initialised run (``--vocab``, default 4096), the mesh (TP, CP and EP each to the largest divisor of the
plan's size that fits ``--nproc``, TP kept first, then CP, then EP, checked for the cut model by the planner:
:func:`mesh_candidates`), the data-parallel size (``nproc`` = the largest multiple of TP x CP and of EP that is at
most ``--nproc``), the sequence (tokens per micro-batch at most ``--tokens-per-
microbatch``), and the axes the lite runtime has not got (PP and VPP fold into the cut depth, ETP into whole experts).
Every shrink is said, one sentence each (``ep 8 -> 2 (nproc 2)``). A plan that cannot be shrunk (an architecture
the runtime does not build, a file that is not a plan, a ``--experts`` cut no mesh takes) raises
:class:`~mlite.errors.MliteError`.
"""

from __future__ import annotations

import json
import math
from dataclasses import fields
from pathlib import Path

from ..errors import MliteError
from ..mesh.axes import AXES
from ..options import rules
from ..options.optimizers import BACKENDS
from ..options.table import RUN
from ..options.training import TrainingOptions

PLAN_KEYS = ("model", "mesh", "options")
"""Keys every plan.json of ``mlite export`` has (:func:`mlite.export.writer.render`)."""
RUN_OWN = ("num_microbatches",)
"""Training options a debug run keeps its own value of (one micro-batch: the plan's count is a cluster batch)."""
DEFAULT_LAYERS = 2
DEFAULT_MIN_EXPERTS = 8
DEFAULT_VOCAB = 4096
DEFAULT_LR = 3e-4
"""The learning rate of a plan's debug run unless ``--lr`` is given: a cut real model at random initialisation
diverges at the run's 3e-3 (a cut Qwen3-30B-A3B on 2 CPU processes, 64 tokens: loss 8.75, 9.03, 12.9, 17.3 at
steps 1-4; 1e-3 rises to 15.7 by step 5), while 3e-4 falls from the first update on (9.03, 8.03, 7.40, 6.84, 6.81)."""


def read_plan(path) -> dict:
    """The plan document at ``path`` (checked to be one)."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise MliteError(f"from_plan: {p} not found; give the plan.json 'mlite export --out DIR' wrote")
    try:
        doc = json.loads(p.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise MliteError(f"from_plan: {p} is not valid JSON ({e})") from None
    missing = [k for k in PLAN_KEYS if not isinstance(doc, dict) or k not in doc]
    if missing:
        raise MliteError(f"from_plan: {p} is not an 'mlite export' plan (no {', '.join(missing)})")
    return doc


def newest_plan(root=None) -> Path | None:
    """The ``plan.json`` written last (latest modification time) in a folder of ``root`` (default
    :func:`mlite.launch.config.export_root`, where notebook 01's Export view writes): the plan just exported, not the
    alphabetically last; None when there is none."""
    from .config import export_root

    plans = list(Path(root if root is not None else export_root()).expanduser().glob("*/plan.json"))
    return max(plans, key=lambda p: (p.stat().st_mtime_ns, str(p))) if plans else None


def _fit_nproc(limit: int, tp: int, cp: int, ep: int) -> int:
    """The largest ``n <= limit`` with ``tp*cp | n`` and ``ep | n``; 0 when none."""
    step = math.lcm(tp * cp, ep)
    return (limit // step) * step


def _plan_spec(model):
    """The plan's model as a ModelSpec the lite runtime builds (else one line saying why not)."""
    from ..errors import ConfigError
    from ..models import from_hf_config
    from ..runtime.architectures import SUPPORTED_ARCHITECTURES

    try:
        spec = from_hf_config(model)
    except ConfigError as e:  # the message names the file and the key
        raise MliteError(f"from_plan: model {model!r} of the plan does not read here ({e.message})") from None
    if spec.source != "native" or spec.architecture not in SUPPORTED_ARCHITECTURES:
        raise MliteError(
            f"from_plan: {model} is a {spec.architecture} model, which the lite runtime does not build "
            f"(it builds {', '.join(SUPPORTED_ARCHITECTURES)}); this plan cannot be debugged here"
        )
    return spec


def _divisors(size: int, limit: int) -> list[int]:
    """The divisors of ``size`` that are at most ``limit``, largest first."""
    return [d for d in range(min(size, limit), 0, -1) if size % d == 0]


def mesh_candidates(tp: int, cp: int, ep: int, limit: int):
    """``(tp, cp, ep)`` meshes on at most ``limit`` processes, the plan's sizes kept as far as they go: each a
    divisor of the plan's size (so the heads, FFN widths and experts the plan's size divides stay divisible), TP
    kept first, then CP, then EP, and TP x CP and EP on a common process count (their lcm) within ``limit``."""
    for t in _divisors(tp, limit):
        for c in _divisors(cp, limit // t):
            for e in _divisors(ep, limit):
                if math.lcm(t * c, e) <= limit:
                    yield t, c, e


def _fit_mesh(doc: dict, spec, values: dict, given: set[str], out: dict, said: list[str]) -> None:
    """The plan's TP, CP and EP shrunk onto at most ``--nproc`` processes (DP shrinks with them), the cut model's
    defaults for that mesh (:func:`_cut_defaults`), and the first candidate (:func:`mesh_candidates`) the planner
    accepts for the cut model (:meth:`RunConfig.check_mesh`, i.e. :func:`mlite.mesh.resolve`); the axes the lite
    runtime does not run (:attr:`mlite.mesh.axes.Axis.lite_refusal`) fold to 1. Every shrink is said."""
    from .config import RunConfig

    mesh = doc["mesh"]
    limit = int(values["nproc"])
    plan = {k: int(mesh.get(k, 1)) for k in ("tp", "cp", "ep")}
    refused: MliteError | None = None
    fits = None
    for tp, cp, ep in mesh_candidates(plan["tp"], plan["cp"], plan["ep"], limit):
        n = _fit_nproc(limit, tp, cp, ep)
        out.update(tp=tp, cp=cp, ep=ep, etp=1, nproc=n)
        _cut_defaults(spec, values, given, out)
        try:
            RunConfig(**out).check_mesh()
        except MliteError as e:  # e.g. --experts not a multiple of this EP: the next, smaller mesh
            refused = e
            continue
        fits = n
        break
    if fits is None:  # not even tp = cp = ep = 1 (only a cut the user gave can do that): the planner's reasons
        raise refused or MliteError(f"from_plan: no mesh of this plan fits --nproc {limit}")
    for k, v in plan.items():
        if out[k] != v:
            said.append(f"{k} {v} -> {out[k]} (nproc {limit})")
    said.append(
        f"data parallel {mesh.get('dp')} -> {fits // (out['tp'] * out['cp'])} "
        f"(nproc {mesh.get('ngpu', doc.get('ngpu'))} -> {fits})"
    )
    for axis in AXES:
        size = mesh.get(axis.name)
        if axis.lite_refusal and size is not None and int(size) > 1:
            said.append(f"{axis.name} {size} -> 1 ({axis.lite_refusal.split(';')[0]})")


def _cut_defaults(spec, values: dict, given: set[str], out: dict) -> None:
    """The default cut of the model (layers, experts, vocabulary) where the command line gave none."""
    ep = out["ep"]
    if "layers" not in given or values.get("layers") is None:
        out["layers"] = min(DEFAULT_LAYERS, spec.num_layers)
    if spec.is_moe and ("experts" not in given or values.get("experts") is None):
        want = max(ep, math.ceil(DEFAULT_MIN_EXPERTS / ep) * ep)
        out["experts"] = min(spec.num_experts, want)
    if not values.get("hf_checkpoint") and ("vocab" not in given or values.get("vocab") is None):
        out["vocab"] = min(DEFAULT_VOCAB, spec.vocab_size)


def _training_values(opts: dict, values: dict, given: set[str], out: dict, said: list[str]) -> None:
    """The plan's training options as run fields, with what the lite runtime runs differently said."""
    unknown = sorted(set(opts) - {f.name for f in fields(TrainingOptions)})
    if unknown:
        raise MliteError(f"from_plan: options {', '.join(unknown)} of the plan are not training options here")
    t = TrainingOptions(**opts)  # the plan's options are the training vocabulary: their rules hold already
    for r in RUN:  # every training option a run row sets, but the run's own micro-batch count
        if r.path and r.path[0].startswith("training.") and r.field not in RUN_OWN:
            out[r.field] = getattr(t, r.path[0].split(".", 1)[1])
    if t.exp_avg_dtype != t.exp_avg_sq_dtype:  # a run has one moment dtype (--moment-dtype)
        said.append(f"moments {t.exp_avg_dtype}/{t.exp_avg_sq_dtype} -> {t.exp_avg_dtype}")
    if t.offload_fraction and rules.state_on_device in BACKENDS.entry(t.optimizer).lite_refuses:
        said.append(
            f"offload_fraction {t.offload_fraction:g} -> 0 (the lite runtime's {t.optimizer} keeps its optimizer "
            "state on the device)"
        )
        out["offload_fraction"] = 0.0
    if rules.chunked_offload_on(t):
        said.append(
            "chunked_optimizer_state_offload dropped (Megatron-Core's ChunkedOptimizerStateOffloader; the lite "
            "runtime has no chunked offload)"
        )
    if t.grad_offload:
        said.append("grad_offload dropped (the lite runtime offloads gradients with the parameters)")
    pd = t.param_dtype
    if values.get("device") == "cpu" and "param_dtype" not in given:
        out["param_dtype"] = "auto"  # fp32 on CPU (bf16 with PAO): the CPU runs fp32 matmuls fast
        if pd != ("bf16" if out["pao"] else "fp32"):
            said.append(f"param_dtype {pd} -> {'bf16' if out['pao'] else 'fp32'} (CPU run)")
    elif pd in ("fp32", "bf16"):
        out["param_dtype"] = pd
    seq = t.seq_len
    if "tokens_per_microbatch" in given or seq > values["tokens_per_microbatch"]:
        if seq != values["tokens_per_microbatch"]:
            said.append(f"seq_len {seq} -> tokens_per_microbatch {values['tokens_per_microbatch']}")
    else:
        out["tokens_per_microbatch"] = max(seq, 16)


def plan_values(doc: dict, values: dict, given: set[str]) -> tuple[dict, list[str]]:
    """``values`` (RunConfig fields from the command line) with the plan's settings, and what was shrunk.

    ``given``: the fields the user set on the command line (their ``--layers``/``--experts``/``--vocab``/
    ``--tokens-per-microbatch`` win over the defaults; ``--nproc`` is the limit of this node).
    """
    spec = _plan_spec(doc["model"])
    out = dict(values, model=doc["model"])
    said: list[str] = []
    trained: list[str] = []
    _training_values(doc["options"], values, given, out, trained)
    if "lr" not in given:
        out["lr"] = DEFAULT_LR
        trained.append(
            f"lr {DEFAULT_LR:g} (the debug default for a cut model at random initialisation; --lr sets another)"
        )
    _fit_mesh(doc, spec, values, given, out, said)
    return out, said + trained


def config_from_plan(path, **fields):
    """``(RunConfig, shrunk)`` for the plan at ``path``; ``fields`` are RunConfig fields as flags would give them
    (``nproc`` is this node's limit; ``layers`` / ``experts`` / ``vocab`` / ``tokens_per_microbatch`` override the
    defaults of the shrink)."""
    from .config import RunConfig

    values = dict(RunConfig().to_dict(), **fields)
    values, shrunk = plan_values(read_plan(path), values, set(fields))
    return RunConfig(**values), shrunk


__all__ = ["config_from_plan", "mesh_candidates", "newest_plan", "plan_values", "read_plan"]
