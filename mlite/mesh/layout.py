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


SPLIT_KEYS = {
    "first": "num_layers_in_first_pipeline_stage",
    "last": "num_layers_in_last_pipeline_stage",
    "account_for_embedding": "account_for_embedding_in_pipeline_split",
    "account_for_loss": "account_for_loss_in_pipeline_split",
    "layer_list": "pipeline_parallel_num_layer_list",
}
""":class:`PipelineSplit` field -> the key a launcher sets it with (``TransformerConfig`` fields, under verl's
``actor_rollout_ref.actor.megatron.override_transformer_config.``; the layer list is verl-on-Ascend's
``actor_rollout_ref.actor.megatron.pipeline_parallel_num_layer_list``, MindSpeed's ``--num-layer-list``)."""


def _set(v) -> bool:
    """A split field that is given: a count (0 included: Megatron-Core's own error), True, a list."""
    return v is not None and v is not False


@dataclass(frozen=True, slots=True)
class PipelineSplit:
    """How Megatron-Core is told to split the layers when no ``pp_layout`` is given (``TransformerConfig``)."""

    first: int | None = None
    """``num_layers_in_first_pipeline_stage``: decoder layers on pipeline rank 0 (None: an equal share)."""
    last: int | None = None
    """``num_layers_in_last_pipeline_stage``: decoder layers on the last pipeline rank (None: an equal share)."""
    account_for_embedding: bool = False
    """``account_for_embedding_in_pipeline_split``: the embedding counts as one layer of the first stage."""
    account_for_loss: bool = False
    """``account_for_loss_in_pipeline_split``: the loss counts as one layer of the last stage."""
    layer_list: tuple[int, ...] | None = None
    """``pipeline_parallel_num_layer_list`` (MindSpeed's ``num_layer_list``): decoder layers per pipeline rank."""

    def __bool__(self) -> bool:
        return any(_set(getattr(self, f)) for f in SPLIT_KEYS)

    def describe(self) -> str:
        """The keys set, as a launcher writes them: ``num_layers_in_first_pipeline_stage=11, ...``."""
        parts = []
        for f, key in SPLIT_KEYS.items():
            v = getattr(self, f)
            if not _set(v):
                continue
            shown = "[" + ",".join(map(str, v)) + "]" if isinstance(v, tuple) else v
            parts.append(f"{key}={shown}")
        return ", ".join(parts)


def layer_list(value, key: str) -> tuple[int, ...]:
    """A layer list from a launcher value (a list) or a flag (``7,7,8`` or ``[7,7,8]``); MliteError naming ``key``."""
    items = value if isinstance(value, list | tuple) else str(value).strip().strip("[]").split(",")
    out = []
    for v in items:
        text = str(v).strip()
        if isinstance(v, bool) or not text.isdigit() or int(text) < 1:
            raise MliteError(f"{key}={value}: give positive layer counts, one per pipeline rank (e.g. 7,7,8,8)")
        out.append(int(text))
    if not out:
        raise MliteError(f"{key}={value}: give positive layer counts, one per pipeline rank (e.g. 7,7,8,8)")
    return tuple(out)


def _rank_counts(num_layers: int, pp: int, vpp: int, s: PipelineSplit) -> list[int]:
    """Decoder layers per pipeline rank under ``s``, or MliteError with Megatron-Core's reason."""
    K = SPLIT_KEYS
    if s.layer_list is not None:
        if s.first is not None or s.last is not None or s.account_for_embedding or s.account_for_loss:
            raise MliteError(f"{K['layer_list']} cannot be set with the other pipeline split keys ({s.describe()})")
        if vpp > 1:
            raise MliteError(f"{K['layer_list']} gives one count per pipeline rank: it cannot be used with VPP {vpp}")
        if len(s.layer_list) != pp or sum(s.layer_list) != num_layers or min(s.layer_list) < 1:
            raise MliteError(
                f"{s.describe()} must list {pp} positive counts (one per pipeline rank) "
                f"summing to the model's {num_layers} layers (it has {len(s.layer_list)} summing to "
                f"{sum(s.layer_list)})"
            )
        return list(s.layer_list)
    if s.first is None and s.last is None:  # even, with the embedding / loss counted as layers
        total = num_layers + s.account_for_embedding + s.account_for_loss
        if total % pp:
            raise MliteError(
                f"{num_layers} layers (+{total - num_layers} for {s.describe()}) = {total} are not divisible by PP {pp}"
            )
        return [total // pp] * pp
    if s.account_for_embedding or s.account_for_loss:
        raise MliteError(
            f"{K['first']} / {K['last']} cannot be set together with {K['account_for_embedding']} / "
            f"{K['account_for_loss']} ({s.describe()})"
        )
    ends = [(w, n) for w, n in (("first", s.first), ("last", s.last)) if n is not None]
    if len(ends) > pp:
        raise MliteError(f"{s.describe()}: {len(ends)} end stages need PP >= {len(ends)} (got PP {pp})")
    rest, middle = num_layers, pp - len(ends)
    for which, n in ends:
        if n <= 0:
            raise MliteError(f"{K[which]} must be larger than 0 (got {n})")
        if vpp > 1 and n % vpp:
            raise MliteError(f"{K[which]}={n} must be divisible by VPP {vpp}")
        rest -= n
    if rest < 0 or bool(rest) != bool(middle):
        raise MliteError(
            f"{s.describe()} leaves {rest} layers of the model's {num_layers} for {middle} middle pipeline stage(s)"
        )
    if middle and rest % middle:
        raise MliteError(
            f"{s.describe()} leaves {rest} middle layers, not divisible by the {middle} middle pipeline stages"
        )
    per = rest // middle if middle else 0
    if middle and vpp > 1 and per % vpp:
        raise MliteError(f"{s.describe()} gives each middle pipeline rank {per} layers, not divisible by VPP {vpp}")
    counts = [per] * pp
    if s.first is not None:
        counts[0] = s.first
    if s.last is not None:
        counts[-1] = s.last
    return counts


def split_layout(num_layers: int, num_mtp: int, pp: int, vpp: int, split: PipelineSplit) -> list[Stage]:
    """The PP x VPP stages (virtual order) Megatron-Core builds from ``split``; MliteError with its reason otherwise.

    Mirrors megatron-core 0.16.1: ``TransformerConfig.__post_init__`` (megatron/core/transformer/
    transformer_config.py: first/last counts > 0 and divisible by VPP, the middle layers divisible by the middle
    stages and per rank by VPP, neither together with ``account_for_*``; with ``account_for_*`` alone, the layers
    plus one each divisible by PP) and ``get_num_layers_to_build`` (megatron/core/transformer/transformer_block.py:
    each rank's count over its VPP chunks, one layer fewer in the first / last chunk that holds the embedding / loss).
    The layer list is MindSpeed's ``num_layer_list`` (one count per rank, summing to the layers; as checked by
    https://github.com/hicann/cann-recipes-train ``rl_train/deepseek`` ``translate_verl_train_configs_to_megatron``).
    MTP layers sit with the loss, as Megatron-Core places them (last pipeline rank, last virtual chunk).
    """
    counts = _rank_counts(num_layers, pp, vpp, split)
    n_stages = pp * vpp
    stages, start = [], 0
    for i in range(n_stages):
        rank, last = i % pp, i == n_stages - 1
        if counts[rank] % vpp:
            raise MliteError(
                f"{split.describe()} gives pipeline rank {rank} {counts[rank]} layers, not divisible by VPP {vpp}"
            )
        n = counts[rank] // vpp - (split.account_for_embedding and i == 0) - (split.account_for_loss and last)
        if n < 0:
            where = "first" if i == 0 else "last"
            raise MliteError(f"{split.describe()}: not enough layers in the {where} virtual pipeline stage")
        stages.append(Stage(i, i == 0, tuple(range(start, start + n)), tuple(range(num_mtp)) if last else (), last))
        start += n
    if start != num_layers:  # the account_for_* checks above make this exact; kept as the invariant
        raise MliteError(f"{split.describe()} places {start} layers but the model has {num_layers}")
    return stages
