"""Sweeps: one option over values, or a list of meshes, into a pandas DataFrame; the mesh table with estimates."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from operator import attrgetter

from ..errors import MliteError
from ..mesh import MeshPlan, enumerate_meshes, resolve
from ..options import TrainingOptions
from ..options.rules import PRECISION_MESH_AXES, precision_mesh
from .estimate import estimate
from .table_fast import TableEstimator


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


def fits_callback(spec, training: TrainingOptions, more=None):
    """A ``fits`` callback for :func:`mlite.mesh.enumerate_meshes` that also returns the per-GPU figures; ``more(plan)``
    adds fields to each mesh that fits (:func:`mlite.time.table.mesh_table` adds the predicted step). The figures are
    ``estimate(spec, plan, training)``'s, computed by :class:`mlite.memory.table_fast.TableEstimator`."""

    table = TableEstimator(spec, training)  # the estimates' figures, per-table invariants once (table_fast)

    precision_axes = attrgetter(*PRECISION_MESH_AXES, "__class__")  # a tuple however many sizes it names
    refused: dict[tuple, str | None] = {}  # precision_mesh's verdict per (cp, pp): PRECISION_MESH_AXES

    def fits(plan):
        key = precision_axes(plan.parallel)
        if key not in refused:
            try:  # a mesh the precision profile has not been validated with (cp, pp) is not a candidate
                precision_mesh(training, plan.parallel)
                refused[key] = None
            except MliteError as e:
                refused[key] = e.message
        why = refused[key]
        if why is not None:
            return False, {"refused": why}
        ok, total, peak, static, host = table.figures(plan)
        extra = {
            "total_bytes": round(total),
            "peak_bytes": round(peak),
            "static_bytes": round(static),
            "host_bytes": round(host),
        }
        if more is not None and ok:
            extra.update(more(plan))
        return ok, extra

    return fits


def mesh_table(spec, ngpu: int, training: TrainingOptions | None = None, more=None, **kw):
    """Every valid mesh with its estimate, those that fit first (then by the planner's score); ``more``: see
    :func:`fits_callback` (with speed fields the meshes that fit rank by them: :func:`mlite.mesh.enumerate.rank_key`;
    :func:`mlite.time.table.mesh_table` is this table ranked by predicted speed)."""
    o = training or TrainingOptions()
    rows = enumerate_meshes(
        spec,
        ngpu,
        seq_len=o.seq_len,
        gpus_per_node=o.gpus_per_node,
        num_microbatches=o.num_microbatches,
        fits=fits_callback(spec, o, more),
        **kw,
    )
    return [m for m in rows if "refused" not in (m.extra or {})]  # refused by the precision profile's mesh rule
