"""Published multi-GPU training runs with their full arguments and measured speed, to check the time model against.

``tests/data/step_times/published.json`` holds ``{"runs": [...]}``; each run is one row of a published table or one
line of a real log (NVIDIA's Megatron-Bridge and NeMo AutoModel performance summaries, third-party Megatron-LM logs,
the mlite / Megatron-Core bench READMEs, torchtitan's benchmark notes), its source and the verbatim quote, the model
(a ``data/models`` name or a config under ``tests/data/step_times/models/``), the mesh, the batch and what was
measured, exactly as published. Fields the source leaves out are read from the framework's recipe where one exists;
every such field is listed in ``assumed``. ``knobs`` holds the time-model settings (:class:`mlite.time.knobs.Knobs`)
the framework's recipe sets or implies, each with the recipe line in ``knobs_sources``; a knob the recipe does not
reveal stays out (its default applies) and is named in ``assumed``. ``tests/data/step_times/README.md`` gives one
line per run, the knobs of each and the provenance of each model file.

:func:`load_published` checks every record (missing or unknown keys, types, value lists, the micro-batch count
against ``gbs / (mbs * dp)``, the knobs through :func:`mlite.time.knobs.knobs_from_dict`) and raises one
:class:`~mlite.errors.MliteError` naming the run and the field. :meth:`PublishedRun.time_knobs` gives the run's
:class:`~mlite.time.knobs.Knobs`.
:meth:`PublishedRun.spec`, :meth:`~PublishedRun.plan` and :meth:`~PublishedRun.training` give what
:func:`mlite.time.model.predict` takes.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, fields
from pathlib import Path

from ..errors import MliteError
from ..mesh.layout import SPLIT_KEYS, PipelineSplit, layer_list
from ..options.training import OPTIMIZERS, RECOMPUTE, RECOMPUTE_MODULES
from ..paths import REPO_ROOT
from .hardware import hardware_names
from .knobs import Knobs, knobs_from_dict

PUBLISHED_DIR = REPO_ROOT / "tests" / "data" / "step_times"
"""Where the records and their model configs live (a source checkout)."""
DEFAULT_PATH = PUBLISHED_DIR / "published.json"
"""The records :func:`load_published` reads when no path is given."""

PRECISIONS = ("bf16", "fp8")
"""Compute precisions a record may name (``fp8``: FP8 linears, the rest bf16)."""
MEASURED_KEYS = ("step_s", "tokens_per_s_per_gpu", "model_tflops_per_gpu")
"""What a record's ``measured`` may hold (one or more), each as published."""
TRAINING_FIELDS = (
    "optimizer", "seq_len", "micro_batch_size", "num_microbatches", "recompute", "sequence_parallel", "gpus_per_node",
)  # fmt: skip
"""The record's fields that :meth:`PublishedRun.training` passes to ``TrainingOptions`` under the same names."""
OPTIONAL_KEYS = ("pp_layout", "recompute_modules", *SPLIT_KEYS.values())
"""Extra keys a record may carry: the recipe's ``pipeline_model_parallel_layout`` or Megatron-Core's pipeline split
keys (:data:`mlite.mesh.SPLIT_KEYS`), for meshes whose layers do not split evenly; the recipe's
``recompute_modules`` (Megatron-Core's names), with ``recompute`` selective."""


@dataclass(frozen=True, kw_only=True)
class PublishedRun:
    """One published training run: where it comes from, what it ran and what it measured."""

    id: str
    """Short slug naming the run in messages and reports."""
    framework: str
    """The training framework that ran it (``megatron-bridge``, ``nemo-automodel``, ``megatron-lm``, ``mlite``, ...)."""
    source: str
    """URL or ``owner/repo path @ commit`` of the table or log (and its section)."""
    quote: str
    """The row or log line as published, verbatim."""
    model: str
    """A ``data/models`` name, or a config path relative to ``tests/data/step_times/``."""
    model_note: str
    """How the model file relates to the run's model (same shapes; or how a cut-down proxy was derived)."""
    hardware: str
    """The kit's hardware profile (``A100``, ``H100``, ``H200``, ``B200``; ``data/hardware/``)."""
    ngpu: int
    """World size."""
    gpus_per_node: int
    """GPUs per node."""
    tp: int
    """Tensor parallel size."""
    pp: int
    """Pipeline parallel size."""
    vpp: int
    """Virtual pipeline stages per pipeline rank (1: none)."""
    cp: int
    """Context parallel size."""
    ep: int
    """Expert parallel size (1 for dense models)."""
    etp: int | None
    """Expert tensor parallel size (None: not set, i.e. 1)."""
    seq_len: int
    """Tokens per sequence."""
    micro_batch_size: int
    """Sequences per micro-batch."""
    global_batch_size: int
    """Sequences per optimizer step."""
    num_microbatches: int
    """Micro-batches per step per data-parallel rank: ``global_batch_size / (micro_batch_size * dp)``."""
    precision: str
    """``bf16`` or ``fp8`` (FP8 linears)."""
    recompute: str
    """``none``, ``selective`` or ``full`` (activation recompute)."""
    sequence_parallel: bool
    """Megatron sequence parallelism on."""
    optimizer: str
    """``dist_opt`` (Megatron-family distributed optimizer) or ``fsdp2`` (FSDP2 frameworks)."""
    measured: dict
    """One or more of ``step_s``, ``tokens_per_s_per_gpu``, ``model_tflops_per_gpu``, as published."""
    flops_formula: str
    """What the source's TFLOP/s counts, where it says."""
    assumed: tuple[str, ...]
    """Every field read from a recipe or assumed rather than read from the source, with where it comes from."""
    notes: str
    """Anything else that matters for the comparison (GPU variant, overlap settings, range of logged values)."""
    pp_layout: str | None = None
    """The recipe's ``pipeline_model_parallel_layout`` (mlite's ``pp_layout`` language), when it sets one."""
    recompute_modules: tuple[str, ...] = ()
    """The recipe's selective ``recompute_modules`` (Megatron-Core's names: ``moe`` re-runs the whole MoE layer)."""
    split: PipelineSplit = field(default_factory=PipelineSplit)
    """Megatron-Core's pipeline split keys the recipe sets (first/last-stage counts, ``account_for_*``)."""
    knobs: dict = field(default_factory=dict)
    """The :class:`~mlite.time.knobs.Knobs` fields the framework's recipe sets or implies (the rest keep defaults)."""
    knobs_sources: dict = field(default_factory=dict)
    """For each key of ``knobs``: ``repo path @ commit: the line(s) that set it``."""

    @property
    def dp(self) -> int:
        """Dense data-parallel size: ``ngpu / (tp * cp * pp)``."""
        return self.ngpu // (self.tp * self.cp * self.pp)

    @property
    def tokens_per_step(self) -> int:
        """Tokens per optimizer step: ``global_batch_size * seq_len``."""
        return self.global_batch_size * self.seq_len

    def model_path(self) -> str:
        """What :func:`mlite.models.from_hf_config` reads: the catalog name, or the config file's absolute path."""
        p = PUBLISHED_DIR / self.model
        return str(p) if self.model.endswith(".json") else self.model

    def spec(self):
        """The run's :class:`~mlite.models.ModelSpec`."""
        from ..models import from_hf_config

        return from_hf_config(self.model_path())

    def parallel(self):
        """The run's :class:`~mlite.mesh.ParallelConfig`."""
        from ..mesh import ParallelConfig

        return ParallelConfig(
            tp=self.tp, pp=self.pp, vpp=self.vpp, cp=self.cp, ep=self.ep, etp=self.etp, pp_layout=self.pp_layout
        )

    def plan(self, spec=None):
        """The run's mesh resolved by :func:`mlite.mesh.resolve` (with its pipeline split), for ``spec`` (default:
        :meth:`spec`)."""
        from ..mesh import resolve

        return resolve(
            spec if spec is not None else self.spec(),
            self.ngpu,
            self.parallel(),
            seq_len=self.seq_len,
            gpus_per_node=self.gpus_per_node,
            split=self.split,
        )

    def time_knobs(self) -> Knobs:
        """The run's :class:`~mlite.time.knobs.Knobs`: ``knobs`` over the defaults."""
        return knobs_from_dict(self.knobs, f"run {self.id!r}")

    def training(self):
        """The run's :class:`~mlite.options.TrainingOptions` (distributed optimizer on)."""
        from ..options import TrainingOptions

        return TrainingOptions(
            use_distributed_optimizer=True,
            recompute_modules=self.recompute_modules,
            **{k: getattr(self, k) for k in TRAINING_FIELDS},
        )


_POSITIVE_INTS = (
    "ngpu", "gpus_per_node", "tp", "pp", "vpp", "cp", "ep", "seq_len", "micro_batch_size", "global_batch_size",
    "num_microbatches",
)  # fmt: skip
_STRINGS = ("id", "framework", "source", "quote", "model", "model_note", "flops_formula", "notes")
_SPLIT_FIELD = {key: name for name, key in SPLIT_KEYS.items()}
REQUIRED_KEYS = tuple(f.name for f in fields(PublishedRun) if f.name not in ("pp_layout", "recompute_modules", "split"))
"""The keys every record gives."""


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _one_of(where: str, name: str, v, values) -> None:
    if v not in values:
        raise MliteError(f"{where}: field {name!r} = {v!r} must be one of {', '.join(values)}")


def _split(doc: dict, where: str) -> PipelineSplit:
    """The record's Megatron-Core split keys as a :class:`PipelineSplit`."""
    vals: dict = {}
    for key, name in _SPLIT_FIELD.items():
        if key not in doc:
            continue
        v = doc[key]
        if name == "layer_list":
            vals[name] = layer_list(v, f"{where}: field {key!r}")
        elif name.startswith("account_for_"):
            if not isinstance(v, bool):
                raise MliteError(f"{where}: field {key!r} = {v!r} must be true or false")
            vals[name] = v
        elif not _is_int(v) or v < 1:
            raise MliteError(f"{where}: field {key!r} = {v!r} must be a positive layer count")
        else:
            vals[name] = v
    return PipelineSplit(**vals)


def _knobs(doc: dict, where: str) -> tuple[dict, dict]:
    """The record's ``knobs`` (checked by :func:`~mlite.time.knobs.knobs_from_dict`) and their ``knobs_sources``."""
    knobs, sources = doc["knobs"], doc["knobs_sources"]
    knobs_from_dict(knobs, f"{where}: field 'knobs'")
    if not isinstance(sources, dict) or not all(isinstance(v, str) and v.strip() for v in sources.values()):
        raise MliteError(
            f"{where}: field 'knobs_sources' must map each knob to a non-empty 'repo path @ commit: line' string"
        )
    unsourced = [k for k in knobs if k not in sources]
    if unsourced:
        raise MliteError(
            f"{where}: knob {unsourced[0]!r} has no entry in 'knobs_sources'; give the recipe line that sets it"
        )
    stray = sorted(set(sources) - set(knobs))
    if stray:
        raise MliteError(
            f"{where}: field 'knobs_sources' names {stray[0]!r}, which is not in 'knobs'; drop it or add the knob"
        )
    if knobs.get("gemm_dtype", doc["precision"]) != doc["precision"]:
        raise MliteError(f"{where}: knob 'gemm_dtype' = {knobs['gemm_dtype']!r} contradicts field 'precision' = "
                         f"{doc['precision']!r}; make them agree")  # fmt: skip
    return dict(knobs), dict(sources)


def _recompute_modules(doc: dict, where: str) -> list:
    """The record's optional ``recompute_modules``: Megatron-Core module names, only with ``recompute`` selective."""
    mods = doc.get("recompute_modules", [])
    if not isinstance(mods, list) or not all(m in RECOMPUTE_MODULES for m in mods):
        raise MliteError(
            f"{where}: field 'recompute_modules' = {mods!r} must be a list of {', '.join(RECOMPUTE_MODULES)}"
        )
    if mods and doc["recompute"] != "selective":
        raise MliteError(f"{where}: field 'recompute_modules' needs recompute 'selective' (got {doc['recompute']!r})")
    return mods


def run_from_dict(doc, where: str) -> PublishedRun:
    """A checked :class:`PublishedRun` from one JSON record (``where`` names it in messages)."""
    if not isinstance(doc, dict):
        raise MliteError(f"{where}: a run is a JSON object with the fields {', '.join(REQUIRED_KEYS)}")
    if isinstance(doc.get("id"), str) and doc["id"].strip():
        where = f"{where} (run {doc['id']!r})"
    missing = [k for k in REQUIRED_KEYS if k not in doc]
    if missing:
        raise MliteError(f"{where}: missing field {missing[0]!r} ({len(missing)} missing); give every one of "
                         f"{', '.join(REQUIRED_KEYS)}")  # fmt: skip
    unknown = sorted(set(doc) - set(REQUIRED_KEYS) - set(OPTIONAL_KEYS))
    if unknown:
        raise MliteError(f"{where}: unknown field {unknown[0]!r}; the fields are {', '.join(REQUIRED_KEYS)} "
                         f"and optionally {', '.join(OPTIONAL_KEYS)}")  # fmt: skip
    for k in _STRINGS:
        v = doc[k]
        if not isinstance(v, str) or (k not in ("flops_formula", "notes") and not v.strip()):
            raise MliteError(f"{where}: field {k!r} must be a non-empty string, got {v!r}")
    for k in _POSITIVE_INTS:
        if not _is_int(doc[k]) or doc[k] < 1:
            raise MliteError(f"{where}: field {k!r} = {doc[k]!r} must be a positive integer")
    if doc["etp"] is not None and (not _is_int(doc["etp"]) or doc["etp"] < 1):
        raise MliteError(f"{where}: field 'etp' = {doc['etp']!r} must be a positive integer or null")
    _one_of(where, "hardware", doc["hardware"], hardware_names())
    _one_of(where, "precision", doc["precision"], PRECISIONS)
    _one_of(where, "recompute", doc["recompute"], RECOMPUTE)
    _one_of(where, "optimizer", doc["optimizer"], OPTIMIZERS)
    if not isinstance(doc["sequence_parallel"], bool):
        raise MliteError(f"{where}: field 'sequence_parallel' = {doc['sequence_parallel']!r} must be true or false")
    assumed = doc["assumed"]
    if not isinstance(assumed, list) or not all(isinstance(a, str) and a.strip() for a in assumed):
        raise MliteError(f"{where}: field 'assumed' must be a list of non-empty strings")
    measured = doc["measured"]
    if not isinstance(measured, dict) or not measured:
        raise MliteError(f"{where}: field 'measured' must be an object with one or more of {', '.join(MEASURED_KEYS)}")
    for k, v in measured.items():
        if k not in MEASURED_KEYS:
            raise MliteError(f"{where}: field 'measured' has unknown key {k!r}; use {', '.join(MEASURED_KEYS)}")
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v <= 0:
            raise MliteError(f"{where}: field 'measured.{k}' = {v!r} must be a positive number")
    model_parallel = doc["tp"] * doc["cp"] * doc["pp"]
    if doc["ngpu"] % model_parallel:
        raise MliteError(f"{where}: field 'ngpu' = {doc['ngpu']} is not divisible by tp*cp*pp = {model_parallel}")
    dp = doc["ngpu"] // model_parallel
    per_step = doc["micro_batch_size"] * dp
    if doc["global_batch_size"] != doc["num_microbatches"] * per_step:
        gbs = doc["global_batch_size"]
        fix = (
            f"give {gbs // per_step}" if gbs % per_step == 0 else "fix global_batch_size, micro_batch_size or the mesh"
        )
        raise MliteError(
            f"{where}: field 'num_microbatches' = {doc['num_microbatches']} does not match global_batch_size / "
            f"(micro_batch_size * dp) = {gbs} / ({doc['micro_batch_size']} * {dp}) (dp = ngpu / (tp*cp*pp)); {fix}"
        )
    layout = doc.get("pp_layout")
    if layout is not None and (not isinstance(layout, str) or not layout.strip()):
        raise MliteError(f"{where}: field 'pp_layout' must be a non-empty layout string (e.g. 'Et|(tt|)*30mL')")
    mods = _recompute_modules(doc, where)
    values = {k: doc[k] for k in REQUIRED_KEYS}
    knobs, sources = _knobs(doc, where)
    values.update(
        assumed=tuple(assumed),
        measured=dict(measured),
        pp_layout=layout,
        recompute_modules=tuple(mods),
        split=_split(doc, where),
        knobs=knobs,
        knobs_sources=sources,
    )
    return PublishedRun(**values)


def load_published(path: str | Path | None = None) -> list[PublishedRun]:
    """Every run of ``path`` (default: ``tests/data/step_times/published.json``), each checked; ids are unique."""
    p = Path(path).expanduser() if path is not None else DEFAULT_PATH
    try:
        doc = json.loads(p.read_text())
    except (OSError, UnicodeDecodeError) as e:
        raise MliteError(f"{p}: cannot read the published runs ({e.__class__.__name__}); check the path") from None
    except json.JSONDecodeError as e:
        raise MliteError(
            f'{p}: not JSON (line {e.lineno}: {e.msg}); the file is one object {{"runs": [...]}}'
        ) from None
    if not isinstance(doc, dict) or set(doc) != {"runs"} or not isinstance(doc["runs"], list):
        raise MliteError(f"{p}: the file is one object with a single key 'runs' holding a list of runs")
    runs, seen = [], set()
    for i, rec in enumerate(doc["runs"]):
        run = run_from_dict(rec, f"{p.name} run #{i}")
        if run.id in seen:
            raise MliteError(f"{p.name} run #{i}: field 'id' = {run.id!r} is used twice; give each run its own id")
        seen.add(run.id)
        runs.append(run)
    return runs
