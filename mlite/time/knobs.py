"""Framework settings that change a step's time but not its memory plan (the time model's own inputs).

The defaults are what the lite runtime and Megatron-Core's DDP do out of the box for the kit's launchers: bf16 GEMMs,
gradient reduce-scatter and parameter all-gather overlapped (``overlap_grad_reduce`` / ``overlap_param_gather``),
no overlap of TP or EP traffic, FSDP2 resharding after the forward and reducing in fp32. A published run states its
framework's values (``tests/data/step_times/published.json``: ``knobs`` with their sources), and ``mlite time`` takes
them as flags (:func:`add_knob_flags`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

from ..errors import MliteError


@dataclass(frozen=True, kw_only=True)
class Knobs:
    """What the framework does that the memory plan does not say."""

    gemm_dtype: str = "bf16"
    """``bf16``, or ``fp8``: the linear layers' GEMMs (forward and both backward GEMMs) at the fp8 peak, plus the
    casts of their inputs (Transformer Engine's fp8 recipes); attention stays bf16."""
    dispatch_dtype: str = "bf16"
    """dtype of the tokens the EP dispatch sends (``fp8`` halves the dispatch bytes; the combine stays bf16)."""
    overlap_grad_reduce: bool = True
    """dist_opt: the gradient reduce-scatter runs during the last micro-batch's backward (else after it)."""
    overlap_param_gather: bool = True
    """dist_opt: the parameter all-gather runs during the next step's first forward (else before it)."""
    tp_comm_overlap: float = 0.0
    """Share of the TP / SP collectives hidden behind GEMMs (Transformer Engine userbuffers: ``tp_comm_overlap``)."""
    ep_comm_overlap: float = 0.0
    """Share of the EP dispatch and combine hidden behind compute (Megatron-Core's
    ``overlap_moe_expert_parallel_comm``, DeepEP / HybridEP overlap)."""
    gradient_accumulation_fusion: bool = False
    """dist_opt: the weight-gradient GEMM accumulates straight into the fp32 grad buffer (Megatron-Core's
    ``gradient_accumulation_fusion`` with Transformer Engine); False: a separate add per micro-batch, as the lite
    runtime does."""
    ep_dispatcher: str = "alltoall"
    """EP dispatcher: ``alltoall`` sends a token once per expert it is routed to; ``deepep`` (DeepEP / HybridEP, the
    ``flex`` dispatcher) once per rank holding one of its experts (:mod:`mlite.time.routing`)."""
    routing: str = "balanced"
    """How tokens pick experts, for the ``deepep`` row count: ``balanced`` (uniformly at random, Megatron-Core's
    ``moe_router_force_load_balancing``) or ``round_robin`` (NeMo AutoModel's ``FakeBalancedGate``)."""
    fsdp_reshard_after_forward: bool = True
    """fsdp2: each layer is gathered again for its backward (``reshard_after_forward=True``)."""
    fsdp_reduce_dtype: str = "fp32"
    """fsdp2: dtype of the gradient reduce-scatter (``MixedPrecisionPolicy.reduce_dtype``)."""
    fsdp_reduce_every_microbatch: bool = True
    """fsdp2: gradients are reduce-scattered after every micro-batch (False: only after the last,
    ``set_requires_gradient_sync(False)`` in between)."""

    def check(self) -> Knobs:
        """The knobs, or one line naming the field that is out of range."""
        for k in ("gemm_dtype", "dispatch_dtype"):
            if getattr(self, k) not in ("bf16", "fp8"):
                raise MliteError(f"{k} {getattr(self, k)!r}: give bf16 or fp8")
        from .routing import DISPATCHERS, ROUTINGS

        for k, values in (("ep_dispatcher", DISPATCHERS), ("routing", ROUTINGS)):
            if getattr(self, k) not in values:
                raise MliteError(f"{k} {getattr(self, k)!r}: give {' or '.join(values)}")
        if self.fsdp_reduce_dtype not in ("bf16", "fp32"):
            raise MliteError(f"fsdp_reduce_dtype {self.fsdp_reduce_dtype!r}: give bf16 or fp32")
        for k in ("tp_comm_overlap", "ep_comm_overlap"):
            v = getattr(self, k)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not 0 <= v <= 1:
                raise MliteError(f"{k} {v!r}: give the hidden share as a number in [0, 1]")
        return self


KNOB_NAMES = tuple(f.name for f in fields(Knobs))
"""The knob names (the keys of a published run's ``knobs``)."""


def knobs_from_dict(d: dict, where: str) -> Knobs:
    """Knobs from a JSON object (unknown keys refused in one line naming ``where``)."""
    if not isinstance(d, dict):
        raise MliteError(f"{where}: knobs must be a JSON object of {', '.join(KNOB_NAMES)}")
    unknown = sorted(set(d) - set(KNOB_NAMES))
    if unknown:
        raise MliteError(f"{where}: unknown knob {unknown[0]!r}; the knobs are {', '.join(KNOB_NAMES)}")
    try:
        return Knobs(**d).check()
    except MliteError as e:
        raise MliteError(f"{where}: {e.message}") from None


def add_knob_flags(p) -> None:
    """``--gemm-dtype``, ``--dispatch-dtype``, ``--no-overlap-grad-reduce``, ``--no-overlap-param-gather``,
    ``--tp-comm-overlap F``, ``--ep-comm-overlap F``, ``--gradient-accumulation-fusion``, ``--ep-dispatcher``,
    ``--routing``, ``--fsdp-no-reshard``, ``--fsdp-reduce-dtype``,
    ``--fsdp-reduce-once``: one flag per :class:`Knobs` field, its help the field's docstring's first clause."""
    g = p.add_argument_group("time-model knobs (what the framework does; memory is unaffected)")
    d = Knobs()
    g.add_argument("--gemm-dtype", choices=("bf16", "fp8"), default=d.gemm_dtype, help="linear layers' GEMM dtype")
    g.add_argument("--dispatch-dtype", choices=("bf16", "fp8"), default=d.dispatch_dtype, help="EP dispatch dtype")
    g.add_argument("--no-overlap-grad-reduce", action="store_true", help="dist_opt: gradient reduce-scatter exposed")
    g.add_argument("--no-overlap-param-gather", action="store_true", help="dist_opt: parameter all-gather exposed")
    g.add_argument(
        "--tp-comm-overlap", type=float, default=d.tp_comm_overlap, metavar="F", help="share of TP traffic hidden"
    )
    g.add_argument(
        "--ep-comm-overlap", type=float, default=d.ep_comm_overlap, metavar="F", help="share of EP traffic hidden"
    )
    g.add_argument(
        "--gradient-accumulation-fusion", action="store_true", help="dist_opt: wgrad accumulated inside the GEMM"
    )
    g.add_argument(
        "--ep-dispatcher",
        choices=("alltoall", "deepep"),
        default=d.ep_dispatcher,
        help="EP dispatcher (deepep: per rank)",
    )
    g.add_argument(
        "--routing",
        choices=("balanced", "round_robin"),
        default=d.routing,
        help="expert choice, for deepep's row count",
    )
    g.add_argument("--fsdp-no-reshard", action="store_true", help="fsdp2: reshard_after_forward=False")
    g.add_argument(
        "--fsdp-reduce-dtype", choices=("bf16", "fp32"), default=d.fsdp_reduce_dtype, help="fsdp2 reduce dtype"
    )
    g.add_argument(
        "--fsdp-reduce-once", action="store_true", help="fsdp2: reduce-scatter after the last micro-batch only"
    )


def knobs_from_args(args) -> Knobs:
    """The :class:`Knobs` of :func:`add_knob_flags`'s parsed flags."""
    return Knobs(
        gemm_dtype=args.gemm_dtype,
        dispatch_dtype=args.dispatch_dtype,
        overlap_grad_reduce=not args.no_overlap_grad_reduce,
        overlap_param_gather=not args.no_overlap_param_gather,
        tp_comm_overlap=args.tp_comm_overlap,
        ep_comm_overlap=args.ep_comm_overlap,
        gradient_accumulation_fusion=args.gradient_accumulation_fusion,
        ep_dispatcher=args.ep_dispatcher,
        routing=args.routing,
        fsdp_reshard_after_forward=not args.fsdp_no_reshard,
        fsdp_reduce_dtype=args.fsdp_reduce_dtype,
        fsdp_reduce_every_microbatch=not args.fsdp_reduce_once,
    ).check()
