"""How each training engine judges a mesh: the one place that says which of :func:`mlite.mesh.resolve`'s
engine-dependent switches (``auto_uneven``, ``kv_replication``) an engine takes. ``mlite mesh --engine`` and
``mlite import-launcher`` (by the launcher's target) both read it, so the two give the same verdict for the same mesh.

- ``mlite`` (``mlite mesh``'s default, the planner for the mlite runtime): stages split evenly or by an explicit
  ``pp_layout``; KV heads split over TP (the runtime does not replicate them).
- ``megatron-lite`` (verl's mlite engine, ``verl-mlite-*`` launchers): the engine keys verl passes have no
  ``pp_layout`` (:mod:`mlite.export.mlite_keys`), so Megatron Lite balances layers that do not split evenly itself
  (verl-project/verl ``examples/grpo_trainer/run_kimi_k2_6_glm5_1_megatron_lite.sh`` at commit 1dda039 runs
  Kimi-K2.6's 61 layers at ``engine.pp=8``); KV heads split over TP.
- ``megatron-core`` (verl's Megatron backend, ``verl-megatron-*`` launchers): layers divide by PP unless the
  first/last-stage keys or a layout say otherwise (``TransformerConfig.__post_init__``, megatron-core 0.16.1); query
  groups may divide TP instead (each rank then holds one replicated KV head).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EngineJudgment:
    """The engine-dependent switches of :func:`mlite.mesh.resolve`."""

    auto_uneven: bool
    """Layers that do not split evenly get the planner's uneven layout (a warning), not the layers rule's error."""
    kv_replication: bool
    """KV heads may divide TP (Megatron-Core replicates them) instead of TP dividing them."""


ENGINES = {
    "mlite": EngineJudgment(auto_uneven=False, kv_replication=False),
    "megatron-lite": EngineJudgment(auto_uneven=True, kv_replication=False),
    "megatron-core": EngineJudgment(auto_uneven=False, kv_replication=True),
}
"""Engine name -> how it judges a mesh (``mlite mesh --engine`` choices)."""


def target_engine(target: str) -> str:
    """The engine a launcher target runs: ``verl-megatron-*`` Megatron-Core, ``verl-mlite-*`` / ``verl-lite-*``
    Megatron Lite, anything else (``verl-fsdp-*``: no pipeline, no TP) the mlite planner's rule."""
    if target.startswith("verl-megatron"):
        return "megatron-core"
    if target.startswith(("verl-mlite", "verl-lite")):
        return "megatron-lite"
    return "mlite"


def judgment(engine: str) -> EngineJudgment:
    """:data:`ENGINES` ``[engine]``."""
    return ENGINES[engine]
