"""Rank layout in mlite's order (identical to Megatron-Core's ``RankGenerator`` with order "tp-cp-ep-dp-pp").

Dense:  rank = ((pp*DP + dp)*CP + cp)*TP + tp        (TP fastest, then CP, DP, PP outermost)
Expert: rank = ((pp*EDP + edp)*EP + ep)*ETP + etp    (ETP fastest, then EP, EDP, PP outermost)

A group of rank r along some dimensions is every rank whose coordinates on the *other* dimensions equal r's.
"""

from __future__ import annotations

import math
from itertools import product

from .axes import AXES, DENSE_DIMS, EXPERT_DIMS

__all__ = ["DENSE_DIMS", "EXPERT_DIMS", "GROUP_KINDS", "PRINTED_KINDS", "RankLayout"]

GROUP_KINDS: dict[str, tuple[str, tuple[str, ...]]] = {
    **{d: ("dense", (d,)) for d in DENSE_DIMS},
    "dp_cp": ("dense", ("dp", "cp")),
    "tp_cp": ("dense", ("tp", "cp")),
    "mp": ("dense", ("tp", "pp")),
    **{d: ("expert", (d,)) for d in EXPERT_DIMS if d not in DENSE_DIMS},
    "ep_etp": ("expert", ("etp", "ep")),
}
"""Group kinds: which layout and which dimensions vary inside a group (one per world factor of
:data:`~mlite.mesh.axes.DENSE_DIMS` / :data:`~mlite.mesh.axes.EXPERT_DIMS`, and the composite groups)."""
PRINTED_KINDS: tuple[str, ...] = (
    *DENSE_DIMS,
    "dp_cp",
    *(a.name for a in AXES if a.expert and not a.dense),
    "edp",
)
"""The groups ``mlite mesh --rank`` prints: ``tp, cp, dp, pp, dp_cp, ep, etp, edp``."""


class RankLayout:
    """Coordinates and groups for one resolved mesh."""

    def __init__(self, **sizes: int):
        """``sizes``: every dimension of :data:`DENSE_DIMS` and :data:`EXPERT_DIMS` (``tp, cp, dp, pp, ep, etp, edp``)."""
        need = set(DENSE_DIMS) | set(EXPERT_DIMS)
        if set(sizes) != need:
            raise TypeError(f"RankLayout needs the sizes {sorted(need)}, got {sorted(sizes)}")
        self.sizes = {
            "dense": {d: sizes[d] for d in DENSE_DIMS},
            "expert": {d: sizes[d] for d in EXPERT_DIMS},
        }
        self.world = math.prod(self.sizes["dense"].values())
        if math.prod(self.sizes["expert"].values()) != self.world:
            raise ValueError("dense and expert layouts must cover the same world")

    @classmethod
    def of(cls, parallel, *, dp: int, edp: int) -> RankLayout:
        """The layout of a ParallelConfig's world factors with the derived DP and EDP."""
        return cls(**{a.name: parallel.size(a.name) for a in AXES if a.world}, dp=dp, edp=edp)

    def _dims(self, layout: str) -> tuple[str, ...]:
        return DENSE_DIMS if layout == "dense" else EXPERT_DIMS

    def coords(self, rank: int, layout: str = "dense") -> dict[str, int]:
        """Coordinates of ``rank`` (``{"tp":.., "cp":.., "dp":.., "pp":..}`` or the expert ones)."""
        if not 0 <= rank < self.world:
            raise ValueError(f"rank {rank} outside 0..{self.world - 1}")
        out, r = {}, rank
        for d in self._dims(layout):
            n = self.sizes[layout][d]
            out[d] = r % n
            r //= n
        return out

    def rank_of(self, coords: dict[str, int], layout: str = "dense") -> int:
        """Inverse of :meth:`coords`."""
        r, stride = 0, 1
        for d in self._dims(layout):
            r += coords[d] * stride
            stride *= self.sizes[layout][d]
        return r

    def group(self, kind: str, rank: int) -> list[int]:
        """The ranks of ``rank``'s group of ``kind`` (one of :data:`GROUP_KINDS`), ascending."""
        layout, varying = GROUP_KINDS[kind]
        base = self.coords(rank, layout)
        dims = [d for d in self._dims(layout) if d in varying]
        ranks = []
        for values in product(*(range(self.sizes[layout][d]) for d in reversed(dims))):
            c = dict(base)
            c.update(zip(reversed(dims), values))
            ranks.append(self.rank_of(c, layout))
        return sorted(ranks)

    def groups(self, kind: str) -> list[list[int]]:
        """Every group of ``kind``, ordered by their smallest rank."""
        seen, out = set(), []
        for r in range(self.world):
            if r in seen:
                continue
            g = self.group(kind, r)
            seen.update(g)
            out.append(g)
        return out

    def all_groups_of(self, rank: int, kinds=PRINTED_KINDS) -> dict:
        """``rank``'s group of every kind, as ``mlite mesh --rank`` prints them."""
        return {k: self.group(k, rank) for k in kinds}
