"""``mlite run --from-plan plan.json``: debug the plan ``mlite export`` wrote, shrunk onto this node.

The run keeps what the plan decides and the lite runtime runs: the model's architecture, the mesh axes TP, CP and
EP, PAO, the moment dtype, offload_fraction and the context offloads, recompute, the parameter dtype. It shrinks what
cannot fit one small node: the depth (``--layers``, default 2: one layer of each kind first), the routed experts
(``--experts``, default the smallest multiple of EP that is at least 8, or all of them when fewer), the vocabulary of
a randomly initialised run (``--vocab``, default 4096), the data-parallel size (``nproc`` = the largest multiple of
TP x CP and of EP that is at most ``--nproc``), the sequence (tokens per micro-batch at most ``--tokens-per-
microbatch``), and the axes the lite runtime has not got (PP and VPP fold into the cut depth, ETP into whole experts).
Every shrink is said, one sentence each. A plan that cannot be shrunk (TP x CP or EP larger than ``--nproc``, an
architecture the runtime does not build, a file that is not a plan) raises :class:`~mlite.errors.MliteError`.
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


def _fit_nproc(limit: int, tp: int, cp: int, ep: int) -> int:
    """The largest ``n <= limit`` with ``tp*cp | n`` and ``ep | n``; 0 when none."""
    step = math.lcm(tp * cp, ep)
    return (limit // step) * step


def _plan_spec(model):
    """The plan's model as a ModelSpec the lite runtime builds (else one line saying why not)."""
    from ..errors import ConfigError
    from ..models import from_hf_config
    from ..runtime.models.lite import SUPPORTED_ARCHITECTURES

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


def _shrink_mesh(doc: dict, limit: int, out: dict, said: list[str]) -> None:
    """The plan's TP, CP and EP on at most ``limit`` processes (DP shrinks); the axes the lite runtime does not run
    (:attr:`mlite.mesh.axes.Axis.lite_refusal`) fold to 1, each said."""
    mesh = doc["mesh"]
    tp, cp, ep = (int(mesh.get(k, 1)) for k in ("tp", "cp", "ep"))
    if tp * cp > limit:
        raise MliteError(
            f"from_plan: the plan's TP {tp} x CP {cp} = {tp * cp} ranks per model replica do not fit "
            f"--nproc {limit}; give --nproc {tp * cp} or more"
        )
    if ep > limit:
        raise MliteError(f"from_plan: the plan's EP {ep} does not fit --nproc {limit}; give --nproc {ep} or more")
    n = _fit_nproc(limit, tp, cp, ep)
    out.update(tp=tp, cp=cp, ep=ep, etp=1, nproc=n)
    said.append(
        f"data parallel {mesh.get('dp')} -> {n // (tp * cp)} (nproc {mesh.get('ngpu', doc.get('ngpu'))} -> {n})"
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
    _shrink_mesh(doc, int(values["nproc"]), out, said)
    _cut_defaults(spec, values, given, out)
    _training_values(doc["options"], values, given, out, said)
    return out, said


def config_from_plan(path, **fields):
    """``(RunConfig, shrunk)`` for the plan at ``path``; ``fields`` are RunConfig fields as flags would give them
    (``nproc`` is this node's limit; ``layers`` / ``experts`` / ``vocab`` / ``tokens_per_microbatch`` override the
    defaults of the shrink)."""
    from .config import RunConfig

    values = dict(RunConfig().to_dict(), **fields)
    values, shrunk = plan_values(read_plan(path), values, set(fields))
    return RunConfig(**values), shrunk


__all__ = ["config_from_plan", "plan_values", "read_plan"]
