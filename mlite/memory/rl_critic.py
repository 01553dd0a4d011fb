"""PPO's critic (``algorithm.adv_estimator=gae``): a value model trained beside the actor on the same GPUs, its
state on one GPU as a :class:`~mlite.memory.estimate.RankMemory` that the critic phases of
:mod:`mlite.memory.rl_phases` (``critic_values``, ``critic_update``) and every other phase (its idle state) read.

Sources (verl-project/verl; main = 1dda039b9c6311889a9c9a26040677e1254814f9, v0.7.0 = f9c855f7cf04d603c9546bc01776c74806a879c1):

- Whether there is one: ``need_critic`` (``verl/trainer/ppo/utils.py`` @ main): ``critic.enable`` when set, else
  ``adv_estimator == gae``; otherwise verl warns "Disabled critic as algorithm.adv_estimator != gae" and builds
  none (GRPO has no critic).
- Placement: ``RayPPOTrainer.init_workers`` (``verl/trainer/ppo/ray_trainer.py`` @ main) puts the critic in the
  global pool with the actor (``create_colocated_worker_cls``: one process per GPU holds both) and calls the
  critic's ``init_model`` before the actor's ("we should create rollout at the end so that vllm can have a better
  estimation of kv cache memory"): the engine starts beside the critic's idle state.
- Keys (``verl/trainer/config/_generated_ppo_megatron_trainer.yaml`` @ main): ``critic.model.path`` (its own
  model; the kit's default: the actor's), ``critic.megatron.{tensor,pipeline,context,expert}_model_parallel_size``
  (1 by default, not the actor's), ``critic.megatron.param_offload`` / ``optimizer_offload``,
  ``critic.ppo_micro_batch_size_per_gpu``, ``critic.ppo_max_token_len_per_gpu`` (32768) and
  ``critic.forward_max_token_len_per_gpu`` (``${.ppo_max_token_len_per_gpu}``); ``critic.use_dynamic_bsz``
  follows the actor's.
- Micro-batches: ``CriticWorker.compute_values`` (``verl/workers/megatron_workers.py`` @ v0.7.0) sizes the values
  forward with ``ppo_micro_batch_size_per_gpu`` rows (``forward_max_token_len_per_gpu`` tokens with dynamic batch
  size); ``update_critic`` trains ``ppo_micro_batch_size_per_gpu`` rows (``ppo_max_token_len_per_gpu`` tokens).
- The value head: verl builds the critic as a ``value_model`` (``TrainingWorkerConfig(model_type="value_model")``
  @ main): the decoder and the embedding as the language model's, the LM head replaced by a ``hidden -> 1``
  linear, so there is no ``[tokens, vocab]`` logits tensor and no logits gradient (the values are ``[tokens, 1]``
  fp32). The kit keeps the embedding (vocab x hidden), swaps the LM head's parameters for ``hidden`` and the
  logits' vocabulary part for a 4-byte value per token.
- Offload: verl's Megatron offload (:mod:`mlite.memory.rl_offload`): with ``param_offload`` the parameters go to
  pinned host buffers and the gradient buffer is freed outside the critic's own calls; ``compute_values`` is an
  eval-mode call (parameters back, no gradients: ``BaseEngineCtx`` in ``verl/workers/engine/base.py`` @ main),
  ``update_critic`` a train-mode one (everything back).
"""

from __future__ import annotations

import dataclasses
from dataclasses import asdict, dataclass, replace

from ..errors import MliteError
from ..options import TrainingOptions
from .estimate import RankMemory, estimate
from .rl_lazy import at_engine_start, moments_idle
from .rl_offload import verl_offloaded

ADV_ESTIMATORS = ("grpo", "gae", "reinforce_plus_plus", "rloo", "remax", "opo", "gpg")
"""``algorithm.adv_estimator`` values the kit reads (``AdvantageEstimator`` in ``verl/trainer/ppo/core_algos.py``);
only ``gae`` builds a critic by default."""
CRITIC_STRATEGIES = ("megatron", "fsdp", "fsdp2")
"""``critic.strategy`` values the kit models (an FSDP critic as verl's FSDP worker: :func:`fsdp_critic`)."""


@dataclass(kw_only=True)
class CriticOptions:
    """PPO's critic worker (verl names; defaults those of ``_generated_ppo_megatron_trainer.yaml`` @ main)."""

    adv_estimator: str = "grpo"
    """``algorithm.adv_estimator``: ``gae`` (PPO) builds a critic; the kit's default ``grpo`` does not."""
    enable: bool | None = None
    """``critic.enable``: True / False overrides the estimator's choice (None: ``gae`` only)."""
    model: str | None = None
    """``critic.model.path``: the critic's model (a config name or path; None: the actor's)."""
    strategy: str = "megatron"
    """``critic.strategy``: the critic's backend (megatron; fsdp / fsdp2: verl's FSDP critic)."""
    tp: int = 1
    """``critic.megatron.tensor_model_parallel_size``."""
    pp: int = 1
    """``critic.megatron.pipeline_model_parallel_size``."""
    cp: int = 1
    """``critic.megatron.context_parallel_size``."""
    ep: int = 1
    """``critic.megatron.expert_model_parallel_size``."""
    param_offload: bool = False
    """``critic.megatron.param_offload``: parameters on the host and the gradient buffer freed outside its calls."""
    optimizer_offload: bool = False
    """``critic.megatron.optimizer_offload``: optimizer state on the host outside ``update_critic``."""
    ppo_micro_batch_size_per_gpu: int | None = None
    """``critic.ppo_micro_batch_size_per_gpu``: rows of one update and one values micro-batch (None: the actor's)."""
    ppo_max_token_len_per_gpu: int = 32768
    """``critic.ppo_max_token_len_per_gpu``: tokens of one update micro-batch with dynamic batch size."""
    forward_max_token_len_per_gpu: int | None = None
    """``critic.forward_max_token_len_per_gpu``: tokens of one values micro-batch (None: ``ppo_max_token_len``)."""

    def __post_init__(self):
        self.validate()

    def validate(self) -> None:
        """Raise :class:`MliteError` naming the first bad field."""
        if self.adv_estimator not in ADV_ESTIMATORS:
            raise MliteError(
                f"algorithm.adv_estimator (--adv-estimator) must be one of {', '.join(ADV_ESTIMATORS)}, "
                f"got {self.adv_estimator!r}"
            )
        if self.strategy not in CRITIC_STRATEGIES:
            raise MliteError(
                f"critic.strategy (--critic-strategy) {self.strategy!r}: the kit models {', '.join(CRITIC_STRATEGIES)}"
            )
        for f in ("tp", "pp", "cp", "ep", "ppo_max_token_len_per_gpu"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise MliteError(f"critic {f} must be a positive integer, got {v!r}")
        for f in ("ppo_micro_batch_size_per_gpu", "forward_max_token_len_per_gpu"):
            v = getattr(self, f)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise MliteError(f"critic.{f} must be a positive integer or unset, got {v!r}")

    @property
    def active(self) -> bool:
        """Whether verl builds a critic (``need_critic``)."""
        return bool(self.enable) if self.enable is not None else self.adv_estimator == "gae"

    def notes(self) -> list[str]:
        """verl's warning when the estimator builds no critic (``need_critic``) and critic options were given."""
        if self.active or self.enable is not None or self == CriticOptions(adv_estimator=self.adv_estimator):
            return []
        return [
            f"critic options given with algorithm.adv_estimator={self.adv_estimator}: verl disables the critic "
            '("Disabled critic as algorithm.adv_estimator != gae"); set --adv-estimator gae or --critic-enable'
        ]

    def to_dict(self) -> dict:
        return asdict(self)


def value_spec(spec):
    """``spec`` as a value model: the LM head (or a tied head) replaced by a ``hidden -> 1`` replicated linear."""
    post = tuple(g for g in spec.post if g.component != "lm_head")
    norm = next((g for g in spec.post if g.component != "lm_head"), None)
    if norm is None:
        raise MliteError(f"{spec.name}: no tensor after the last layer to place the critic's value head beside")
    head = dataclasses.replace(
        norm, name="value_head.weight", component="lm_head", numel=spec.hidden_size, parallel="rep", shape=()
    )
    return dataclasses.replace(spec, name=f"{spec.name} (value model)", tie_word_embeddings=False, post=(*post, head))


def _value_logits(rank: RankMemory, plan, o: TrainingOptions) -> RankMemory:
    """The estimate's logits parts as the value head's: the vocabulary part of ``logits`` becomes a 4-byte value per
    local token, ``logits_grad`` goes (estimate.py's ``_megatron_parts``: ``2 * D * V`` fused, ``4 * D * V + 9 * D``
    eager, D the rank's tokens)."""
    if "logits" not in rank.activations:
        return rank
    d = o.micro_batch_size * o.seq_len / plan.parallel.cp
    vl = plan.padded_vocab / plan.parallel.tp
    vocab_part = 2 * d * vl if o.fused_cross_entropy else 4 * d * vl + 9 * d
    acts = dict(rank.activations, logits=max(0.0, rank.activations["logits"] - vocab_part) + 4 * d)
    trans = {k: v for k, v in rank.transients.items() if k != "logits_grad"}
    return replace(rank, activations=acts, transients=trans)


@dataclass(kw_only=True)
class CriticState:
    """The critic on one GPU."""

    options: CriticOptions
    """The critic options."""
    model: str
    """The critic model's name."""
    rank: RankMemory
    """Its worst rank in the update (value head, verl's offload)."""
    forward: float
    """One ``compute_values`` micro-batch (no autograd state)."""
    plan: object
    """The critic's mesh plan (None: an FSDP critic)."""
    moments: float = 0.0
    """The optimizer moments its idle state counts on the GPU (:func:`mlite.memory.rl_lazy.moments_idle`): created
    at its first ``step()``, so absent before its first update and at the engine's start-up."""

    @property
    def at_engine_start(self) -> float:
        """What the critic holds on the GPU when the rollout engine sizes its KV cache (``init_workers`` builds it
        first): its idle state without the moments (:func:`mlite.memory.rl_lazy.at_engine_start`)."""
        return at_engine_start(self.rank.idle_gpu, self.moments)

    @property
    def params(self) -> float:
        return self.rank.params

    @property
    def idle_other(self) -> float:
        """Its idle state other than its weights."""
        return self.rank.idle_gpu - (0.0 if self.options.param_offload else self.rank.params)


_LOGIT_PARTS = ("logits", "log_prob_stats", "logits_response_copy", "entropy_softmax")
"""The FSDP estimate's log-prob / entropy parts (:func:`mlite.memory.rl_fsdp._logit_parts`): a value model has none."""


def fsdp_critic(vs, ngpu: int, o: TrainingOptions, c: CriticOptions, f, seq_tokens: int) -> CriticState:
    """verl's FSDP critic (``critic.strategy`` fsdp / fsdp2, ``CriticWorker`` in ``verl/workers/fsdp_workers.py`` @
    v0.7.0 f9c855f7, ``dp_critic.py``): the value model ``vs`` as the FSDP actor's estimate
    (:func:`mlite.memory.rl_fsdp.fsdp_actor`: fp32 shards of params, grads and AdamW moments over the FSDP group)
    with the critic's offload flags (``critic.model.fsdp_config.param_offload`` / ``optimizer_offload``), its
    micro-batch and token budgets; the actor's remove-padding, gradient-checkpointing and Ulysses settings (the
    critic's own keys for them are not read); no entropy, and the log-prob parts replaced by a 4-byte value per
    token (``values`` ``[T, 1]`` fp32)."""
    from .rl_fsdp import forward_only, fsdp_actor, micro_tokens

    fc = replace(
        f,
        strategy=c.strategy,
        param_offload=c.param_offload,
        optimizer_offload=c.optimizer_offload,
        offload_policy=False,
        ppo_micro_batch_size_per_gpu=c.ppo_micro_batch_size_per_gpu or f.ppo_micro_batch_size_per_gpu,
        ppo_max_token_len_per_gpu=c.ppo_max_token_len_per_gpu,
        entropy_coeff=0.0,
    )
    act = fsdp_actor(vs, ngpu, o, fc, seq_tokens)
    rows = fc.ppo_micro_batch_size_per_gpu or o.micro_batch_size
    upd = micro_tokens(fc, seq_tokens, rows, fc.ppo_max_token_len_per_gpu)
    acts = {k: v for k, v in act.activations.items() if k not in _LOGIT_PARTS}
    acts["values"] = 4.0 * upd
    rank = replace(act, activations=acts, transients={k: v for k, v in act.transients.items() if k != "logits_grad"})
    fwd = micro_tokens(fc, seq_tokens, rows, c.forward_max_token_len_per_gpu or c.ppo_max_token_len_per_gpu)
    head = forward_only(vs, replace(fc, use_fused_kernels=True), fwd, entropy=False)  # fused: no [T, V] parts
    # its gradients exist only inside update_critic (zero_grad at its end), its AdamW moments from its first step()
    moments = moments_idle(rank, c.optimizer_offload)
    return CriticState(options=c, model=vs.name, rank=rank, forward=head + 4.0 * fwd, plan=None, moments=moments)


def critic_state(
    spec,
    ngpu: int,
    o: TrainingOptions,
    c: CriticOptions,
    *,
    use_dynamic_bsz: bool,
    seq_tokens: int,
    fsdp=None,
):
    """The critic's :class:`CriticState` (None when verl builds none): ``c.model`` (else ``spec``) as a value model on
    its own mesh, the actor's training options with the critic's offload flags and micro-batch; an FSDP critic
    (``c.strategy`` fsdp / fsdp2) as :func:`fsdp_critic`, with the actor's FSDP options ``fsdp`` (verl's defaults
    when None)."""
    from ..mesh import ParallelConfig, resolve
    from ..models import from_hf_config

    if not c.active:
        return None
    base = from_hf_config(c.model) if c.model else spec
    vs = value_spec(base)
    if c.strategy != "megatron":
        from .rl_fsdp import FsdpOptions

        f = fsdp if fsdp is not None and fsdp.is_fsdp else FsdpOptions(strategy=c.strategy)
        return fsdp_critic(vs, ngpu, o, c, replace(f, use_dynamic_bsz=use_dynamic_bsz), seq_tokens)
    rows = c.ppo_micro_batch_size_per_gpu or o.micro_batch_size
    if use_dynamic_bsz:  # one packed micro-batch of max_token_len x CP tokens, at least one sequence
        upd = replace(o, micro_batch_size=1, seq_len=max(c.ppo_max_token_len_per_gpu * c.cp, seq_tokens))
        fwd_len = max((c.forward_max_token_len_per_gpu or c.ppo_max_token_len_per_gpu) * c.cp, seq_tokens)
        fwd_rows = 1
    else:
        upd, fwd_len, fwd_rows = replace(o, micro_batch_size=rows), o.seq_len, rows
    oc = replace(upd, param_offload=c.param_offload, optimizer_offload=c.optimizer_offload, grad_offload=False)
    plan = resolve(
        vs, ngpu, ParallelConfig(tp=c.tp, pp=c.pp, cp=c.cp, ep=c.ep), seq_len=oc.seq_len, gpus_per_node=o.gpus_per_node
    )
    if not plan.valid:
        raise MliteError(f"critic mesh (--critic-tp/--critic-pp/--critic-cp/--critic-ep): {plan.errors[0].message}")
    rank = estimate(vs, plan, oc, explain=False).worst
    rank = verl_offloaded(_value_logits(rank, plan, oc), oc)
    fo = replace(oc, micro_batch_size=fwd_rows, seq_len=fwd_len)
    head = _value_logits(
        estimate(vs, plan, replace(fo, recompute="full", num_microbatches=1), explain=False).worst, plan, fo
    )
    forward = head.activation_total + head.transients.get("recompute_layer", 0.0)
    moments = moments_idle(rank, c.optimizer_offload)  # the DDP grad buffer and main params exist from the build
    return CriticState(options=c, model=base.name, rank=rank, forward=forward, plan=plan, moments=moments)


__all__ = ["ADV_ESTIMATORS", "CriticOptions", "CriticState", "critic_state", "fsdp_critic", "value_spec"]
