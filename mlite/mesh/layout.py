"""Pipeline stage layouts: even splits, mlite/Megatron ``pp_layout`` strings, and automatic uneven layouts.

Layout language (mlite's ``pp_layout``, a subset of Megatron's ``--pipeline-model-parallel-layout``): stages are
separated by ``|``; inside a stage, items are separated by ``,`` (or written back to back); an item is ``E``
(embedding), ``t`` (a transformer layer), ``m`` (an MTP layer) or ``L`` (final norm, output layer and loss),
optionally repeated as ``t*5``; a parenthesised group repeats stages: ``(t*4|)*3``. With VPP, the layout lists
PP x VPP stages in virtual order: stage ``i`` runs on pipeline rank ``i % pp`` as model chunk ``i // pp``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from ..errors import MliteError

_GROUP = re.compile(r"\(([^()]*)\)\*(\d+)")
_TOKEN = re.compile(r"([EtmL])(?:\*(\d+))?")
_TOKEN_RUN = re.compile(r"(?:[EtmL](?:\*\d+)?)+")


@dataclass(frozen=True, slots=True)
class Stage:
    """One (virtual) pipeline stage."""

    index: int
    """Position in the layout (virtual order)."""
    embedding: bool
    """Holds the input embedding."""
    layers: tuple[int, ...]
    """Main decoder layer indices it runs."""
    mtp: tuple[int, ...]
    """MTP layer indices (0-based within the MTP layers) it runs."""
    head: bool
    """Holds the final norm, output layer and loss."""

    def to_text(self) -> str:
        parts = (["E"] if self.embedding else []) + ([f"t*{len(self.layers)}"] if self.layers else [])
        parts += [f"m*{len(self.mtp)}" if len(self.mtp) > 1 else "m"] if self.mtp else []
        parts += ["L"] if self.head else []
        return ",".join(parts)


def layout_text(stages: list[Stage]) -> str:
    """The layout string of a stage list (round-trips through :func:`parse_layout`)."""
    return "|".join(s.to_text() for s in stages)


def _expand_groups(text: str) -> str:
    while True:
        new = _GROUP.sub(lambda m: m.group(1) * int(m.group(2)), text)
        if new == text:
            return new
        text = new


def parse_layout(text: str, num_layers: int, num_mtp: int) -> list[Stage]:
    """Parse a layout string; raises :class:`MliteError` naming the bad token or count."""
    src = _expand_groups(text.replace(" ", ""))
    raw_stages = src.split("|")
    if raw_stages and raw_stages[-1] == "" and src.endswith("|") and len(raw_stages) > 1:
        raw_stages = raw_stages[:-1]
    stages, layer, mtp = [], 0, 0
    for i, raw in enumerate(raw_stages):
        tokens = [t for t in re.split(r",", raw) if t]
        items: list[str] = []
        for tok in tokens:
            if not _TOKEN_RUN.fullmatch(tok):
                raise MliteError(
                    f"pp_layout: cannot read '{tok}' in stage {i} ('{raw}'); "
                    "use E, t, m, L with optional *N, separated by ',' and stages by '|'"
                )
            for kind, count in _TOKEN.findall(tok):
                items.extend(kind * int(count or 1))
        emb = "E" in items
        head = "L" in items
        n_t, n_m = items.count("t"), items.count("m")
        stages.append(Stage(i, emb, tuple(range(layer, layer + n_t)), tuple(range(mtp, mtp + n_m)), head))
        layer += n_t
        mtp += n_m
    if layer != num_layers:
        raise MliteError(f"pp_layout '{text}' places {layer} transformer layers but the model has {num_layers}")
    if mtp != num_mtp:
        raise MliteError(f"pp_layout '{text}' places {mtp} MTP layers but the model has {num_mtp}")
    if sum(s.embedding for s in stages) != 1 or not stages[0].embedding:
        raise MliteError(f"pp_layout '{text}': the embedding E must appear once, in the first stage")
    if sum(s.head for s in stages) != 1 or not stages[-1].head:
        raise MliteError(f"pp_layout '{text}': the loss L must appear once, in the last stage")
    return stages


@lru_cache(maxsize=4096)
def _even(num_layers: int, num_mtp: int, num_stages: int):
    return even_layout_uncached(num_layers, num_mtp, num_stages)


def even_layout(num_layers: int, num_mtp: int, num_stages: int) -> list[Stage] | None:
    """Equal layers per stage (cached); see :func:`even_layout_uncached`."""
    r = _even(num_layers, num_mtp, num_stages)
    return list(r) if r is not None else None


def even_layout_uncached(num_layers: int, num_mtp: int, num_stages: int) -> tuple[Stage, ...] | None:
    """Equal layers per stage (MTP with the head in the last stage); None if they do not divide evenly."""
    if num_layers % num_stages:
        return None
    per = num_layers // num_stages
    return tuple(
        Stage(
            i,
            i == 0,
            tuple(range(i * per, (i + 1) * per)),
            tuple(range(num_mtp)) if i == num_stages - 1 else (),
            i == num_stages - 1,
        )
        for i in range(num_stages)
    )


def auto_layout(num_layers: int, num_mtp: int, num_stages: int) -> list[Stage] | None:
    """Cached :func:`auto_layout_uncached`."""
    r = _auto(num_layers, num_mtp, num_stages)
    return list(r) if r is not None else None


@lru_cache(maxsize=4096)
def _auto(num_layers: int, num_mtp: int, num_stages: int):
    r = auto_layout_uncached(num_layers, num_mtp, num_stages)
    return tuple(r) if r is not None else None


def auto_layout_uncached(num_layers: int, num_mtp: int, num_stages: int) -> list[Stage] | None:
    """A balanced uneven layout: the first and last stages (embedding; MTP + head) take the fewer layers.

    Each MTP layer and the head count as one layer's worth of work, the embedding as none. None when there are
    fewer layers than stages.
    """
    if num_layers < num_stages:
        return None
    if num_stages == 1:
        return [Stage(0, True, tuple(range(num_layers)), tuple(range(num_mtp)), True)]
    work = [0] * num_stages
    work[-1] = num_mtp + 1  # MTP layers and the output layer/loss
    counts = [0] * num_stages
    for _ in range(num_layers):  # greedy: give the next layer to the least loaded stage, ties to the middle
        j = min(range(num_stages), key=lambda k: (work[k] + counts[k], k == 0, k == num_stages - 1, k))
        counts[j] += 1
    stages, start = [], 0
    for i, n in enumerate(counts):
        last = i == num_stages - 1
        if n == 0 and not last:  # the last stage may hold only MTP layers and the head
            return None
        stages.append(Stage(i, i == 0, tuple(range(start, start + n)), tuple(range(num_mtp)) if last else (), last))
        start += n
    return stages


def _span(values: tuple[int, ...]) -> str:
    if not values:
        return ""
    return f"{values[0]}" if len(values) == 1 else f"{values[0]}–{values[-1]}"


def stage_text(plan, pp_rank: int) -> str:
    """What pipeline rank ``pp_rank`` runs: ``E, layers 0–23`` (one part per virtual chunk)."""
    parts = []
    for s in plan.stage_of_rank(pp_rank):
        bits = (["E"] if s.embedding else []) + ([f"layers {_span(s.layers)}"] if s.layers else [])
        bits += [f"MTP {_span(s.mtp)}"] if s.mtp else []
        bits += ["L"] if s.head else []
        parts.append(", ".join(bits) or "empty")
    return " | ".join(parts) if parts else "—"
