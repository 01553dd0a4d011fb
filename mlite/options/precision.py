"""The training precision profiles (``--precision``), named as Megatron Lite's ``MegatronLiteConfig.precision``
names them, and what each stores and needs.

Sources (ISEEKYAN/Megatron-LM, ``experimental/lite/``):

- ``megatron/lite/primitive/precision/hopper_blockwise.py`` @ 472a276f: ``PRECISION_NAMES = ("bf16",
  "hopper_blockwise_bf16_weight", "hopper_blockwise_fp8_weight")``; both Hopper profiles share one frozen TE
  ``Float8BlockScaling`` recipe (E4M3, 1x128 activation / gradient blocks, 128x128 weight blocks) and one
  ``ParameterContract``: FP32 master (owned by the mlite optimizer), FP32 main gradient, FP32 optimizer state, BF16
  parameter all-gather; they differ only in the compute-weight storage (BF16, or ``fp8_blockwise_e4m3``).
  ``require_optimizer_supports_precision`` lets FP8 compute weights train under ``fsdp2`` only
  (``FP8_WEIGHT_SUPPORTED_OPTIMIZERS``; the file's version that has it, read by its content: the distributed
  optimizer "would silently update only the BF16-gathered parameters while the FP8 compute weights stay stale").
- ``docs/hopper-blockwise-fp8-contract.md`` @ 25f24492: FP8-weight construction under TE ``quantized_model_init``
  with ``preserve_high_precision_init_val=True``, the temporary high-precision value "cleared" once the FP32 master
  is made (so no BF16 copy is kept); non-GEMM parameters BF16; "``pp>1``, ``cp>1``, CUDA graph ... unsupported
  combination"; "lower-precision optimizer state is requested -> unsupported-combination error"; TE's
  ``check_fp8_block_scaling_support`` (SM90 or later) is the device gate.
- ``docs/feature-composability.md`` @ 3565ae5c: the first Hopper FP8 strategies require ``cp=1``.
- ``docs/fp8-training-design.md`` @ 3412bffa: MXFP8 (1x32 blocks, E8M0 scales) is native on SM100+ Blackwell and a
  later stage ("MXFP8 when TE reports no support or the device is below SM100" is rejected); the fork ships no
  MXFP8 training profile yet, so ``mxfp8_fp8_weight`` is this kit's name for that stage, with the same parameter
  contract as the Hopper FP8-weight profile.
- Transformer Engine ``docs/features/low_precision_training/performance_considerations``: on Hopper an FP8
  tensor's columnwise usage (the weight in the backward's input-gradient GEMM) is a physically transposed copy;
  MXFP8 quantizes rows and columns separately (both "made from the high-precision source", design doc), so an
  FP8 weight that trains holds a second, columnwise copy with its own scales (:attr:`Profile.columnwise`).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import MliteError


@dataclass(frozen=True)
class Profile:
    """One precision profile."""

    name: str
    """Its name (``MegatronLiteConfig.precision``)."""
    help: str
    """A few words for ``--help``."""
    weights: str = "bf16"
    """Compute-weight storage of the GEMM weights: ``bf16``, ``blockwise`` (E4M3, fp32 scale per 128x128 block) or
    ``mxfp8`` (E4M3, E8M0 scale per 1x32 row block)."""
    min_sm: int = 0
    """Lowest compute capability (major x 10 + minor) it runs on; 0: any."""
    max_cp: int | None = None
    """Largest context parallel size it has been validated with (None: no limit)."""
    max_pp: int | None = None
    """Largest pipeline parallel size it has been validated with (None: no limit)."""
    fp32_state: bool = False
    """Its parameter contract fixes FP32 master, main gradients and optimizer state."""
    columnwise: bool = False
    """FP8 weights keep a columnwise copy (Hopper: the transpose; MXFP8: the column-quantized values) with its
    scales, besides the rowwise data."""
    source: str = ""
    """Where its rules come from (file @ commit)."""

    @property
    def fp8_weights(self) -> bool:
        return self.weights != "bf16"


_HOPPER = "ISEEKYAN/Megatron-LM experimental/lite/docs/hopper-blockwise-fp8-contract.md @ 25f24492"
PROFILES: dict[str, Profile] = {
    p.name: p
    for p in (
        Profile("bf16", "BF16 (no managed precision; the default)"),
        Profile(
            "hopper_blockwise_bf16_weight",
            "Hopper blockwise E4M3 GEMMs, BF16 compute weights",
            min_sm=90,
            max_cp=1,
            max_pp=1,
            fp32_state=True,
            source=_HOPPER,
        ),
        Profile(
            "hopper_blockwise_fp8_weight",
            "Hopper blockwise E4M3 GEMMs, FP8 compute weights (128x128 blocks, fp32 scales)",
            weights="blockwise",
            min_sm=90,
            max_cp=1,
            max_pp=1,
            fp32_state=True,
            columnwise=True,
            source=_HOPPER,
        ),
        Profile(
            "mxfp8_fp8_weight",
            "MXFP8 GEMMs, FP8 compute weights (1x32 blocks, E8M0 scales; Blackwell, the design's later stage)",
            weights="mxfp8",
            min_sm=100,
            fp32_state=True,
            columnwise=True,
            source="ISEEKYAN/Megatron-LM experimental/lite/docs/fp8-training-design.md @ 3412bffa",
        ),
    )
}
"""The profiles by name."""

PRECISIONS = tuple(PROFILES)
"""``--precision`` choices."""

GPU_SM = {
    "H100": 90,
    "H200": 90,
    "B200": 100,
    "B300": 103,
    "GB200": 100,
    "A100": 80,
    "A100-40": 80,
    "L40S": 89,
    "MI300X": 0,
}
"""Compute capability (major x 10 + minor) of the GPUs in :data:`mlite.options.training.GPU_MEMORY_GIB` (NVIDIA's
CUDA GPU table: Hopper 9.0, Blackwell B200/GB200 10.0, B300 10.3, Ampere 8.0, Ada 8.9); 0: not an NVIDIA GPU (no
Transformer Engine FP8 recipe)."""


def profile(name: str) -> Profile:
    """The profile named ``name``; an unknown name is refused naming the choices."""
    try:
        return PROFILES[name]
    except KeyError:
        raise MliteError(f"precision: {name!r} is not a profile; use {', '.join(PRECISIONS)}") from None
