"""``ParallelConfig``: the mesh as mlite names it (tp, pp, vpp, cp, ep, etp, pp_layout).

Dense layers: world = TP x CP x DP x PP. Expert layers: world = ETP x EP x EDP x PP. DP and EDP are what is left
once the model-parallel sizes are fixed; :func:`mlite.mesh.resolve` derives them for a GPU count.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from ..errors import MliteError
from .axes import AXES, DENSE_DIMS, EXPERT_DIMS, model_parallel

DEFAULT_SEQ_LEN = 4096
"""Sequence length when none is given (the planner, ``TrainingOptions``, ``--seq-len``)."""
DEFAULT_GPUS_PER_NODE = 8
"""GPUs per node when none is given (the planner, ``TrainingOptions``, ``ExportPlan``, ``--gpus-per-node``)."""


@dataclass(kw_only=True, slots=True)
class ParallelConfig:
    """Model-parallel sizes, as in ``megatron.lite`` ``ParallelConfig``."""

    tp: int = 1
    """Tensor parallel size (dense layers; attention heads and FFN columns split)."""
    pp: int = 1
    """Pipeline parallel size (layers split into stages)."""
    vpp: int = 1
    """Virtual pipeline stages per pipeline rank (interleaved 1F1B); > 1 needs pp > 1."""
    cp: int = 1
    """Context parallel size (the sequence split; dense optimizer state is sharded over DP x CP)."""
    ep: int = 1
    """Expert parallel size (routed experts split)."""
    etp: int | None = None
    """Expert tensor parallel size; None means 1 (mlite's default)."""
    pp_layout: str | None = None
    """Uneven pipeline stages, e.g. ``"E|t*5|t*6|t,m,L"`` (E embedding, t layer, m MTP, L loss/head)."""

    def __post_init__(self):
        for axis in AXES:
            v = getattr(self, axis.name)
            if v is None and axis.default is None:
                continue
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                tail = " or None" if axis.default is None else ""
                raise MliteError(f"{axis.name} must be a positive integer{tail}, got {v!r}")
        if self.pp_layout is not None and not str(self.pp_layout).strip():
            self.pp_layout = None

    @property
    def etp_size(self) -> int:
        """ETP with None resolved to 1."""
        return self.size("etp")

    def size(self, name: str) -> int:
        """The size of axis ``name`` with None (an axis whose default is None: ETP) resolved to 1."""
        return getattr(self, name) or 1

    def sizes(self) -> dict[str, int]:
        """``{"tp": .., "pp": .., "vpp": .., "cp": .., "ep": .., "etp": ..}`` in :data:`~mlite.mesh.axes.AXES` order,
        None resolved to 1."""
        return {a.name: self.size(a.name) for a in AXES}

    @property
    def dense_model_parallel(self) -> int:
        """TP x CP x PP: ranks one dense data-parallel replica spans."""
        return math.prod(self.size(d) for d in model_parallel(DENSE_DIMS))

    @property
    def expert_model_parallel(self) -> int:
        """ETP x EP x PP: ranks one expert data-parallel replica spans."""
        return math.prod(self.size(d) for d in model_parallel(EXPERT_DIMS))

    def to_dict(self) -> dict:
        return asdict(self)
