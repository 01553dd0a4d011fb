"""What a mesh planner offers and prints: the sensible values of each size, a mesh's key and ``mlite mesh`` command
line, and the rows of a table of ranked meshes. Widgets render these; they compute nothing of their own."""

from __future__ import annotations

from .axes import AXES, AXIS_NAMES, BY_NAME
from .config import DEFAULT_GPUS_PER_NODE, DEFAULT_SEQ_LEN, ParallelConfig
from .rules import divisors

FIELDS = AXIS_NAMES
"""The model-parallel sizes a planner sets (mlite's ``ParallelConfig`` names, :data:`mlite.mesh.axes.AXES`)."""
MAX_VPP = 8
"""Largest VPP offered."""


def mesh_key(p: ParallelConfig) -> str:
    """``tp-pp-vpp-cp-ep-etp``: identifies a mesh in the tables."""
    return "-".join(str(v) for v in p.sizes().values())


def field_options(spec, ngpu: int, field: str) -> list[int]:
    """Sensible values of ``field`` for ``spec`` on ``ngpu`` GPUs (divisors the model can use at all): the divisors
    of ``ngpu`` up to the axis's :attr:`~mlite.mesh.axes.Axis.bound`; 1 .. :data:`MAX_VPP` for an axis that is no
    world factor (VPP); only 1 for an expert-only axis (EP, ETP) of a dense model."""
    axis = BY_NAME[field]
    if not axis.world:
        return list(range(1, MAX_VPP + 1))
    if axis.expert and not axis.dense and not spec.num_experts:
        return [1]
    ds = divisors(ngpu)
    return [d for d in ds if d <= getattr(spec, axis.bound)] if axis.bound else ds


def mesh_command(ref: str, plan) -> str:
    """The ``mlite mesh`` command line of ``plan`` (flags at their defaults left out)."""
    p = plan.parallel
    parts = ["mlite", "mesh", ref if " " not in ref else repr(ref), "--ngpu", str(plan.ngpu)]
    for axis in AXES:
        v = p.size(axis.name)
        if v != 1:
            parts += [axis.flag, str(v)]
    if p.pp_layout:
        parts += ["--pp-layout", repr(p.pp_layout)]
    if plan.gpus_per_node != DEFAULT_GPUS_PER_NODE:
        parts += ["--gpus-per-node", str(plan.gpus_per_node)]
    if plan.seq_len != DEFAULT_SEQ_LEN:
        parts += ["--seq-len", str(plan.seq_len)]
    return " ".join(parts)


def planner_rows(meshes) -> list[dict]:
    """Table rows of :class:`mlite.mesh.RankedMesh` es (ranking order); ``cfg`` carries an uneven layout along."""
    rows = []
    for i, m in enumerate(meshes, 1):
        plan, p = m.plan, m.plan.parallel
        auto = plan.layout_source == "auto"
        rows.append(
            {
                "rank": i,
                "key": mesh_key(p),
                **p.sizes(),
                "dp": plan.dp,
                "edp": plan.edp,
                "score": m.score,
                "stages": "uneven" if auto else "even",
                "layout": plan.layout,
                "warnings": len(plan.warnings),
                "warning_text": "\n".join(f.message for f in plan.warnings),
                "cfg": ParallelConfig(**p.sizes(), pp_layout=plan.layout if auto else None),
            }
        )
    return rows


def config_values(p: ParallelConfig) -> dict:
    """A ParallelConfig as planner control values (ETP resolved, an empty pp_layout for none)."""
    return p.sizes() | {"pp_layout": p.pp_layout or ""}
