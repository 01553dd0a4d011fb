"""The mesh table ranked by predicted speed: :func:`mlite.memory.mesh_table` with the step of every mesh that fits."""

from __future__ import annotations


def speed_fields(spec, plan, training, hardware) -> dict:
    """The predicted step of one mesh as the mesh table's extra fields (``step_s``, ``tokens_per_s_per_gpu``,
    ``mfu``, ``time_parts``)."""
    from .model import predict

    t = predict(spec, plan, training, hardware)
    return {
        "step_s": t.step_s,
        "tokens_per_s_per_gpu": t.tokens_per_s_per_gpu,
        "mfu": t.mfu,
        "time_parts": dict(t.parts),
    }


def mesh_table(spec, ngpu: int, training=None, hardware=None, **kw):
    """Every valid mesh with its estimate, those that fit first; with a ``hardware`` profile (a name or
    :class:`~mlite.time.HardwareProfile`) the meshes that fit carry their predicted step and rank by tokens/s/GPU
    (:func:`mlite.mesh.enumerate.rank_key`); without one, :func:`mlite.memory.mesh_table` as it is."""
    from ..memory.sweep import mesh_table as memory_table
    from ..options import TrainingOptions
    from .hardware import load_hardware

    o = training or TrainingOptions()
    if hardware is None:
        return memory_table(spec, ngpu, o, **kw)
    hw = load_hardware(hardware)
    return memory_table(spec, ngpu, o, more=lambda plan: speed_fields(spec, plan, o, hw), **kw)
