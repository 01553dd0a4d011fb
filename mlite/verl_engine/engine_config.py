"""``LiteEngineConfig``: verl's engine config for ``engine=lite`` (the ``_target_`` of ``conf/engine/lite.yaml``).

The fields are verl_mlite's ``engine/mlite.yaml`` fields (so a ``verl-mlite-sft`` launcher's engine keys work
unchanged with ``engine=lite``); what each means for the lite runtime is :data:`mlite.options.table.LITE_ENGINE_KEYS`.
Imports verl: only the verl plugin uses it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from verl.workers.config.engine import EngineConfig

__all__ = ["LiteEngineConfig"]


@dataclass
class LiteEngineConfig(EngineConfig):
    """verl engine config of the lite runtime (keys as verl_mlite's engine/mlite.yaml)."""

    strategy: str = "lite"
    """verl's engine backend name (the EngineRegistry key)."""
    grad_offload: bool = False
    """Runtime context offload of gradients (they move with their FSDP2 parameters: needs param_offload)."""
    dtype: str = "auto"
    """Parameter storage dtype: auto (bf16 on CUDA or with PAO, else fp32), bfloat16 or float32."""
    export_dtype: str = "bfloat16"
    """Dtype of exported weights (read by RL weight sync; unused by SFT)."""
    model_name: str = "auto"
    """Model family; auto reads it from the HF config."""
    impl: str = "lite"
    """Megatron Lite implementation; the lite runtime implements ``lite``."""
    tp: int = 1
    """Tensor parallel size."""
    etp: int | None = None
    """Expert tensor parallel size (None: 1; the lite runtime runs 1)."""
    ep: int = 1
    """Expert parallel size."""
    pp: int = 1
    """Pipeline parallel size (the lite runtime runs 1)."""
    vpp: int = 1
    """Virtual pipeline stages (the lite runtime runs 1)."""
    cp: int = 1
    """Context parallel size."""
    attention_backend_override: str = "flash"
    """Attention backend of the real mlite (the lite runtime uses PyTorch SDPA; read and ignored)."""
    router_aux_loss_coef: float | None = None
    """MoE load-balancing loss weight (None: the model default, 0 in the lite runtime)."""
    impl_cfg: dict = field(default_factory=lambda: {"use_thd": True})
    """Implementation knobs: ``optimizer`` (fsdp2; dist_opt is refused), ``recompute``, ``use_thd`` (always THD)."""
