"""The model architectures the lite runtime builds, without importing torch: a run's preflight
(:func:`mlite.launch.cut.check_cut`, :mod:`mlite.launch.from_plan`) refuses another architecture before any process
starts, and :mod:`mlite.runtime.models.lite` builds exactly these."""

from __future__ import annotations

SUPPORTED_ARCHITECTURES = ("llama", "qwen2", "qwen3", "qwen3_moe", "mixtral", "qwen3_next", "qwen3_5_moe")
"""``ModelSpec.architecture`` values the lite model builds."""
