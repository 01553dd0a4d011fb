"""The lite runtime as a verl training engine (``engine=lite``), registered through verl's ``EngineRegistry``.

Imported only when verl is used (``import mlite`` never imports this package, and this module imports verl only in
:func:`register`). Submodules: :mod:`.engine` (``LiteEngine``, a ``BaseEngine``), :mod:`.engine_config` (the Hydra
``_target_`` of ``conf/engine/lite.yaml``), :mod:`.platform` (the CPU platform shim), :mod:`.launch` (the torchrun
entry). Key map verl <-> lite runtime: :data:`mlite.options.table.LITE_ENGINE_KEYS`.
"""

from __future__ import annotations

__all__ = ["register"]


def register() -> None:
    """Register ``LiteEngine`` as verl's ``language_model`` engine ``lite`` (cuda and cpu); idempotent."""
    from . import engine  # noqa: F401  (the decorator registers on import)
