"""``resolve``: a ParallelConfig + model + GPU count -> a MeshPlan (DP, EDP, stages, the rules' findings, rank
groups). The rules are :data:`mlite.mesh.checks.RULES`."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import MliteError
from .checks import RULES, MeshContext, run_rules
from .config import DEFAULT_GPUS_PER_NODE, DEFAULT_SEQ_LEN, ParallelConfig
from .layout import PipelineSplit, Stage, layout_text
from .ranks import RankLayout
from .rules import Finding, pad_vocab


@dataclass(kw_only=True)
class MeshPlan:
    """A mesh resolved for one model and GPU count, with every rule's verdict."""

    parallel: ParallelConfig
    """The model-parallel sizes asked for."""
    ngpu: int
    """World size."""
    dp: int
    """Dense data-parallel size (0 when the world is not divisible)."""
    edp: int
    """Expert data-parallel size (0 when the world is not divisible)."""
    gpus_per_node: int = DEFAULT_GPUS_PER_NODE
    """GPUs per node (for the node-spanning warnings and the GPU picture)."""
    seq_len: int = DEFAULT_SEQ_LEN
    """Sequence length (for the context-parallel rule)."""
    padded_vocab: int = 0
    """Vocabulary after Megatron's padding to a multiple of 128 x TP."""
    stages: list[Stage] = field(default_factory=list)
    """PP x VPP stages in virtual order (empty when the layers cannot be split)."""
    layout_source: str = "even"
    """``even``, ``pp_layout`` (given), ``split`` (Megatron-Core's first/last-stage counts, ``account_for_*`` or a
    layer list) or ``auto`` (an uneven layout the planner made)."""
    findings: list[Finding] = field(default_factory=list)
    """Every rule's verdict (errors, warnings, info)."""

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.level == "error"]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.level == "warning"]

    @property
    def infos(self) -> list[Finding]:
        return [f for f in self.findings if f.level == "info"]

    @property
    def valid(self) -> bool:
        return not self.errors

    @property
    def layout(self) -> str:
        """The pp_layout string of the stages (also for even splits)."""
        return layout_text(self.stages) if self.stages else ""

    def stage_of_rank(self, pp_rank: int) -> list[Stage]:
        """The (virtual) stages a pipeline rank runs."""
        return [s for s in self.stages if s.index % self.parallel.pp == pp_rank]

    def ranks(self) -> RankLayout:
        """The rank layout; only for a valid world split."""
        if not self.dp or not self.edp:
            raise MliteError("no rank layout: the GPU count is not divisible by the model-parallel sizes")
        return RankLayout.of(self.parallel, dp=self.dp, edp=self.edp)

    def groups(self, rank: int) -> dict[str, list[int]]:
        """``rank``'s tp, cp, dp, pp, dp_cp, ep, etp, edp groups."""
        if not 0 <= rank < self.ngpu:
            raise MliteError(f"--rank {rank} is outside 0..{self.ngpu - 1}")
        return self.ranks().all_groups_of(rank)

    def to_dict(self) -> dict:
        """The ``mlite mesh --json`` document."""
        p = self.parallel
        return {
            "valid": self.valid,
            "errors": [f.message for f in self.errors],
            "warnings": [f.message for f in self.warnings],
            **p.sizes(),
            "dp": self.dp,
            "edp": self.edp,
            "ngpu": self.ngpu,
            "info": [f.message for f in self.infos],
            "padded_vocab": self.padded_vocab,
            "pp_layout": self.layout,
            "layout_source": self.layout_source,
            "rules": [
                {
                    "rule": f.rule,
                    "level": f.level,
                    "field": f.field,
                    "nearest": list(f.nearest),
                    "fixes": [dict(x) for x in f.fixes],
                    "message": f.message,
                }
                for f in self.findings
            ],
        }


def check_sizes(ngpu, seq_len: int, gpus_per_node: int) -> None:
    """The GPU count, sequence length and GPUs per node are positive integers (one message naming the flag)."""
    if isinstance(ngpu, bool) or not isinstance(ngpu, int) or ngpu < 1:
        raise MliteError(f"--ngpu must be a positive integer, got {ngpu!r}")
    for flag, v in (("--seq-len", seq_len), ("--gpus-per-node", gpus_per_node)):
        if v < 1:
            raise MliteError(f"{flag} must be a positive integer, got {v}")


def resolve(
    spec,
    ngpu: int,
    parallel: ParallelConfig | None = None,
    *,
    seq_len: int = DEFAULT_SEQ_LEN,
    gpus_per_node: int = DEFAULT_GPUS_PER_NODE,
    auto_uneven: bool = False,
    inherited: dict | None = None,
    train_mtp: bool | None = None,
    kv_replication: bool = False,
    split: PipelineSplit | None = None,
    rules=RULES,
) -> MeshPlan:
    """Resolve and validate ``parallel`` for ``spec`` on ``ngpu`` GPUs. Never raises for an invalid mesh:
    the plan carries the findings of every rule of :data:`mlite.mesh.checks.RULES`. ``auto_uneven`` lets the planner
    choose an uneven layout when layers do not split evenly (reported as a warning) instead of failing the layers
    rule; ``inherited`` (field -> :class:`~mlite.mesh.checks.Inherited`) names sizes that were not given, so the
    findings say why they have their value; ``train_mtp=False`` places no MTP layers in the pipeline;
    ``kv_replication`` accepts KV heads that divide TP (Megatron-Core replicates them; the mlite runtime does not);
    ``split`` is Megatron-Core's first/last-stage counts, ``account_for_*`` or a layer list
    (:func:`mlite.mesh.layout.split_layout`), checked with Megatron-Core's rules."""
    p = parallel or ParallelConfig()
    check_sizes(ngpu, seq_len, gpus_per_node)
    ctx = MeshContext(
        spec=spec,
        ngpu=ngpu,
        parallel=p,
        seq_len=seq_len,
        gpus_per_node=gpus_per_node,
        auto_uneven=auto_uneven,
        inherited=dict(inherited or {}),
        train_mtp=train_mtp,
        kv_replication=kv_replication,
        split=split or PipelineSplit(),
    )
    findings = run_rules(ctx, rules)
    stages, source, _ = ctx.layout
    return MeshPlan(
        parallel=p,
        ngpu=ngpu,
        dp=ctx.dp,
        edp=ctx.edp,
        gpus_per_node=gpus_per_node,
        seq_len=seq_len,
        padded_vocab=pad_vocab(spec.vocab_size, p.tp),
        stages=list(stages),
        layout_source=source,
        findings=findings,
    )
