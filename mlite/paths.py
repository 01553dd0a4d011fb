"""Where the kit's embedded defaults live (``data/`` at the repository root, or ``$MLITE_DATA``)."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def data_dir() -> Path:
    """The ``data/`` folder: model configs, sample logs, the tiny dataset."""
    return Path(os.environ.get("MLITE_DATA", REPO_ROOT / "data"))


def models_dir() -> Path:
    """``data/models``: the configs users plan for and the tiny debug configs."""
    return data_dir() / "models"


def logs_dir() -> Path:
    """``data/logs``: sample logs for the analysis notebook."""
    return data_dir() / "logs"


def results_dir() -> Path:
    """``bench/results``: GPU measurements committed with the commands that produced them."""
    return Path(os.environ.get("MLITE_RESULTS", REPO_ROOT / "bench" / "results"))
