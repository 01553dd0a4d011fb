"""``validate_run(config) -> RunConfig``: everything about a debug run that can be checked before a process starts or
a file is written, and the config the workers get (every path absolute).

Why here and not in the worker: the workers start in the run directory, so a path relative to the caller's
directory means nothing to them, and a mistake found by a worker costs a torchrun start and ends as exit 1 with a
half-made run directory. The caller's process checks, in order: the fields (:meth:`RunConfig.validate`), the model
config (read and understood), the dataset (the parquet file exists, has a ``messages`` column and enough rows for
every data-parallel rank), the tokenizer, the mesh the run uses for ``nproc`` processes, the optimizer settings the
runtime accepts, the environment (CUDA and GPU count, Ray), and the run folder (not a file, no older run unless
``overwrite``, writable). The first problem raises :class:`~mlite.errors.MliteError` (one line naming the field).
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from ..errors import MliteError
from ..paths import DATASET_SUFFIX, dataset_file, tokenizer_file
from .config import RunConfig
from .rundir import RunDir

MESSAGES_COLUMN = "messages"
"""The conversation column of a verl SFT parquet file."""


def _under(base: Path, ref: str) -> Path:
    p = Path(ref).expanduser()
    return p if p.is_absolute() else base / p


def resolve_model(ref: str, base: Path) -> str:
    """A model reference the workers can read: an existing file or folder (relative to ``base``) as an absolute
    path; otherwise the ``data/models`` name unchanged (the model reader resolves names the same everywhere)."""
    p = _under(base, ref)
    if p.is_file() or (p.is_dir() and (p / "config.json").is_file()):
        return str(p.resolve())
    return ref


def resolve_dataset(ref: str, base: Path) -> str:
    """A dataset reference the workers can read: a ``.parquet`` path or a folder (relative to ``base``) as an
    absolute path; otherwise the ``data/datasets`` name unchanged."""
    p = _under(base, ref)
    if p.suffix == DATASET_SUFFIX or p.is_dir():
        return str(p.resolve())
    return ref


def check_dataset(ref: str, nproc: int) -> int:
    """Rows of the training split of ``ref``; raises when it is missing, unreadable, has no ``messages`` column or
    fewer rows than data-parallel ranks."""
    import pyarrow.parquet as pq

    path = dataset_file(ref, "train")
    if not path.is_file():
        raise MliteError(
            f"dataset: {path} not found; give a dataset name under data/datasets/ (tiny_sft) or a "
            f"verl-format .parquet path"
        )
    try:
        meta = pq.ParquetFile(path)
    except (OSError, ValueError) as e:  # pyarrow's ArrowInvalid is a ValueError
        raise MliteError(f"dataset: {path} is not a readable parquet file ({str(e).splitlines()[0][:160]})") from None
    if MESSAGES_COLUMN not in meta.schema_arrow.names:
        raise MliteError(
            f"dataset: {path} has no '{MESSAGES_COLUMN}' column (columns: "
            f"{', '.join(meta.schema_arrow.names)}); give a verl-format SFT parquet file"
        )
    rows = meta.metadata.num_rows
    if rows < nproc:
        raise MliteError(
            f"nproc: {nproc} data-parallel processes but the dataset {path} has {rows} row(s); use "
            f"--nproc {max(1, rows)} or fewer"
        )
    return rows


def check_mesh(config: RunConfig):
    """The mesh of the run (``nproc`` ranks, pure data parallelism, as the planner resolves it); raises on an
    invalid one, naming the first rule it breaks."""
    from ..errors import ConfigError
    from ..mesh import ParallelConfig, resolve

    try:
        spec = config.model_spec()
    except ConfigError as e:  # name the field: the message itself names the file and the key
        raise MliteError(f"model: {e.message}") from None
    plan = resolve(
        spec,
        config.nproc,
        ParallelConfig(),
        seq_len=config.tokens_per_microbatch,
        gpus_per_node=config.nproc,
        auto_uneven=True,
    )
    if not plan.valid:
        first = plan.errors[0]
        raise MliteError(
            f"nproc: {config.nproc} processes do not make a valid mesh for {spec.name}: [{first.rule}] {first.message}"
        )
    return plan


def validate_run(config: RunConfig, *, overwrite: bool = False, cwd: str | os.PathLike | None = None) -> RunConfig:
    """Check ``config`` for a run started from ``cwd`` (default: the current directory) and return it with the
    model, dataset and run folder as absolute paths. Writes nothing and starts nothing."""
    if not isinstance(config, RunConfig):
        raise MliteError(f"start: expected a RunConfig, got {type(config).__name__}")
    base = Path(cwd).resolve() if cwd is not None else Path.cwd()
    config.validate()
    if config.crash_at_step is not None and config.crash_at_step > config.steps:
        raise MliteError(
            f"crash_at_step: {config.crash_at_step} is after the last step ({config.steps}): the run "
            f"would not crash; give --crash-at-step {config.steps} or less"
        )
    cfg = replace(config, model=resolve_model(config.model, base), dataset=resolve_dataset(config.dataset, base))
    if cfg.hf_checkpoint is not None:
        cfg = replace(cfg, hf_checkpoint=str(_under(base, cfg.hf_checkpoint).resolve()))
    if cfg.out is not None:
        cfg = replace(cfg, out=str(_under(base, cfg.out).resolve()))
    cfg = replace(cfg, out=str(cfg.resolved_out()))
    check_mesh(cfg)  # reads the model config: a missing or malformed one, a cut out of range fail here
    from .cut import check_cut

    check_cut(cfg)  # an architecture the runtime does not build, a checkpoint that does not match
    check_dataset(cfg.dataset, cfg.nproc)
    if not tokenizer_file().is_file():
        raise MliteError(
            f"tokenizer: {tokenizer_file()} not found; reinstall mlite-lab or set MLITE_DATA to a "
            f"folder holding tokenizer/tokenizer.json"
        )
    cfg.check_environment()
    RunDir(cfg.out).check_new(overwrite=overwrite)
    return cfg
