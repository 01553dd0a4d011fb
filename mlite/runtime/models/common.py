"""Building blocks shared by every lite model: RMSNorm, rotary embeddings (partial too), SwiGLU, packing metadata.

Layout convention: activations are packed token-major ``[T, ...]`` (no batch dimension); the sequences in the
stream are described by :class:`PackInfo`, built once per forward and shared by every layer.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from ...errors import MliteError


# ---------------------------------------------------------------------- packing metadata
@dataclass(eq=False)
class PackInfo:
    """Sequence boundaries of one packed forward, with index tensors cached for the layers that need them."""

    lengths: tuple[int, ...]
    """Sequence lengths (host ints, so layers never sync on the device)."""
    cu_seqlens: torch.Tensor
    """``int32[N+1]`` cumulative lengths on the activations' device."""
    cache: dict = field(default_factory=dict, repr=False)
    """Per-forward cache of derived index tensors (within-sequence index, GDN chunk layout, masks)."""

    @classmethod
    def build(cls, num_tokens: int, device, cu_seqlens: torch.Tensor | None = None, lengths=None) -> PackInfo:
        """From ``lengths`` (host) or ``cu_seqlens`` (one device sync), or a single sequence when both are None."""
        if lengths is None:
            if cu_seqlens is None:
                lengths = (num_tokens,)
            else:
                cu = [int(x) for x in cu_seqlens.tolist()]
                lengths = tuple(b - a for a, b in itertools.pairwise(cu))
        lengths = tuple(int(n) for n in lengths)
        if sum(lengths) != num_tokens or min(lengths) <= 0:
            raise MliteError(
                f"cu_seqlens: sequence lengths {lengths[:8]}... must be positive and sum to the "
                f"{num_tokens} tokens of input_ids"
            )
        if cu_seqlens is None:
            cu = [0]
            for n in lengths:
                cu.append(cu[-1] + n)
            cu_seqlens = torch.tensor(cu, dtype=torch.int32).to(device)
        return cls(lengths=lengths, cu_seqlens=cu_seqlens.to(device=device, dtype=torch.int32))

    @property
    def num_tokens(self) -> int:
        return sum(self.lengths)

    @property
    def num_sequences(self) -> int:
        return len(self.lengths)

    @property
    def max_seqlen(self) -> int:
        return max(self.lengths)

    @property
    def equal_lengths(self) -> bool:
        """All sequences have the same length (one batched attention call covers them)."""
        return len(set(self.lengths)) == 1

    @property
    def device(self) -> torch.device:
        return self.cu_seqlens.device

    def seq_pos(self) -> torch.Tensor:
        """``long[T]``: index of each token inside its own sequence (0 at every sequence start)."""
        if "seq_pos" not in self.cache:
            T, dev = self.num_tokens, self.device
            if len(self.lengths) == 1:
                pos = torch.arange(T, device=dev)
            else:
                lens = torch.tensor(self.lengths, device=dev)
                starts = torch.repeat_interleave(self.cu_seqlens[:-1].long(), lens, output_size=T)
                pos = torch.arange(T, device=dev) - starts
            self.cache["seq_pos"] = pos
        return self.cache["seq_pos"]

    def seq_ids(self) -> torch.Tensor:
        """``long[T]``: which sequence each token belongs to."""
        if "seq_ids" not in self.cache:
            lens = torch.tensor(self.lengths, device=self.device)
            self.cache["seq_ids"] = torch.repeat_interleave(
                torch.arange(len(self.lengths), device=self.device), lens, output_size=self.num_tokens
            )
        return self.cache["seq_ids"]


# ---------------------------------------------------------------------- norms
class RMSNorm(nn.Module):
    """RMSNorm over the last dimension, computed in fp32.

    ``zero_centered=True`` is the Qwen3-Next / Qwen3.5 form: the stored weight starts at 0 and the scale is
    ``1 + weight`` (so weight decay pulls it towards identity).
    """

    def __init__(self, dim: int, eps: float = 1e-6, *, zero_centered: bool = False, device=None, dtype=None):
        super().__init__()
        self.eps = float(eps)
        self.zero_centered = zero_centered
        self.weight = nn.Parameter(torch.empty(dim, device=device, dtype=dtype))

    def reset_parameters(self) -> None:
        with torch.no_grad():
            self.weight.fill_(0.0 if self.zero_centered else 1.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.zero_centered:  # 1 + w in fp32: a bf16 weight near 0 would lose its low bits in 1 + w
            y = F.rms_norm(x.float(), (x.shape[-1],), self.weight.float() + 1.0, self.eps)
            return y.to(x.dtype)
        # PyTorch's rms_norm accumulates in fp32 for bf16 / fp16 inputs (one fused kernel on CUDA)
        return F.rms_norm(x, (x.shape[-1],), self.weight.to(x.dtype), self.eps)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}, zero_centered={self.zero_centered}"


class GatedRMSNorm(nn.Module):
    """Gated DeltaNet output norm: ``weight * rmsnorm(x) * silu(gate)`` per head (weight starts at 1)."""

    def __init__(self, dim: int, eps: float = 1e-6, *, device=None, dtype=None):
        super().__init__()
        self.eps = float(eps)
        self.weight = nn.Parameter(torch.empty(dim, device=device, dtype=dtype))

    def reset_parameters(self) -> None:
        with torch.no_grad():
            self.weight.fill_(1.0)

    def forward(self, x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        y = F.rms_norm(x.float(), (x.shape[-1],), None, self.eps)
        y = y * self.weight.float() * F.silu(gate.float())
        return y.to(x.dtype)


# ---------------------------------------------------------------------- rotary embeddings
@dataclass(frozen=True)
class RopeConfig:
    """Rotary embedding settings read from a Hugging Face config."""

    head_dim: int
    """Full head dimension."""
    rotary_dim: int
    """Leading dimensions of each head that rotate (``head_dim * partial_rotary_factor``)."""
    theta: float
    """Base frequency (``rope_theta``)."""
    rope_type: str = "default"
    """``default``, ``linear`` or ``llama3``."""
    scaling: tuple = ()
    """Scaling parameters as sorted (key, value) pairs."""

    def inv_freq(self, device=None) -> torch.Tensor:
        """``float32[rotary_dim/2]`` inverse frequencies (computed on the fly: no buffer to materialise)."""
        d = self.rotary_dim
        inv = 1.0 / (self.theta ** (torch.arange(0, d, 2, dtype=torch.int64, device=device).float() / d))
        s = dict(self.scaling)
        if self.rope_type == "linear":
            inv = inv / float(s["factor"])
        elif self.rope_type == "llama3":
            factor, low, high = (
                float(s["factor"]),
                float(s.get("low_freq_factor", 1.0)),
                float(s.get("high_freq_factor", 4.0)),
            )
            old = float(s.get("original_max_position_embeddings", 8192))
            low_wavelen, high_wavelen = old / low, old / high
            wavelen = 2 * math.pi / inv
            scaled = torch.where(wavelen > low_wavelen, inv / factor, inv)
            smooth = (old / wavelen - low) / (high - low)
            smoothed = (1 - smooth) * scaled / factor + smooth * scaled
            medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
            inv = torch.where(medium, smoothed, scaled)
        return inv

    def cos_sin(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """``cos, sin`` of shape ``[T, rotary_dim]`` for integer ``positions[T]`` (computed in fp32)."""
        freqs = positions.float()[:, None] * self.inv_freq(positions.device)[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(dtype), emb.sin().to(dtype)


SUPPORTED_ROPE_TYPES = ("default", "linear", "llama3")


def rope_config(cfg: dict, head_dim: int, default_partial: float = 1.0) -> RopeConfig:
    """Read ``rope_theta`` / ``rope_scaling`` / ``rope_parameters`` / ``partial_rotary_factor`` (old and new keys)."""
    params = dict(cfg.get("rope_parameters") or {})
    scaling = dict(cfg.get("rope_scaling") or {})
    theta = params.get("rope_theta", cfg.get("rope_theta", 10000.0))
    partial = params.get("partial_rotary_factor", cfg.get("partial_rotary_factor", default_partial))
    rope_type = scaling.get("rope_type", scaling.get("type", params.get("rope_type", "default"))) or "default"
    if rope_type not in SUPPORTED_ROPE_TYPES:
        raise MliteError(
            f"rope_scaling.rope_type: '{rope_type}' is not supported by the lite runtime (supported: "
            f"{', '.join(SUPPORTED_ROPE_TYPES)}); remove the scaling for debug runs"
        )
    rotary_dim = int(head_dim * float(partial))
    if rotary_dim % 2 or rotary_dim <= 0:
        raise MliteError(
            f"partial_rotary_factor: {partial} x head_dim {head_dim} gives {rotary_dim} rotary "
            "dimensions; it must be a positive even number"
        )
    src = scaling if scaling else params
    keep = tuple(
        sorted(
            (k, v)
            for k, v in src.items()
            if k in ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")
        )
    )
    return RopeConfig(head_dim=head_dim, rotary_dim=rotary_dim, theta=float(theta), rope_type=rope_type, scaling=keep)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate the leading ``cos.shape[-1]`` dims of ``x[T, H, D]`` (half-split convention, as in HF Llama/Qwen)."""
    r = cos.shape[-1]
    cos, sin = cos[:, None, :], sin[:, None, :]
    if r == x.shape[-1]:
        return x * cos + rotate_half(x) * sin
    x_rot, x_pass = x[..., :r], x[..., r:]
    return torch.cat((x_rot * cos + rotate_half(x_rot) * sin, x_pass), dim=-1)


# ---------------------------------------------------------------------- MLP
class SwiGLU(nn.Module):
    """``down(silu(gate(x)) * up(x))`` with HF names ``gate_proj``, ``up_proj``, ``down_proj``."""

    def __init__(self, hidden: int, ffn: int, *, bias: bool = False, device=None, dtype=None):
        super().__init__()
        kw = dict(bias=bias, device=device, dtype=dtype)
        self.gate_proj = nn.Linear(hidden, ffn, **kw)
        self.up_proj = nn.Linear(hidden, ffn, **kw)
        self.down_proj = nn.Linear(ffn, hidden, **kw)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


def init_linear(module: nn.Linear, std: float) -> None:
    """HF initialisation: normal(0, std) weight, zero bias."""
    with torch.no_grad():
        module.weight.normal_(0.0, std)
        if module.bias is not None:
            module.bias.zero_()
