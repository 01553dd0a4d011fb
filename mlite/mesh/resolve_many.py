"""Many meshes of one model resolved at once (the whole-mesh table): :class:`Resolver`, the same :class:`MeshPlan` as
:func:`mlite.mesh.resolve` gives, with each rule's findings memoised by the sizes that rule reads.

A rule of :data:`mlite.mesh.checks.RULES` is a pure function of its :class:`~mlite.mesh.checks.MeshContext`; with
the model, GPU count, sequence length, GPUs per node and ``auto_uneven`` fixed, it is a function of the mesh sizes it
reads. Which sizes those are is not declared anywhere: the first time a rule meets a mesh, it runs on a context whose
``parallel`` is a :class:`_Recorder` that logs each size read, in order; the result is stored under the values of
those sizes, in a table per sequence of sizes read. A later mesh with the same values for one such sequence takes the
stored result: a pure function reads its first size, then (the value being the same) the same next one, and so on,
and returns the same result. Otherwise the rule runs again (recorded) and its result is stored. The rules (with DP,
EDP and the layout the plan takes from the context) are memoised in groups, by the sizes each read on the first mesh,
so that a mesh looks up a few tables instead of one per rule; the grouping decides only the speed. So the
rules stay in one place and run unchanged; ``tests/test_resolve_many.py`` holds every plan to ``resolve``'s
(``to_dict()``, stages, DP/EDP) on valid and refused meshes of several models and GPU counts.
"""

from __future__ import annotations

from dataclasses import fields
from operator import attrgetter
from types import FunctionType
from typing import Any

from ..errors import MliteError
from .checks import RULES, MeshContext, explain_inherited
from .config import DEFAULT_GPUS_PER_NODE, DEFAULT_SEQ_LEN, ParallelConfig
from .layout import PipelineSplit
from .plan import MeshPlan, check_sizes
from .rules import pad_vocab

_FIELDS = tuple(f.name for f in fields(ParallelConfig))
"""The :class:`ParallelConfig` fields a rule may read (every other attribute is derived from them)."""


class _RecorderBase:
    __slots__ = ("_cfg", "log")

    def __init__(self, cfg: ParallelConfig):
        self._cfg = cfg
        self.log: list[tuple[str, Any]] = []


def _reader(name: str) -> property:
    def read(self):
        v = getattr(self._cfg, name)
        self.log.append((name, v))
        return v

    return property(read)


def _recorder_class() -> type:
    """ParallelConfig's properties and methods (run on the recorder, so that their reads are logged too), its
    fields as properties that log each read."""
    ns: dict[str, Any] = {"__slots__": ()}
    for name, attr in vars(ParallelConfig).items():
        if not name.startswith("__") and name not in _FIELDS and isinstance(attr, property | FunctionType):
            ns[name] = attr
    ns.update({name: _reader(name) for name in _FIELDS})
    return type("_Recorder", (_RecorderBase,), ns)


_Recorder = _recorder_class()
"""A :class:`ParallelConfig` stand-in that logs each field read (``(name, value)``, in order)."""


class _Memo:
    """One function of a context (a rule group, or what the plan takes from the context) memoised by the sizes it
    read (module docstring): per sequence of sizes read, a table from their values to the result."""

    __slots__ = ("fn", "make_ctx", "tables")

    def __init__(self, fn, make_ctx):
        self.fn, self.make_ctx = fn, make_ctx
        self.tables: list[tuple[tuple[str, ...], attrgetter, dict]] = []
        """Per sequence of sizes seen: (those sizes in the order read, their getter, {their values: result})."""

    def __call__(self, cfg: ParallelConfig):
        for _, get, table in self.tables:
            hit = table.get(get(cfg), _MISS)
            if hit is not _MISS:
                return hit
        return self._learn(cfg)

    def _learn(self, cfg: ParallelConfig):
        rec = _Recorder(cfg)
        value = self.fn(self.make_ctx(rec))
        names = tuple(dict.fromkeys(n for n, _ in rec.log))  # each size once, in the order first read
        found = next((t for t in self.tables if t[0] == names), None)
        if found is None:
            found = (names, attrgetter(*names, "__class__"), {})  # __class__: a tuple even for one size, or none
            self.tables.append(found)
        _, get, table = found
        table[get(cfg)] = value
        return value


_MISS = object()

_MERGE_READS = 3
"""Groups reading at most this many sizes take in the groups whose sizes they read too (speed only)."""


class Resolver:
    """``resolve(spec, ngpu, cfg, seq_len=.., gpus_per_node=.., auto_uneven=..)`` for many ``cfg`` (no ``pp_layout``,
    inherited sizes or split keys: the planner's candidates), each rule's findings memoised (module docstring)."""

    def __init__(
        self,
        spec,
        ngpu: int,
        *,
        seq_len: int = DEFAULT_SEQ_LEN,
        gpus_per_node: int = DEFAULT_GPUS_PER_NODE,
        auto_uneven: bool = False,
        rules=RULES,
    ):
        check_sizes(ngpu, seq_len, gpus_per_node)
        self.spec, self.ngpu, self.seq_len, self.gpn = spec, ngpu, seq_len, gpus_per_node

        def make_ctx(p) -> MeshContext:
            return MeshContext(
                spec=spec,
                ngpu=ngpu,
                parallel=p,
                seq_len=seq_len,
                gpus_per_node=gpus_per_node,
                auto_uneven=auto_uneven,
                split=PipelineSplit(),
            )

        self._make_ctx = make_ctx

        def findings_of(rule):  # run_rules for one rule: its findings, inherited sizes explained
            return lambda ctx: tuple(explain_inherited(ctx, f) for f in rule(ctx))

        items = [findings_of(r) for r in rules]  # then what the plan takes from the context, each apart
        items += [lambda ctx: ctx.dp, lambda ctx: ctx.edp, lambda ctx: ctx.layout[:2]]
        self._n_rules = len(rules)
        self._items = items
        self._groups: list[_Memo] | None = None
        self._vocab: dict[int, int] = {}

    def _group(self, cfg: ParallelConfig) -> list[_Memo]:
        """The items (rules, DP, EDP, layout) grouped by the sizes each reads on ``cfg``, one memo per group: fewer
        tree walks per mesh. Only speed depends on the grouping: a group is one function, memoised like a rule."""
        by_reads: dict[frozenset, list[int]] = {}
        for i, item in enumerate(self._items):
            rec = _Recorder(cfg)
            item(self._make_ctx(rec))
            by_reads.setdefault(frozenset(n for n, _ in rec.log), []).append(i)
        for reads in sorted(by_reads, key=len):  # a group whose sizes another reads too joins the smallest such
            wider = [r for r in by_reads if reads < r and len(r) <= _MERGE_READS]
            if wider:
                by_reads[min(wider, key=len)] += by_reads.pop(reads)

        def group_fn(idx):
            n = self._n_rules
            return lambda ctx: tuple((i, r) for i in idx if (r := self._items[i](ctx)) or i >= n)

        return [_Memo(group_fn(tuple(idx)), self._make_ctx) for idx in by_reads.values()]

    def __call__(self, cfg: ParallelConfig) -> MeshPlan:
        if cfg.pp_layout:
            raise MliteError("Resolver: a pp_layout mesh goes through resolve()")
        groups = self._groups
        if groups is None:
            groups = self._groups = self._group(cfg)
        got: list = []
        for memo in groups:
            got += memo(cfg)
        got.sort(key=_first)
        n = self._n_rules
        findings = [f for i, fs in got[:-3] for f in fs]
        (_, dp), (_, edp), (_, (stages, source)) = got[-3:]
        assert got[-3][0] == n, "DP, EDP and the layout are the last three items"
        padded = self._vocab.get(cfg.tp)
        if padded is None:
            padded = self._vocab[cfg.tp] = pad_vocab(self.spec.vocab_size, cfg.tp)
        return MeshPlan(
            parallel=cfg,
            ngpu=self.ngpu,
            dp=dp,
            edp=edp,
            gpus_per_node=self.gpn,
            seq_len=self.seq_len,
            padded_vocab=padded,
            stages=list(stages),
            layout_source=source,
            findings=findings,
        )


def _first(item: tuple):
    return item[0]
