"""The parallel axes once: each mesh axis with its flag, help, Megatron-Core name and verl / Megatron Lite keys.

Everything that spells a mesh axis derives from :data:`AXES` (argparse flags of ``mesh`` / ``memory`` / ``export`` /
``run``, the verl launcher keys in both directions, the planner's controls, table headers, the rank layout's
dimensions :data:`DENSE_DIMS` / :data:`EXPERT_DIMS`). What is special about one axis is a field of its entry, not an
``if name == ...``: ETP's null means TP in Megatron-Core (:attr:`Axis.megatron_inherits`), VPP is no world factor
and Megatron-Core wants null for it off (:attr:`Axis.rank_order`, :attr:`Axis.megatron_null_note`), the lite runtime
refuses PP, VPP and ETP > 1 (:attr:`Axis.lite_refusal`). Adding an axis is one :class:`Axis` entry here plus its
field on :class:`~mlite.mesh.config.ParallelConfig` (``tests/test_axes.py`` holds the two equal).

Sources: Megatron-Core ``megatron/core/parallel_state.py`` (``initialize_model_parallel`` argument names),
verl ``verl/trainer/config/engine/megatron.yaml`` (``*_model_parallel_size`` keys), the Megatron Lite engine's
``engine.tp/pp/vpp/cp/ep/etp`` (``engine/mlite.yaml`` of verl_mlite); the rank order is Megatron-Core's
``RankGenerator`` (``parallel_state.py``, order ``"tp-cp-ep-dp-pp"``; ``tests/test_mesh.py`` compares the groups).
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
    lite_refusal: str = ""
    """Why the kit's lite runtime (``mlite run``) refuses sizes > 1 on this axis; empty: it runs them."""
    rank_order: int | None = None
    """Position in Megatron-Core's ``RankGenerator`` order ``tp-cp-ep-dp-pp`` (fastest first; ETP takes TP's place in
    the expert generator); None for an axis that is no world factor (VPP)."""
    megatron_inherits: str | None = None
    """The axis whose size Megatron-Core uses when this key is null (ETP: ``"tp"``); None: no inheriting."""
    megatron_null_note: str = ""
    """Non-empty where Megatron-Core wants null, not 1, for the axis off (VPP: no interleaved schedule; it rejects 1):
    the comment a launcher writes beside that null."""
    lite_key: str = ""
    """The Megatron Lite engine key (``engine.<key>``, verl_mlite ``engine/mlite.yaml``) when it is not :attr:`name`."""
    bound: str | None = None
    """The :class:`~mlite.models.ModelSpec` count a size may not exceed (TP: ``num_attention_heads``); the planner
    offers the divisors of the GPU count up to it."""
    width: int = 3
    """Column width of the axis in ``mlite mesh --list``."""
    run_help: str = ""
    """The help of ``mlite run``'s flag for the axis (a debug run's mesh on one node); empty: ``mlite run`` has no
    flag for it (the lite runtime has no pipeline)."""

    @property
    def engine_key(self) -> str:
        """The Megatron Lite engine key (``tp`` of ``engine.tp``)."""
        return self.lite_key or self.name

    @property
    def lite_runs(self) -> bool:
        """The kit's lite runtime runs sizes > 1 on this axis."""
        return not self.lite_refusal

    @property
    def world(self) -> bool:
        """A factor of the dense or the expert world (not VPP)."""
        return self.dense or self.expert

    @property
    def megatron_nullable(self) -> bool:
        """A null Megatron key is read (ETP inherits, VPP is off) rather than refused."""
        return self.megatron_inherits is not None or bool(self.megatron_null_note)


AXES: tuple[Axis, ...] = (
    Axis(
        "tp",
        "--tp",
        "tensor parallel size",
        "TP",
        "tensor_model_parallel_size",
        "--tensor-model-parallel-size",
        expert=False,
        rank_order=0,
        bound="num_attention_heads",
        run_help="tensor parallel size (sequence parallel); --nproc = TP*CP*DP",
    ),
    Axis(
        "pp",
        "--pp",
        "pipeline parallel size",
        "PP",
        "pipeline_model_parallel_size",
        "--pipeline-model-parallel-size",
        expert=True,
        lite_refusal="the lite runtime runs tp, cp and ep on one node but no pipeline parallelism (pp = vpp = 1)",
        rank_order=4,
        bound="num_layers",
    ),
    Axis(
        "vpp",
        "--vpp",
        "virtual pipeline stages per rank",
        "VPP",
        "virtual_pipeline_model_parallel_size",
        "--num-virtual-stages-per-pipeline-rank",
        dense=False,
        lite_refusal="the lite runtime runs tp, cp and ep on one node but no pipeline parallelism (pp = vpp = 1)",
        megatron_null_note="null: no interleaving (Megatron-Core rejects 1)",
    ),
    Axis(
        "cp",
        "--cp",
        "context parallel size",
        "CP",
        "context_parallel_size",
        "--context-parallel-size",
        rank_order=1,
        run_help="context parallel size; --nproc = TP*CP*DP",
    ),
    Axis(
        "ep",
        "--ep",
        "expert parallel size",
        "EP",
        "expert_model_parallel_size",
        "--expert-model-parallel-size",
        dense=False,
        expert=True,
        rank_order=2,
        bound="num_experts",
        width=4,
        run_help="expert parallel size; --nproc = EP*EDP (with ETP 1)",
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
        lite_refusal="the lite runtime implements etp = 1 only (experts whole on each EP rank); use --etp 1",
        rank_order=0,
        megatron_inherits="tp",
        run_help="expert tensor parallel size (the lite runtime runs 1 only)",
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
RUN_AXES: tuple[Axis, ...] = tuple(a for a in AXES if a.run_help)
"""The axes ``mlite run`` takes a flag for (``tp, cp, ep, etp``)."""
MESH_NAMES: tuple[str, ...] = AXIS_NAMES + DERIVED
"""Every size of a resolved mesh, the axes then DP and EDP (``tp ... etp, dp, edp``)."""
DP_RANK_ORDER = 3
"""DP's (and EDP's) position in Megatron-Core's ``RankGenerator`` order ``tp-cp-ep-dp-pp``."""


def _dims(world: str, dp: str) -> tuple[str, ...]:
    axes = [(a.rank_order, a.name) for a in AXES if a.rank_order is not None and getattr(a, world)]
    return tuple(n for _, n in sorted([*axes, (DP_RANK_ORDER, dp)]))


DENSE_DIMS: tuple[str, ...] = _dims("dense", "dp")
"""Dense world factors, fastest-varying first (``tp, cp, dp, pp``: dense ranks = TP*CP*DP*PP)."""
EXPERT_DIMS: tuple[str, ...] = _dims("expert", "edp")
"""Expert world factors, fastest-varying first (``etp, ep, edp, pp``: expert ranks = ETP*EP*EDP*PP)."""


def model_parallel(dims: tuple[str, ...]) -> tuple[str, ...]:
    """The axes of ``dims`` without the derived DP / EDP (``tp, cp, pp`` of :data:`DENSE_DIMS`)."""
    hit = _MODEL_PARALLEL.get(dims)
    if hit is None:
        hit = _MODEL_PARALLEL[dims] = tuple(d for d in dims if d in BY_NAME)
    return hit


_MODEL_PARALLEL: dict[tuple[str, ...], tuple[str, ...]] = {}
""":func:`model_parallel` per ``dims`` (the whole-mesh table asks it several times per mesh)."""


def product_label(dims, sep: str = "*") -> str:
    """``TP*CP*DP*PP``: the upper-case labels of ``dims`` joined by ``sep``."""
    return sep.join(BY_NAME[d].label if d in BY_NAME else d.upper() for d in dims)


def sizes_text(sizes, *, derived: bool = False) -> str:
    """``tp=1 pp=1 vpp=1 cp=1 ep=1 etp=1`` (with ``dp=.. edp=..`` when ``derived``) of a name -> size mapping."""
    names = AXIS_NAMES + DERIVED if derived else AXIS_NAMES
    return " ".join(f"{n}={sizes[n]}" for n in names)


__all__ = [
    "AXES",
    "AXIS_NAMES",
    "BY_NAME",
    "DENSE_DIMS",
    "DERIVED",
    "DP_RANK_ORDER",
    "EXPERT_DIMS",
    "MEGATRON_KEYS",
    "MESH_NAMES",
    "RUN_AXES",
    "Axis",
    "model_parallel",
    "product_label",
    "sizes_text",
]
