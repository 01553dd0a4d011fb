"""How good is the estimate: the committed GPU measurements with their errors, for both measured sets: the lite
runtime's (``bench/results/gpu_memory.csv``) and Megatron-Core's (``bench/results/mcore_memory.csv``, which has the
same columns and more)."""

from __future__ import annotations

from pathlib import Path

from ..errors import MliteError
from ..paths import results_dir

COLUMNS = (
    "config",
    "predicted_static_bytes",
    "measured_static_bytes",
    "predicted_peak_bytes",
    "measured_peak_bytes",
    "gpu",
    "torch_version",
    "command",
)
"""The columns both measured sets have (``gpu_memory.csv``'s contract; ``mcore_memory.csv`` adds its own)."""
BOUNDS = {"static": 0.03, "peak": 0.10}
"""Acceptance bounds of the relative error."""


def load_gpu_memory(path: str | Path | None = None):
    """The measurements as a DataFrame with ``static_error`` and ``peak_error`` (predicted / measured - 1)."""
    import pandas as pd

    p = Path(path) if path else results_dir() / "gpu_memory.csv"
    if not p.is_file():
        raise MliteError(f"{p}: no GPU measurements; run the commands in bench/gpu_validate.py's docstring")
    df = pd.read_csv(p)
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise MliteError(f"{p}: missing column(s) {', '.join(missing)}; expected {', '.join(COLUMNS)}")
    for kind in ("static", "peak"):
        df[f"{kind}_error"] = df[f"predicted_{kind}_bytes"] / df[f"measured_{kind}_bytes"] - 1.0
        df[f"{kind}_within_bound"] = df[f"{kind}_error"].abs() <= BOUNDS[kind]
    return df
