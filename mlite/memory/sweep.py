"""Sweeps: one option over values, or a list of meshes, into a pandas DataFrame; the mesh table with estimates."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from ..mesh import MeshPlan, enumerate_meshes, resolve
from ..options import TrainingOptions
from .estimate import estimate


def _row(est) -> dict:
    w = est.worst
    p = est.plan.parallel
    return {
        **p.sizes(),
        "dp": est.plan.dp,
        "edp": est.plan.edp,
        "params": w.params,
        "grads": w.grads,
        "optimizer": w.optimizer,
        "activations": w.activation_total,
        "other": sum(w.other.values()) + w.transient_peak,
        "static": w.static,
        "peak": w.peak,
        "total": w.total,
        "host_per_gpu": w.host_total,
        "bytes_per_param": est.bytes_per_param,
        "fits": est.fits,
        "stage": w.pp_rank,
    }


def sweep(
    spec,
    *,
    training: TrainingOptions | None = None,
    meshes: Iterable[MeshPlan] | None = None,
    ngpu: int | None = None,
    parallel=None,
    option: str | None = None,
    values: Iterable | None = None,
):
    """Estimates over ``option`` = each of ``values`` (one mesh), or over ``meshes``; one row each."""
    import pandas as pd

    base = training or TrainingOptions()
    rows = []
    if option is not None:
        if not hasattr(base, option):
            from ..errors import MliteError

            raise MliteError(f"sweep: unknown training option {option!r}")
        plan = resolve(spec, ngpu, parallel, seq_len=base.seq_len, auto_uneven=True) if ngpu else None
        for v in values or []:
            o = replace(base, **{option: v})
            row = _row(estimate(spec, plan if plan else None, o, ngpu=ngpu, explain=False))
            rows.append({option: v, **row})
    else:
        for plan in meshes or []:
            rows.append(_row(estimate(spec, plan, base, explain=False)))
    return pd.DataFrame(rows)


def fits_callback(spec, training: TrainingOptions, hardware=None):
    """A ``fits`` callback for :func:`mlite.mesh.enumerate_meshes` that also returns the per-GPU figures; with a
    ``hardware`` profile (a name or :class:`~mlite.time.HardwareProfile`) a mesh that fits also gets its predicted
    step (:func:`mlite.time.predict`): ``step_s``, ``tokens_per_s_per_gpu``, ``mfu`` and ``time_parts``."""
    hw = None
    if hardware is not None:
        from ..time import load_hardware

        hw = load_hardware(hardware)

    def fits(plan):
        est = estimate(spec, plan, training, explain=False)
        w = est.worst
        extra = {
            "total_bytes": round(w.total),
            "peak_bytes": round(w.peak),
            "static_bytes": round(w.static),
            "host_bytes": round(w.host_total),
        }
        if hw is not None and est.fits:
            extra.update(speed_fields(spec, plan, training, hw))
        return est.fits, extra

    return fits


def speed_fields(spec, plan, training: TrainingOptions, hardware) -> dict:
    """The predicted step of one mesh as the mesh table's extra fields."""
    from ..time import predict

    t = predict(spec, plan, training, hardware)
    return {
        "step_s": t.step_s,
        "tokens_per_s_per_gpu": t.tokens_per_s_per_gpu,
        "mfu": t.mfu,
        "time_parts": dict(t.parts),
    }


def mesh_table(spec, ngpu: int, training: TrainingOptions | None = None, hardware=None, **kw):
    """Every valid mesh with its estimate, those that fit first, then by the planner's score; with a ``hardware``
    profile (name or :class:`~mlite.time.HardwareProfile`) the meshes that fit are ranked by their predicted
    tokens/s/GPU first (:func:`mlite.mesh.enumerate.rank_key`)."""
    o = training or TrainingOptions()
    return enumerate_meshes(
        spec,
        ngpu,
        seq_len=o.seq_len,
        gpus_per_node=o.gpus_per_node,
        num_microbatches=o.num_microbatches,
        fits=fits_callback(spec, o, hardware),
        **kw,
    )
