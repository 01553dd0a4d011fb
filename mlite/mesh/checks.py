"""The mesh rules: small functions ``rule(ctx) -> list[Finding]``, each testable alone, run in :data:`RULES` order.

Errors are the checks Megatron-Core makes at start-up (``parallel_state.initialize_model_parallel``: world size
divisible by TP*PP*CP and by ETP*EP*PP, VPP needs PP > 1; ``TransformerConfig``: heads divisible by TP, EP > 1 only
with experts; the layer split of ``TransformerConfig.__post_init__`` and ``get_num_layers_to_build``:
:func:`~mlite.mesh.layout.split_layout`) plus what mlite's runtime needs (KV heads divisible by TP, FFN widths, layers
over PP*VPP stages, 2*CP dividing the sequence) and each model's own rules, read as data by :func:`rule_model`
from :mod:`mlite.models.mesh_rules` (DeepSeek-V4 with TP = ETP = 1; DeepSeek-V4.1's registry limits). Warnings and info: groups spanning
nodes, verl's launcher DP rule, sequence parallelism for MoE with TP > 1, Gated DeltaNet with CP, vocabulary padding,
and each size that was not given but inherited (ETP = TP when a Megatron launcher leaves it unset).

A rule reads a :class:`MeshContext` (the mesh, the model, the GPU count) and returns findings whose
:attr:`~mlite.mesh.Finding.fixes` are dicts of fields -> values; callers (the CLI, the planner widget) only render them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import TYPE_CHECKING

from ..errors import MliteError
from ..models import ModelMeshRule, rules_for
from .axes import DENSE_DIMS, EXPERT_DIMS, model_parallel, product_label
from .config import DEFAULT_GPUS_PER_NODE, DEFAULT_SEQ_LEN, ParallelConfig
from .layout import PipelineSplit, Stage, auto_layout, even_layout, layout_text, parse_layout, split_layout
from .rules import LAUNCHER_RULE, Finding, finding, launcher_rule_dp, launcher_rule_outcome, nearest, pad_vocab

if TYPE_CHECKING:
    from ..models import ModelSpec


@dataclass(frozen=True, slots=True)
class Inherited:
    """A mesh size that was not given and took a default from somewhere else (Megatron-Core's ETP = TP)."""

    why: str
    """One phrase: ``ETP inherited from TP = 4 because the launcher does not set expert_tensor_parallel_size``."""
    key: str | None = None
    """The key (override, flag) that would set it, named in the fix."""


@dataclass
class MeshContext:
    """What every rule reads: the model, the GPU count and the mesh, with DP / EDP and the stages derived once."""

    spec: ModelSpec
    """The :class:`mlite.models.ModelSpec`."""
    ngpu: int
    """World size."""
    parallel: ParallelConfig
    """The mesh asked for."""
    seq_len: int = DEFAULT_SEQ_LEN
    """Sequence length (context-parallel rule)."""
    gpus_per_node: int = DEFAULT_GPUS_PER_NODE
    """GPUs per node (node-spanning warnings)."""
    auto_uneven: bool = False
    """Let the layers rule choose an uneven layout (a warning) instead of failing."""
    inherited: dict = field(default_factory=dict)
    """Field -> :class:`Inherited`, for sizes that were not given."""
    train_mtp: bool | None = None
    """Whether MTP layers are trained (placed in the pipeline); None: when the model has them."""
    split: PipelineSplit = field(default_factory=PipelineSplit)
    """Megatron-Core's first/last-stage counts, ``account_for_*`` or a layer list (:func:`~.layout.split_layout`)."""
    kv_replication: bool = False
    """KV heads may divide TP instead (Megatron-Core's TransformerConfig: query groups 'a multiple or divisor' of TP,
    each rank then holds one KV head); the mlite runtime splits KV heads, so False for its plans."""

    @property
    def p(self) -> ParallelConfig:
        return self.parallel

    @property
    def etp(self) -> int:
        return self.parallel.etp_size

    @cached_property
    def dense_mp(self) -> int:
        return self.p.dense_model_parallel

    @cached_property
    def expert_mp(self) -> int:
        return self.p.expert_model_parallel

    @cached_property
    def dp(self) -> int:
        """Dense DP, 0 when the world does not divide."""
        return self.ngpu // self.dense_mp if self.ngpu % self.dense_mp == 0 else 0

    @cached_property
    def edp(self) -> int:
        """Expert DP, 0 when the world does not divide."""
        return self.ngpu // self.expert_mp if self.ngpu % self.expert_mp == 0 else 0

    @property
    def n_mtp(self) -> int:
        """MTP layers placed in the pipeline (0 when they are not trained)."""
        return 0 if self.train_mtp is False else self.spec.num_mtp_layers

    @cached_property
    def layout(self) -> tuple[list[Stage], str, list[Finding]]:
        """``(stages, source, findings)`` of the layers rule (computed once; :func:`rule_layers` returns them)."""
        return _layout(self)


def _factors(p: ParallelConfig, dims: tuple[str, ...]) -> str:
    """``TP*CP*PP = 2*1*4``: the model-parallel factors of ``dims`` with their sizes."""
    mp = model_parallel(dims)
    return f"{product_label(mp)} = {'*'.join(str(p.size(d)) for d in mp)}"


def _experts_ok(spec, ep: int) -> bool:
    return (spec.num_experts % ep == 0) if spec.num_experts else ep == 1


# ---------------------------------------------------------------------------------------------- errors
def rule_world_dense(ctx: MeshContext) -> list[Finding]:
    """GPU count divisible by TP*CP*PP (``initialize_model_parallel``: world_size % model_size)."""
    if ctx.dp:
        return []
    p, n, dmp, emp = ctx.p, ctx.ngpu, ctx.dense_mp, ctx.expert_mp
    return [
        finding(
            "world",
            "error",
            f"ngpu {n} is not divisible by {_factors(p, DENSE_DIMS)} = {dmp}",
            "ngpu",
            nearest(n, lambda k: k % dmp == 0 and k % emp == 0),
        )
    ]


def rule_world_expert(ctx: MeshContext) -> list[Finding]:
    """GPU count divisible by ETP*EP*PP (``initialize_model_parallel``'s expert rank generator)."""
    if ctx.edp:
        return []
    p, n, etp = ctx.p, ctx.ngpu, ctx.etp
    near = nearest(p.ep, lambda e: n % (etp * e * p.pp) == 0 and _experts_ok(ctx.spec, e))
    fixes = [{"ep": e} for e in near]
    if "etp" in ctx.inherited or not ctx.spec.num_experts:
        near_etp = nearest(
            etp,
            lambda t: (
                n % (t * p.ep * p.pp) == 0 and ctx.spec.moe_ffn_hidden_size % t == 0
                if ctx.spec.num_experts
                else n % (t * p.ep * p.pp) == 0
            ),
        )
        if n % (p.ep * p.pp) == 0:
            near_etp = tuple(dict.fromkeys((*near_etp, 1)))  # ETP 1: what most launchers that set it choose
        fixes = [{"etp": t} for t in near_etp] + fixes  # the size nobody chose goes first
    return [
        finding(
            "world",
            "error",
            f"ngpu {n} is not divisible by {_factors(p, EXPERT_DIMS)} = {ctx.expert_mp}",
            "ep",
            near,
            fixes=fixes,
        )
    ]


def rule_heads(ctx: MeshContext) -> list[Finding]:
    """Attention heads, then KV heads (query groups), divisible by TP."""
    heads, kv, tp = ctx.spec.num_attention_heads, ctx.spec.num_key_value_heads, ctx.p.tp
    if heads % tp:
        what = f"num_attention_heads {heads}"
    elif kv % tp and not (ctx.kv_replication and tp % kv == 0):
        what = f"num_key_value_heads (query groups) {kv}"
    elif kv % tp:
        return [
            finding(
                "heads",
                "info",
                f"num_key_value_heads (query groups) {kv} < TP {tp}: Megatron-Core replicates each KV head over "
                f"{tp // kv} TP ranks",
                "tp",
            )
        ]
    else:
        return []
    return [
        finding(
            "heads",
            "error",
            f"{what} is not divisible by TP {tp}",
            "tp",
            nearest(tp, lambda t: heads % t == 0 and kv % t == 0),
        )
    ]


def rule_gdn_heads(ctx: MeshContext) -> list[Finding]:
    """Gated DeltaNet key and value heads divisible by TP."""
    s, tp = ctx.spec, ctx.p.tp
    nk, nv = s.linear_num_key_heads, s.linear_num_value_heads
    if not nv or (nk % tp == 0 and nv % tp == 0):
        return []
    return [
        finding(
            "gdn_heads",
            "error",
            f"Gated DeltaNet key heads {nk} and value heads {nv} must be divisible by TP {tp}",
            "tp",
            nearest(tp, lambda t: nk % t == 0 and nv % t == 0 and s.num_attention_heads % t == 0),
        )
    ]


def rule_experts(ctx: MeshContext) -> list[Finding]:
    """Routed experts divisible by EP; EP > 1 only for a MoE model (``TransformerConfig``: num_moe_experts must be set
    to use expert parallelism). ETP on a dense model builds groups nothing uses: not an error."""
    s, ep = ctx.spec, ctx.p.ep
    if s.num_experts:
        if s.num_experts % ep:
            return [
                finding(
                    "experts",
                    "error",
                    f"routed experts {s.num_experts} are not divisible by EP {ep}",
                    "ep",
                    nearest(ep, lambda e: s.num_experts % e == 0),
                )
            ]
        return []
    if ep > 1:
        return [
            finding(
                "experts",
                "error",
                f"{s.name} has no routed experts: EP must be 1 (got EP {ep}, ETP {ctx.etp})",
                "ep",
                (1,),
                fixes=[{"ep": 1, "etp": 1}],
            )
        ]
    return []


def rule_ffn(ctx: MeshContext) -> list[Finding]:
    """Expert FFN divisible by ETP (MoE only); dense and shared-expert FFN divisible by TP."""
    s, tp, etp = ctx.spec, ctx.p.tp, ctx.etp
    out = []
    if s.num_experts and s.moe_ffn_hidden_size % etp:
        out.append(
            finding(
                "ffn",
                "error",
                f"expert FFN width {s.moe_ffn_hidden_size} is not divisible by ETP {etp}",
                "etp",
                nearest(etp, lambda e: s.moe_ffn_hidden_size % e == 0),
            )
        )
    for what, width in (
        ("dense FFN width", s.ffn_hidden_size),
        ("shared-expert FFN width", s.shared_expert_ffn_hidden_size),
    ):
        if width and width % tp:
            out.append(
                finding(
                    "ffn",
                    "error",
                    f"{what} {width} is not divisible by TP {tp}",
                    "tp",
                    nearest(tp, lambda t, w=width: w % t == 0 and s.num_attention_heads % t == 0),
                )
            )
    return out


_LABEL = {"tp": "TP", "pp": "PP", "vpp": "VPP", "cp": "CP", "ep": "EP", "etp": "ETP"}


def _model_finding(rule: ModelMeshRule, got: str, fld: str, near: tuple, fixes: list[dict]) -> Finding:
    """A per-model rule's error: its reason, the sizes asked for, its code and source, and the fixes."""
    code = f"{rule.code}; " if rule.code else ""
    msg = f"{rule.reason} (got {got}) [{code}source: {rule.source}]"
    return finding(rule.id, "error", msg, fld, near, fixes=fixes)


def _model_split(ctx: MeshContext, rule: ModelMeshRule) -> list[Finding]:
    """A ``split`` rule on the layers rule's stages: PP = value runs layers 0 .. layer - 1 on the first stage."""
    p, L = ctx.p, ctx.spec.num_layers
    if p.size(rule.fields[0]) != rule.value:
        return []
    stages = ctx.layout[0]
    if len(stages) != 2 or stages[0].layers == tuple(range(rule.layer)):
        return []  # no split (the layers rule refuses it), a VPP split (refused by its own rule), or the right one
    want = [
        Stage(0, True, tuple(range(rule.layer)), (), False),
        Stage(1, False, tuple(range(rule.layer, L)), tuple(range(ctx.n_mtp)), True),
    ]
    got = " | ".join(f"{len(s.layers)} layers" for s in stages)
    fix = {"pp_layout": layout_text(want)}
    return [_model_finding(rule, f"stages of {got}; use --pp-layout '{fix['pp_layout']}'", "pp_layout", (), [fix])]


def rule_model(ctx: MeshContext) -> list[Finding]:
    """The model's own mesh rules, read as data from :mod:`mlite.models.mesh_rules` (``mesh_rules.json``: DeepSeek-V4
    TP = ETP = 1; DeepSeek-V4.1 no CP with EP, no TP/VPP/ETP, PP 1 or 2, PP2 split at layer 20 and without EP or
    CP), each refusal naming the rule's reason, code and source, with the next valid values as fixes."""
    rules = rules_for(ctx.spec.architecture)
    if not rules:  # read no size (the whole-mesh table's memo: mlite.mesh.resolve_many)
        return []
    sizes = ctx.p.sizes()
    out: list[Finding] = []
    for rule in rules:
        if rule.kind == "split":
            out += _model_split(ctx, rule)
            continue
        if not rule.size_violation(sizes):
            continue
        got = ", ".join(f"{_LABEL[f]} {sizes[f]}" for f in rule.fields)
        fld = rule.fields[0]
        if rule.kind == "fixed":
            fld = next(f for f in rule.fields if sizes[f] != rule.value)
            fixes = [{f: rule.value for f in rule.fields}]
            near: tuple = (rule.value,)
        elif rule.kind == "allowed":
            v = sizes[fld]
            near = tuple(sorted(rule.values, key=lambda x: (abs(x - v), -x)))
            fixes = [{fld: x} for x in near]
        else:  # exclusive: one of them back to 1 (the last named first: CP-only keeps EP off, PP2 keeps PP)
            near = (1,)
            fixes = [{f: 1} for f in reversed(rule.fields)]
            fld = rule.fields[-1]
        out.append(_model_finding(rule, got, fld, near, fixes))
    return out


def rule_vpp(ctx: MeshContext) -> list[Finding]:
    """VPP > 1 needs PP > 1 (``initialize_model_parallel``: interleaved schedule)."""
    if ctx.p.vpp > 1 and ctx.p.pp == 1:
        return [
            finding(
                "vpp", "error", f"VPP {ctx.p.vpp} needs PP > 1 (virtual stages interleave pipeline ranks)", "vpp", (1,)
            )
        ]
    return []


def rule_layers(ctx: MeshContext) -> list[Finding]:
    """Layers split into PP*VPP stages: evenly, by ``pp_layout``, or by Megatron-Core's split keys (first/last-stage
    counts, ``account_for_*``, a layer list: :func:`~mlite.mesh.layout.split_layout`); an uneven automatic layout
    only with ``auto_uneven`` (Megatron Lite balances the layers itself; Megatron-Core asserts they divide by PP).
    MTP layers are placed only when trained."""
    return list(ctx.layout[2])


def _split(ctx: MeshContext) -> tuple[list[Stage], str, list[Finding]]:
    """The stages of the launcher's (or ``mlite mesh``'s) Megatron-Core split keys, or the error naming them."""
    p, s = ctx.p, ctx.split
    if p.pp_layout:  # TransformerConfig.__post_init__: the layout excludes the other split arguments
        msg = f"pipeline_model_parallel_layout cannot be set with the other pipeline split keys ({s.describe()})"
        return [], "split", [finding("layers", "error", msg, "pp_layout", fixes=[{"pp_layout": ""}])]
    try:
        return split_layout(ctx.spec.num_layers, ctx.n_mtp, p.pp, p.vpp, s), "split", []
    except MliteError as e:
        return [], "split", [finding("layers", "error", e.message, "pp")]


def _layout(ctx: MeshContext) -> tuple[list[Stage], str, list[Finding]]:
    p = ctx.p
    pp, vpp = p.pp, p.vpp
    n_layers, n_mtp, n_stages = ctx.spec.num_layers, ctx.n_mtp, pp * vpp
    if ctx.split:
        return _split(ctx)
    if p.pp_layout:
        try:
            stages = parse_layout(p.pp_layout, n_layers, n_mtp)
        except MliteError as e:
            return [], "pp_layout", [finding("layers", "error", e.message, "pp_layout", fixes=[{"pp_layout": ""}])]
        if len(stages) != n_stages:
            return (
                [],
                "pp_layout",
                [
                    finding(
                        "layers",
                        "error",
                        f"pp_layout has {len(stages)} stages but PP*VPP = {pp}*{vpp} = {n_stages}",
                        "pp_layout",
                        fixes=[{"pp_layout": ""}],
                    )
                ],
            )
        return stages, "pp_layout", []
    planned, source, found = _planned_layout(n_layers, n_mtp, pp, vpp, ctx.auto_uneven)
    return list(planned), source, list(found)


@lru_cache(maxsize=4096)
def _planned_layout(
    n_layers: int, n_mtp: int, pp: int, vpp: int, auto_uneven: bool
) -> tuple[tuple[Stage, ...], str, tuple[Finding, ...]]:
    """The layers rule without ``pp_layout`` or split keys: even stages, the automatic uneven layout (with its
    warning) or the error; a function of these five values only, so cached (the whole-mesh table asks it for every
    mesh)."""
    F: list[Finding] = []
    n_stages = pp * vpp
    if n_stages > n_layers:
        return (
            (),
            "even",
            (
                finding(
                    "layers",
                    "error",
                    f"{n_layers} layers cannot fill PP*VPP = {n_stages} stages",
                    "pp",
                    nearest(pp, lambda q: q * vpp <= n_layers and n_layers % (q * vpp) == 0),
                ),
            ),
        )
    even = even_layout(n_layers, n_mtp, n_stages)
    if even:
        return tuple(even), "even", ()
    auto = auto_layout(n_layers, n_mtp, n_stages) or []
    if auto_uneven and auto:
        F.append(
            finding(
                "layers",
                "warning",
                f"{n_layers} layers do not split evenly into PP*VPP = {n_stages} "
                f"stages; using the uneven layout '{layout_text(auto)}'",
                "pp_layout",
            )
        )
        return tuple(auto), "auto", tuple(F)
    near = nearest(pp, lambda q: n_layers % (q * vpp) == 0)
    fixes = [{"pp": q} for q in near] + ([{"pp_layout": layout_text(auto)}] if auto and vpp == 1 else [])
    hint = f"; an uneven layout would work: --pp-layout '{layout_text(auto)}'" if auto else ""
    f = finding(
        "layers",
        "error",
        f"{n_layers} layers do not split evenly into PP*VPP = {pp}*{vpp} = {n_stages} stages",
        "pp",
        near,
        fixes=fixes,
    )
    return (), "even", (Finding(f.rule, f.level, f.message + hint, f.field, f.nearest, f.fixes),)


def rule_seq_len(ctx: MeshContext) -> list[Finding]:
    """Sequence length divisible by 2*CP (load-balanced causal context parallelism)."""
    cp = ctx.p.cp
    if cp > 1 and ctx.seq_len % (2 * cp):
        return [
            finding(
                "seq_len",
                "error",
                f"sequence length {ctx.seq_len} is not divisible by 2*CP = {2 * cp}",
                "seq_len",
                nearest(ctx.seq_len, lambda s: s % (2 * cp) == 0),
            )
        ]
    return []


# ---------------------------------------------------------------------------------------------- warnings, info
def rule_tp_span(ctx: MeshContext) -> list[Finding]:
    """TP groups that span nodes."""
    tp, g = ctx.p.tp, ctx.gpus_per_node
    if tp > 1 and (tp > g or g % tp):
        return [_tp_span(tp, g)]
    return []


@lru_cache(maxsize=1024)
def _tp_span(tp: int, g: int) -> Finding:
    """The warning of :func:`rule_tp_span` (cached: a function of its two numbers; findings are frozen)."""
    msg = f"TP {tp} groups span nodes ({g} GPUs per node): tensor parallel traffic crosses the inter-node network"
    return finding("tp_span", "warning", msg, "tp")


def rule_ep_span(ctx: MeshContext) -> list[Finding]:
    """EP*ETP groups that span nodes (MoE only)."""
    e, g = ctx.p.ep * ctx.etp, ctx.gpus_per_node
    if ctx.spec.num_experts and e > 1 and (e > g or g % e):
        return [_ep_span(e, g)]
    return []


@lru_cache(maxsize=1024)
def _ep_span(e: int, g: int) -> Finding:
    """The warning of :func:`rule_ep_span` (cached like :func:`_tp_span`)."""
    msg = f"EP*ETP = {e} expert groups span nodes ({g} GPUs per node): all-to-all crosses the inter-node network"
    return finding("ep_span", "warning", msg, "ep")


def rule_launcher_rule(ctx: MeshContext) -> list[Finding]:
    """verl's launcher rule ngpu/PP = TP*EP*DP disagreeing with the runtime's ngpu = TP*CP*DP*PP (MoE only)."""
    p, dp = ctx.p, ctx.dp
    if not (dp and ctx.spec.num_experts):
        return []
    if launcher_rule_dp(ctx.ngpu, p) == dp:
        return []
    return [
        finding(
            "launcher_rule",
            "warning",
            f"{LAUNCHER_RULE} {launcher_rule_outcome(ctx.ngpu, p)}, the "
            f"runtime's rule ngpu = TP*CP*DP*PP gives DP {dp} (they agree only when CP = EP; here CP {p.cp}, "
            f"EP {p.ep})",
            "cp",
        )
    ]


def rule_sequence_parallel(ctx: MeshContext) -> list[Finding]:
    """MoE with TP > 1 needs sequence parallelism (Megatron-Core warns)."""
    if ctx.spec.num_experts and ctx.p.tp > 1:
        return [_SEQUENCE_PARALLEL]
    return []


_SEQUENCE_PARALLEL = finding(
    "sequence_parallel",
    "warning",
    "MoE with TP > 1: Megatron requires sequence parallelism (--sequence-parallel); the plan assumes it on",
    "tp",
)
""":func:`rule_sequence_parallel`'s warning (one text; findings are frozen)."""


def rule_gdn_cp(ctx: MeshContext) -> list[Finding]:
    """Gated DeltaNet with CP > 1 needs flash-linear-attention >= 0.5."""
    if ctx.spec.linear_num_value_heads and ctx.p.cp > 1:
        return [
            finding(
                "gdn_cp",
                "warning",
                "Gated DeltaNet with CP > 1 needs flash-linear-attention >= 0.5 (the all-gather CP path)",
                "cp",
            )
        ]
    return []


def rule_vocab(ctx: MeshContext) -> list[Finding]:
    """Vocabulary padded to a multiple of 128*TP."""
    return list(_vocab(ctx.spec.vocab_size, ctx.p.tp))


@lru_cache(maxsize=1024)
def _vocab(v: int, tp: int) -> tuple[Finding, ...]:
    """The finding of :func:`rule_vocab` (cached: a function of the vocabulary and TP)."""
    padded = pad_vocab(v, tp)
    if padded == v:
        return ()
    msg = f"vocabulary padded from {v} to {padded} (+{padded - v} rows) to a multiple of 128*TP = {128 * tp}"
    return (finding("vocab", "info", msg, "tp"),)


def rule_mtp(ctx: MeshContext) -> list[Finding]:
    """MTP layers the model has but the run does not train (so no stage holds them)."""
    if ctx.train_mtp is False and ctx.spec.num_mtp_layers:
        return [
            finding(
                "mtp",
                "info",
                f"{ctx.spec.num_mtp_layers} MTP layer(s) of the model are not trained (the "
                "launcher does not enable MTP): the pipeline holds none",
                None,
            )
        ]
    return []


def rule_inherited(ctx: MeshContext) -> list[Finding]:
    """Each size that was not given but inherited, said once."""
    return [finding("inherited", "info", inh.why, fld) for fld, inh in ctx.inherited.items()]


RULES = (
    rule_world_dense,
    rule_world_expert,
    rule_heads,
    rule_gdn_heads,
    rule_experts,
    rule_ffn,
    rule_model,
    rule_vpp,
    rule_layers,
    rule_seq_len,
    rule_tp_span,
    rule_ep_span,
    rule_launcher_rule,
    rule_sequence_parallel,
    rule_gdn_cp,
    rule_vocab,
    rule_mtp,
    rule_inherited,
)
"""Every mesh rule, in the order findings are reported."""


def explain_inherited(ctx: MeshContext, f: Finding) -> Finding:
    """``f`` with the note of each inherited size its fixes change: why it has its value and what to set."""
    notes = []
    for fld, inh in ctx.inherited.items():
        values = [fx[fld] for fx in f.fixes if fld in fx]
        if f.level != "error" or not values:
            continue
        what = inh.key or fld
        notes.append(f"{inh.why}; set {what} to " + " or ".join(str(v) for v in dict.fromkeys(values)))
    if not notes:
        return f
    return Finding(f.rule, f.level, f.message + " (" + "; ".join(notes) + ")", f.field, f.nearest, f.fixes)


def run_rules(ctx: MeshContext, rules=RULES) -> list[Finding]:
    """Every finding of ``rules`` on ``ctx``, inherited sizes explained."""
    return [explain_inherited(ctx, f) for rule in rules for f in rule(ctx)]
