"""``resolve``: a ParallelConfig + model + GPU count -> a MeshPlan (DP, EDP, stages, findings, rank groups)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import MliteError
from .config import ParallelConfig
from .layout import Stage, auto_layout, even_layout, layout_text, parse_layout
from .ranks import RankLayout
from .rules import Finding, fmt_nearest, nearest, pad_vocab

DEFAULT_SEQ_LEN = 4096
DEFAULT_GPUS_PER_NODE = 8


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
    """``even``, ``pp_layout`` (given) or ``auto`` (an uneven layout the planner made)."""
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
        p = self.parallel
        return RankLayout(tp=p.tp, cp=p.cp, dp=self.dp, pp=p.pp, ep=p.ep, etp=p.etp_size, edp=self.edp)

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
            "tp": p.tp, "pp": p.pp, "vpp": p.vpp, "cp": p.cp, "ep": p.ep, "etp": p.etp_size,
            "dp": self.dp, "edp": self.edp,
            "ngpu": self.ngpu,
            "info": [f.message for f in self.infos],
            "padded_vocab": self.padded_vocab,
            "pp_layout": self.layout,
            "layout_source": self.layout_source,
            "rules": [{"rule": f.rule, "level": f.level, "field": f.field, "nearest": list(f.nearest),
                       "message": f.message} for f in self.findings],
        }


def _err(rule, msg, fld=None, near=()):
    return Finding(rule, "error", msg + fmt_nearest(fld or "", tuple(near)), fld, tuple(near))


def resolve(spec, ngpu: int, parallel: ParallelConfig | None = None, *, seq_len: int = DEFAULT_SEQ_LEN,
            gpus_per_node: int = DEFAULT_GPUS_PER_NODE, auto_uneven: bool = False) -> MeshPlan:
    """Resolve and validate ``parallel`` for ``spec`` on ``ngpu`` GPUs. Never raises for an invalid mesh:
    the plan carries the errors. ``auto_uneven`` lets the planner choose an uneven layout when layers do not
    split evenly (reported as a warning) instead of failing the layers rule."""
    p = parallel or ParallelConfig()
    if isinstance(ngpu, bool) or not isinstance(ngpu, int) or ngpu < 1:
        raise MliteError(f"--ngpu must be a positive integer, got {ngpu!r}")
    if seq_len < 1 or gpus_per_node < 1:
        raise MliteError("--seq-len and --gpus-per-node must be positive")
    F: list[Finding] = []
    tp, pp, vpp, cp, ep, etp = p.tp, p.pp, p.vpp, p.cp, p.ep, p.etp_size

    # world
    dense_mp, expert_mp = tp * cp * pp, etp * ep * pp
    dp = ngpu // dense_mp if ngpu % dense_mp == 0 else 0
    edp = ngpu // expert_mp if ngpu % expert_mp == 0 else 0
    if not dp:
        F.append(_err("world", f"ngpu {ngpu} is not divisible by TP*CP*PP = {tp}*{cp}*{pp} = {dense_mp}", "ngpu",
                      nearest(ngpu, lambda n: n % dense_mp == 0 and n % expert_mp == 0)))
    if not edp:
        F.append(_err("world", f"ngpu {ngpu} is not divisible by ETP*EP*PP = {etp}*{ep}*{pp} = {expert_mp}", "ep",
                      nearest(ep, lambda e: ngpu % (etp * e * pp) == 0 and spec_experts_ok(spec, e))))

    # heads
    heads, kv = spec.num_attention_heads, spec.num_key_value_heads
    if heads % tp:
        F.append(_err("heads", f"num_attention_heads {heads} is not divisible by TP {tp}", "tp",
                      nearest(tp, lambda t: heads % t == 0 and kv % t == 0)))
    elif kv % tp:
        F.append(_err("heads", f"num_key_value_heads (query groups) {kv} is not divisible by TP {tp}", "tp",
                      nearest(tp, lambda t: heads % t == 0 and kv % t == 0)))
    if spec.linear_num_value_heads:
        nk, nv = spec.linear_num_key_heads, spec.linear_num_value_heads
        if nk % tp or nv % tp:
            F.append(_err("gdn_heads", f"Gated DeltaNet key heads {nk} and value heads {nv} must be divisible by "
                          f"TP {tp}", "tp", nearest(tp, lambda t: nk % t == 0 and nv % t == 0 and heads % t == 0)))

    # experts
    if spec.num_experts:
        if spec.num_experts % ep:
            F.append(_err("experts", f"routed experts {spec.num_experts} are not divisible by EP {ep}", "ep",
                          nearest(ep, lambda e: spec.num_experts % e == 0)))
        if spec.moe_ffn_hidden_size % etp:
            F.append(_err("ffn", f"expert FFN width {spec.moe_ffn_hidden_size} is not divisible by ETP {etp}", "etp",
                          nearest(etp, lambda e: spec.moe_ffn_hidden_size % e == 0)))
    elif ep > 1 or etp > 1:
        F.append(_err("experts", f"{spec.name} has no routed experts: EP and ETP must be 1 (got EP {ep}, ETP {etp})",
                      "ep", (1,)))
    for what, width in (("dense FFN width", spec.ffn_hidden_size),
                        ("shared-expert FFN width", spec.shared_expert_ffn_hidden_size)):
        if width and width % tp:
            F.append(_err("ffn", f"{what} {width} is not divisible by TP {tp}", "tp",
                          nearest(tp, lambda t: width % t == 0 and heads % t == 0)))

    # DeepSeek-V4
    if spec.architecture == "deepseek_v4" and (tp > 1 or etp > 1):
        F.append(_err("deepseek_v4", f"DeepSeek-V4 runs with TP = ETP = 1 in mlite (got TP {tp}, ETP {etp})", "tp",
                      (1,)))

    # pipeline
    stages: list[Stage] = []
    source = "even"
    n_layers, n_mtp = spec.num_layers, spec.num_mtp_layers
    if vpp > 1 and pp == 1:
        F.append(_err("vpp", f"VPP {vpp} needs PP > 1 (virtual stages interleave pipeline ranks)", "vpp", (1,)))
    n_stages = pp * vpp
    if p.pp_layout:
        try:
            stages = parse_layout(p.pp_layout, n_layers, n_mtp)
            source = "pp_layout"
        except MliteError as e:
            F.append(Finding("layers", "error", e.message, "pp_layout"))
        if stages and len(stages) != n_stages:
            F.append(Finding("layers", "error", f"pp_layout has {len(stages)} stages but PP*VPP = {pp}*{vpp} = "
                             f"{n_stages}", "pp_layout"))
            stages = []
    elif n_stages > n_layers:
        F.append(_err("layers", f"{n_layers} layers cannot fill PP*VPP = {n_stages} stages", "pp",
                      nearest(pp, lambda q: q * vpp <= n_layers and n_layers % (q * vpp) == 0)))
    else:
        stages = even_layout(n_layers, n_mtp, n_stages) or []
        if not stages:
            auto = auto_layout(n_layers, n_mtp, n_stages) or []
            hint = f"; an uneven layout would work: --pp-layout '{layout_text(auto)}'" if auto else ""
            if auto_uneven and auto:
                stages, source = auto, "auto"
                F.append(Finding("layers", "warning", f"{n_layers} layers do not split evenly into PP*VPP = "
                                 f"{n_stages} stages; using the uneven layout '{layout_text(auto)}'", "pp_layout"))
            else:
                near = nearest(pp, lambda q: n_layers % (q * vpp) == 0)
                F.append(Finding("layers", "error", f"{n_layers} layers do not split evenly into PP*VPP = {pp}*{vpp}"
                                 f" = {n_stages} stages" + fmt_nearest("pp", near) + hint, "pp", near))

    # context parallel
    if cp > 1 and seq_len % (2 * cp):
        F.append(_err("seq_len", f"sequence length {seq_len} is not divisible by 2*CP = {2 * cp}", "seq_len",
                      nearest(seq_len, lambda s: s % (2 * cp) == 0)))

    # warnings and info
    if tp > 1 and (tp > gpus_per_node or gpus_per_node % tp):
        F.append(Finding("tp_span", "warning", f"TP {tp} groups span nodes ({gpus_per_node} GPUs per node): tensor "
                         "parallel traffic crosses the inter-node network", "tp"))
    if ep * etp > 1 and (ep * etp > gpus_per_node or gpus_per_node % (ep * etp)):
        F.append(Finding("ep_span", "warning", f"EP*ETP = {ep * etp} expert groups span nodes ({gpus_per_node} GPUs "
                         "per node): all-to-all crosses the inter-node network", "ep"))
    if dp and spec.num_experts:
        launcher_dp = ngpu / pp / (tp * ep)
        if launcher_dp != dp:
            shown = int(launcher_dp) if float(launcher_dp).is_integer() else round(launcher_dp, 3)
            F.append(Finding("launcher_rule", "warning", f"verl's launcher rule ngpu/PP = TP*EP*DP gives DP {shown}, "
                             f"the runtime's rule ngpu = TP*CP*DP*PP gives DP {dp} (they agree only when CP = EP; "
                             f"here CP {cp}, EP {ep})", "cp"))
    if spec.num_experts and tp > 1:
        F.append(Finding("sequence_parallel", "warning", "MoE with TP > 1: Megatron requires sequence parallelism "
                         "(--sequence-parallel); the plan assumes it on", "tp"))
    if spec.linear_num_value_heads and cp > 1:
        F.append(Finding("gdn_cp", "warning", "Gated DeltaNet with CP > 1 needs flash-linear-attention >= 0.5 (the "
                         "all-gather CP path)", "cp"))
    padded = pad_vocab(spec.vocab_size, tp)
    if padded != spec.vocab_size:
        F.append(Finding("vocab", "info", f"vocabulary padded from {spec.vocab_size} to {padded} (+{padded - spec.vocab_size}"
                         f" rows) to a multiple of 128*TP = {128 * tp}", "tp"))
    return MeshPlan(parallel=p, ngpu=ngpu, dp=dp, edp=edp, gpus_per_node=gpus_per_node, seq_len=seq_len,
                    padded_vocab=padded, stages=stages, layout_source=source, findings=F)


def spec_experts_ok(spec, ep: int) -> bool:
    return (spec.num_experts % ep == 0) if spec.num_experts else ep == 1
