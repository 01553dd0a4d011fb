"""Where the kit's embedded defaults live: model configs, the tokenizer, the tiny dataset, sample logs.

``$MLITE_DATA`` when set; else the ``data/`` folder of a source checkout (editable install, tests); else the copy
installed with the package (``mlite/_data``: package data of the wheel, what a non-editable ``pip install`` has; in
the checkout its ``models``, ``tokenizer`` and ``datasets`` are links into ``data/``; the sample logs and the scripts
that make the data stay in the checkout). The shipped locations are absolute, so worker processes started in
another directory see the same files.
"""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
"""The installed ``mlite`` package."""

REPO_ROOT = PACKAGE_DIR.parent
"""The folder holding the ``mlite`` package: the repository root in a source checkout (``site-packages`` or a
``--target`` folder in a plain install); on ``PYTHONPATH`` it makes ``mlite`` importable in worker processes."""

PACKAGED_DATA = PACKAGE_DIR / "_data"
"""Where a wheel installs ``data/models``, ``data/tokenizer`` and ``data/datasets``."""

DATASET_SUFFIX = ".parquet"


def is_source_checkout() -> bool:
    """True when ``mlite`` is imported from the repository itself (its ``pyproject.toml`` and ``data/`` beside)."""
    return (REPO_ROOT / "pyproject.toml").is_file() and (REPO_ROOT / "data" / "models").is_dir()


def data_dir() -> Path:
    """The data folder: model configs, sample logs, the tiny dataset and its tokenizer."""
    env = os.environ.get("MLITE_DATA")
    if env:
        return Path(env).expanduser().resolve()
    if is_source_checkout():
        return REPO_ROOT / "data"
    return PACKAGED_DATA


def models_dir() -> Path:
    """``data/models``: the configs users plan for and the tiny debug configs."""
    return data_dir() / "models"


def logs_dir() -> Path:
    """``data/logs``: sample logs for the analysis notebook."""
    return data_dir() / "logs"


def datasets_dir() -> Path:
    """``data/datasets``: the SFT datasets a debug run can name."""
    return data_dir() / "datasets"


def tokenizer_file() -> Path:
    """``data/tokenizer/tokenizer.json``: the shipped 512-token tokenizer."""
    return data_dir() / "tokenizer" / "tokenizer.json"


def dataset_file(name_or_path: str | os.PathLike, split: str = "train") -> Path:
    """``data/datasets/<name>/<split>.parquet`` for a dataset name, the file itself for a ``.parquet`` path, or
    ``<dir>/<split>.parquet`` for a folder (relative paths against the current directory)."""
    p = Path(name_or_path).expanduser()
    if p.suffix == DATASET_SUFFIX:
        return p
    if p.is_dir():
        return p / f"{split}{DATASET_SUFFIX}"
    return datasets_dir() / str(name_or_path) / f"{split}{DATASET_SUFFIX}"


def results_dir() -> Path:
    """``bench/results``: GPU measurements committed with the commands that produced them (source checkout)."""
    return Path(os.environ.get("MLITE_RESULTS", REPO_ROOT / "bench" / "results"))
