"""The parallel axes once: each mesh axis with its flag, help, Megatron-Core name and verl / Megatron Lite keys.

Everything that spells a mesh axis derives from :data:`AXES` (argparse flags of ``mesh`` / ``memory`` / ``export`` /
``run``, the verl launcher keys in both directions, the planner's controls, table headers). Adding an axis is one
:class:`Axis` entry here plus its field on :class:`~mlite.mesh.config.ParallelConfig` (a test holds the two equal).

Sources: Megatron-Core ``megatron/core/parallel_state.py`` (``initialize_model_parallel`` argument names),
verl ``verl/trainer/config/engine/megatron.yaml`` (``*_model_parallel_size`` keys), the Megatron Lite engine's
``engine.tp/pp/vpp/cp/ep/etp`` (``engine/mlite.yaml`` of verl_mlite).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Axis:
    """One model-parallel axis of the mesh."""

    name: str
    """mlite's name and the ``ParallelConfig`` field (``tp``)."""
    flag: str
    """The command-line flag (``--tp``)."""
    help: str
    """One line for ``--help`` and tooltips."""
    label: str
    """Upper-case label of tables and widgets (``TP``)."""
    megatron: str
    """Megatron-Core / verl Megatron backend name (``tensor_model_parallel_size``)."""
    megatron_flag: str
    """Megatron-LM's command-line flag (``--tensor-model-parallel-size``)."""
    default: int | None = 1
    """Default size (``None`` for ETP: inherit; mlite reads it as 1, Megatron-Core as TP)."""
    dense: bool = True
    """Part of the dense world (TP x CP x DP x PP)."""
    expert: bool = False
    """Part of the expert world (ETP x EP x EDP x PP)."""
    lite_runs: bool = True
    """The kit's lite runtime runs sizes > 1 on this axis (``mlite run``)."""


AXES: tuple[Axis, ...] = (
    Axis(
        "tp",
        "--tp",
        "tensor parallel size",
        "TP",
        "tensor_model_parallel_size",
        "--tensor-model-parallel-size",
        expert=False,
    ),
    Axis(
        "pp",
        "--pp",
        "pipeline parallel size",
        "PP",
        "pipeline_model_parallel_size",
        "--pipeline-model-parallel-size",
        expert=True,
        lite_runs=False,
    ),
    Axis(
        "vpp",
        "--vpp",
        "virtual pipeline stages per rank",
        "VPP",
        "virtual_pipeline_model_parallel_size",
        "--num-virtual-stages-per-pipeline-rank",
        dense=False,
        lite_runs=False,
    ),
    Axis("cp", "--cp", "context parallel size", "CP", "context_parallel_size", "--context-parallel-size"),
    Axis(
        "ep",
        "--ep",
        "expert parallel size",
        "EP",
        "expert_model_parallel_size",
        "--expert-model-parallel-size",
        dense=False,
        expert=True,
    ),
    Axis(
        "etp",
        "--etp",
        "expert tensor parallel size (default 1)",
        "ETP",
        "expert_tensor_parallel_size",
        "--expert-tensor-parallel-size",
        default=None,
        dense=False,
        expert=True,
        lite_runs=False,
    ),
)
"""The model-parallel axes in mlite's order (``tp, pp, vpp, cp, ep, etp``); DP and EDP are derived."""

AXIS_NAMES: tuple[str, ...] = tuple(a.name for a in AXES)
"""``("tp", "pp", "vpp", "cp", "ep", "etp")``."""

BY_NAME: dict[str, Axis] = {a.name: a for a in AXES}
"""``name -> Axis``."""

MEGATRON_KEYS: dict[str, str] = {a.name: a.megatron for a in AXES}
"""mlite name -> Megatron-Core / verl Megatron key (``tp -> tensor_model_parallel_size``)."""

DERIVED: tuple[str, ...] = ("dp", "edp")
"""Data-parallel sizes the planner derives from the GPU count (dense and expert)."""

__all__ = ["AXES", "AXIS_NAMES", "BY_NAME", "DERIVED", "MEGATRON_KEYS", "Axis"]
