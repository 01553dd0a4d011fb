"""``LiteModel`` and ``build_lite_model``: dense, MoE and hybrid Gated-DeltaNet decoders built from a ModelSpec.

Parameter names mirror the transformers (v5) checkpoint inside each layer; the top level is ``embed`` /
``blocks.{i}`` / ``norm`` / ``lm_head`` (:meth:`LiteModel.hf_key` maps to ``model.embed_tokens`` /
``model.layers.{i}`` / ``model.norm`` / ``lm_head``). The build checks every tensor against the spec's inventory,
so the parameter count equals ``spec.total - spec.mtp`` (MTP layers are not built) exactly, or the build fails.

Recompute (activation checkpointing, PyTorch non-reentrant):

* ``none``: autograd keeps every activation.
* ``selective``: the attention core (SDPA) and the gated-delta-rule core are recomputed in backward; what is
  stored per layer is their inputs (q, k, v, and g, beta for Gated DeltaNet) and everything outside the core
  (projections, norms, MLP/MoE activations). Big saving on the pure-PyTorch delta rule (its chunk intermediates
  are ``O(T * C)`` per head), small on flash attention (which already keeps only q, k, v, out, lse).
* ``full``: each decoder block is one checkpoint: only the block's input ``[T, h]`` is stored per layer and the
  block is re-run in backward.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from ...errors import MliteError
from ...models.chunks import ce_chunk_rows
from ..architectures import SUPPORTED_ARCHITECTURES
from ..batch import PackedBatch
from .attention import packed_path
from .blocks import DecoderBlock, LiteConfig
from .common import GatedRMSNorm, PackInfo, RMSNorm, rope_config
from .deltanet import GatedDeltaNet
from .loss import linear_cross_entropy
from .moe import Experts, Router, expert_path

RECOMPUTE = ("none", "selective", "full")
"""Accepted ``recompute`` values."""

_HYBRID = ("qwen3_next", "qwen3_5_moe")


def lite_config(spec, recompute: str = "none") -> LiteConfig:
    """Read the settings the model needs from ``spec`` (and its raw config dict)."""
    arch = spec.architecture
    if spec.source != "native" or arch not in SUPPORTED_ARCHITECTURES:
        raise MliteError(
            f"model '{spec.name}': architecture '{arch}' is not supported by the lite runtime "
            f"(supported: {', '.join(SUPPORTED_ARCHITECTURES)})"
        )
    if recompute not in RECOMPUTE:
        raise MliteError(f"recompute: '{recompute}' is not one of {', '.join(RECOMPUTE)}")
    c = spec.config
    if arch == "qwen3_5_moe" or arch == "mixtral":
        norm_topk = True  # these routers always renormalise
    else:
        norm_topk = bool(c.get("norm_topk_prob", arch == "qwen3_next"))
    eps = float(c.get("rms_norm_eps", 1e-5 if arch == "mixtral" else 1e-6))
    return LiteConfig(
        architecture=arch,
        hidden_size=spec.hidden_size,
        vocab_size=spec.vocab_size,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads,
        head_dim=spec.head_dim,
        ffn_hidden_size=spec.ffn_hidden_size,
        moe_ffn_hidden_size=spec.moe_ffn_hidden_size,
        num_experts=spec.num_experts,
        moe_router_topk=spec.moe_router_topk,
        shared_expert_ffn_hidden_size=spec.shared_expert_ffn_hidden_size,
        norm_topk_prob=norm_topk,
        rms_norm_eps=eps,
        zero_centered_norm=arch in _HYBRID,
        rope=rope_config(c, spec.head_dim, 0.25 if arch in _HYBRID else 1.0),
        tie_word_embeddings=spec.tie_word_embeddings,
        initializer_range=float(c.get("initializer_range", 0.02) or 0.02),
        linear_num_key_heads=spec.linear_num_key_heads,
        linear_num_value_heads=spec.linear_num_value_heads,
        linear_key_head_dim=spec.linear_key_head_dim,
        linear_value_head_dim=spec.linear_value_head_dim,
        linear_conv_kernel_dim=spec.linear_conv_kernel_dim or 4,
        recompute=recompute,
    )


class LiteModel(nn.Module):
    """A decoder-only LM over packed sequences (see the module docstring for names and recompute)."""

    def __init__(self, spec, cfg: LiteConfig, *, moe_aux_loss_coeff: float = 0.0, device=None, dtype=None):
        super().__init__()
        kw = dict(device=device, dtype=dtype)
        self.spec, self.config = spec, cfg
        # Megatron's moe_aux_loss_coeff: weight of the MoE load-balancing loss (summed over MoE layers) in loss();
        # 0 = not computed
        self.moe_aux_loss_coeff = float(moe_aux_loss_coeff)
        # loss positions per chunk of the fused linear cross-entropy
        self.ce_chunk_tokens = ce_chunk_rows(cfg.vocab_size)
        # tensor-parallel hook (mlite.runtime.parallel.tp): None = linear_cross_entropy over the whole vocabulary
        self.cross_entropy = None
        self.embed = nn.Embedding(cfg.vocab_size, cfg.hidden_size, **kw)
        self.blocks = nn.ModuleList()
        for layer in spec.main_layers:
            names = {g.name for g in layer.groups}
            self.blocks.append(DecoderBlock(cfg, layer.attention, layer.mlp, names, index=layer.index, **kw))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, zero_centered=cfg.zero_centered_norm, **kw)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False, **kw)
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.embed.weight
        self._check_against_spec()

    # ------------------------------------------------------------------ structure
    @staticmethod
    def hf_key(name: str) -> str:
        """Lite parameter name -> transformers checkpoint name."""
        if name.startswith("embed."):
            return "model.embed_tokens." + name[len("embed.") :]
        if name.startswith("blocks."):
            return "model.layers." + name[len("blocks.") :]
        if name.startswith("norm."):
            return "model." + name
        return name

    def _check_against_spec(self) -> None:
        """Every tensor of the spec (MTP excluded) is built with the same name and size, and nothing else."""
        want = {}
        for g in self.spec.pre + self.spec.post:
            want[g.name] = g.numel
        for layer in self.spec.main_layers:
            for g in layer.groups:
                want[f"model.layers.{layer.index}.{g.name}"] = g.numel
        got = {self.hf_key(n): p.numel() for n, p in self.named_parameters()}
        if got != want:
            missing = sorted(set(want) - set(got))[:3]
            extra = sorted(set(got) - set(want))[:3]
            sizes = sorted(n for n in set(got) & set(want) if got[n] != want[n])[:3]
            raise MliteError(
                f"model '{self.spec.name}': the lite {self.config.architecture} model does not match "
                f"the checkpoint inventory (missing {missing}, unexpected {extra}, size differs "
                f"{sizes}); this config variant is not supported by the lite runtime"
            )

    def expert_modules(self) -> list[Experts]:
        """The routed-expert modules (to shard over the expert-data-parallel mesh)."""
        return [m for m in self.modules() if isinstance(m, Experts)]

    def num_params(self) -> int:
        """Parameters (tied weights once)."""
        return sum(p.numel() for p in self.parameters())

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """HF initialisation, in module order (deterministic under a fixed seed)."""
        std = self.config.initializer_range
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Conv1d)):
                m.weight.normal_(0.0, std)
                if m.bias is not None:
                    m.bias.zero_()
            elif isinstance(m, (nn.Embedding, Router)):
                m.weight.normal_(0.0, std)
            elif isinstance(m, Experts):
                m.reset_parameters(std)
            elif isinstance(m, (RMSNorm, GatedRMSNorm)):
                m.reset_parameters()
            elif isinstance(m, GatedDeltaNet):
                m.dt_bias.fill_(1.0)
                m.A_log.copy_(torch.empty_like(m.A_log).uniform_(1e-4, 16).log())

    def hf_state_dict(self) -> dict[str, torch.Tensor]:
        """Parameters under transformers names (``lm_head.weight`` included when tied)."""
        out: dict[str, torch.Tensor] = {self.hf_key(n): p for n, p in self.named_parameters()}
        if self.config.tie_word_embeddings:
            out["lm_head.weight"] = self.embed.weight
        return out

    @torch.no_grad()
    def load_hf_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Copy transformers-named tensors in (same shapes; extra keys such as MTP or rotary buffers ignored)."""
        for n, p in self.named_parameters():
            key = self.hf_key(n)
            if key not in state:
                raise MliteError(f"load_hf_state_dict: '{key}' is missing from the given state dict")
            src = state[key]
            if tuple(src.shape) != tuple(p.shape):
                raise MliteError(
                    f"load_hf_state_dict: '{key}' has shape {tuple(src.shape)}, the lite model expects {tuple(p.shape)}"
                )
            p.copy_(src.to(device=p.device, dtype=p.dtype))

    # ------------------------------------------------------------------ forward
    def _run(self, input_ids, position_ids, cu_seqlens, lengths):
        T = input_ids.shape[0]
        pack = PackInfo.build(T, input_ids.device, cu_seqlens, lengths)
        if position_ids is None:
            position_ids = pack.seq_pos()
        x = self.embed(input_ids)
        rope = self.config.rope.cos_sin(position_ids, x.dtype)
        want_aux = self.moe_aux_loss_coeff > 0
        auxes = []
        full = self.config.recompute == "full" and torch.is_grad_enabled()
        for block in self.blocks:
            if full:
                x, aux = checkpoint(block, x, rope, pack, want_aux, use_reentrant=False)
            else:
                x, aux = block(x, rope, pack, want_aux)
            if aux is not None:
                auxes.append(aux)
        aux = torch.stack(auxes).sum() if auxes else None
        return self.norm(x), aux

    def forward(
        self,
        input_ids,
        position_ids: torch.Tensor | None = None,
        cu_seqlens: torch.Tensor | None = None,
        *,
        lengths=None,
        return_hidden: bool = False,
    ):
        """Two calling forms, both through ``nn.Module.__call__`` (so FSDP2's forward hooks always run):

        * ``model(input_ids[T], position_ids[T] | None, cu_seqlens[N+1] | None, lengths=None, return_hidden=False)``
          -> logits ``[T, V]`` (param dtype), or the final-norm hidden states ``[T, h]`` with ``return_hidden``.
          ``position_ids`` None restarts at each sequence; ``cu_seqlens`` None means one sequence; host ``lengths``
          avoid a device sync on ``cu_seqlens``.
        * ``model(batch: PackedBatch)`` -> ``(loss_sum, num_tokens)``, see :meth:`loss`.
        """
        if isinstance(input_ids, PackedBatch):
            return self._loss(input_ids)
        if input_ids.dim() != 1:
            raise MliteError(f"input_ids: expected a packed 1-D tensor [T], got shape {tuple(input_ids.shape)}")
        hidden, _ = self._run(input_ids, position_ids, cu_seqlens, lengths)
        return hidden if return_hidden else self.lm_head(hidden)

    def forward_batch(self, batch: PackedBatch, *, return_hidden: bool = False):
        """Logits (or hidden states) of a :class:`PackedBatch` (no device sync for its lengths)."""
        return self(
            batch.input_ids, batch.position_ids, batch.cu_seqlens, lengths=batch.lengths, return_hidden=return_hidden
        )

    def loss(self, batch: PackedBatch) -> tuple[torch.Tensor, int]:
        """``(loss_sum, num_tokens)``: fp32 sum of next-token cross-entropies over positions whose label is not
        -100 and whose ``loss_mask`` is True, and the count of those positions (the caller normalises, e.g. by the
        global token count over micro-batches and DP ranks). With ``moe_aux_loss_coeff > 0`` the sum also holds
        ``coeff * aux * num_tokens`` (aux = load-balancing losses summed over the MoE layers, as Megatron's
        ``moe_aux_loss_coeff``), so that dividing by the token count gives ``CE + coeff * aux``.
        Same as ``model(batch)``: it runs through ``__call__``, so an FSDP2-wrapped model gathers its root
        parameters (embedding, final norm, lm_head) as for any forward."""
        return self(batch)

    def _loss(self, batch: PackedBatch) -> tuple[torch.Tensor, int]:
        hidden, aux = self._run(batch.input_ids, batch.position_ids, batch.cu_seqlens, batch.lengths)
        targets = batch.targets()
        if targets.device.type == "cpu" and targets.numel() and int(targets.max()) >= self.config.vocab_size:
            raise MliteError(
                f"PackedBatch.labels: label {int(targets.max())} is outside the vocabulary "
                f"(vocab_size {self.config.vocab_size})"
            )
        sel, n = batch.loss_index(), batch.num_loss_tokens()
        ce = linear_cross_entropy if self.cross_entropy is None else self.cross_entropy
        loss = ce(hidden.index_select(0, sel), self.lm_head.weight, targets.index_select(0, sel), self.ce_chunk_tokens)
        if aux is not None:
            loss = loss + self.moe_aux_loss_coeff * aux.float() * n
        return loss, n


def build_lite_model(
    spec,
    *,
    param_dtype: torch.dtype = torch.float32,
    device="cpu",
    seed: int = 0,
    recompute: str = "none",
    moe_aux_loss_coeff: float = 0.0,
) -> LiteModel:
    """Build the lite model for ``spec`` (a ModelSpec, or a ``data/models`` name / path / dict).

    Weights are initialised on CPU in fp32 from ``seed`` (HF scheme; the global RNG is left untouched), then moved
    to ``device`` and cast to ``param_dtype``, so CPU and GPU runs start from the same weights. The packed-attention
    and expert-GEMM paths are chosen here for ``device`` and ``param_dtype`` (``config.packed_attention``,
    ``config.expert_path``). ``device="meta"``
    builds shapes only (no memory, no init: call :meth:`LiteModel.reset_parameters` after materialising).
    """
    from ...models import ModelSpec, from_hf_config

    if not isinstance(spec, ModelSpec):
        spec = from_hf_config(spec)
    device = torch.device(device)
    cfg = dataclasses.replace(
        lite_config(spec, recompute),
        packed_attention=packed_path(device, param_dtype),
        expert_path=expert_path(device, param_dtype),
    )
    if device.type == "meta":
        return LiteModel(spec, cfg, moe_aux_loss_coeff=moe_aux_loss_coeff, device="meta", dtype=param_dtype)
    model = LiteModel(spec, cfg, moe_aux_loss_coeff=moe_aux_loss_coeff, device="meta", dtype=torch.float32)
    model.to_empty(device="cpu")
    if cfg.tie_word_embeddings:  # to_empty breaks the tie
        model.lm_head.weight = model.embed.weight
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        model.reset_parameters()
    return model.to(device=device, dtype=param_dtype)
