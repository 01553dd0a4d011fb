"""Rank layout in mlite's order (identical to Megatron-Core's ``RankGenerator`` with order "tp-cp-ep-dp-pp").

Dense:  rank = ((pp*DP + dp)*CP + cp)*TP + tp        (TP fastest, then CP, DP, PP outermost)
Expert: rank = ((pp*EDP + edp)*EP + ep)*ETP + etp    (ETP fastest, then EP, EDP, PP outermost)

A group of rank r along some dimensions is every rank whose coordinates on the *other* dimensions equal r's.
"""

from __future__ import annotations

from itertools import product

DENSE_DIMS = ("tp", "cp", "dp", "pp")
"""Dense dimensions, fastest-varying first."""
EXPERT_DIMS = ("etp", "ep", "edp", "pp")
"""Expert dimensions, fastest-varying first."""

GROUP_KINDS = {
    "tp": ("dense", ("tp",)),
    "cp": ("dense", ("cp",)),
    "dp": ("dense", ("dp",)),
    "pp": ("dense", ("pp",)),
    "dp_cp": ("dense", ("dp", "cp")),
    "tp_cp": ("dense", ("tp", "cp")),
    "mp": ("dense", ("tp", "pp")),
    "ep": ("expert", ("ep",)),
    "etp": ("expert", ("etp",)),
    "edp": ("expert", ("edp",)),
    "ep_etp": ("expert", ("etp", "ep")),
}
"""Group kinds: which layout and which dimensions vary inside a group."""


class RankLayout:
    """Coordinates and groups for one resolved mesh."""

    def __init__(self, *, tp: int, cp: int, dp: int, pp: int, ep: int, etp: int, edp: int):
        self.sizes = {"dense": dict(tp=tp, cp=cp, dp=dp, pp=pp), "expert": dict(etp=etp, ep=ep, edp=edp, pp=pp)}
        self.world = tp * cp * dp * pp
        if etp * ep * edp * pp != self.world:
            raise ValueError("dense and expert layouts must cover the same world")

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

    def all_groups_of(self, rank: int, kinds=("tp", "cp", "dp", "pp", "dp_cp", "ep", "etp", "edp")) -> dict:
        """``rank``'s group of every kind, as ``mlite mesh --rank`` prints them."""
        return {k: self.group(k, rank) for k in kinds}
