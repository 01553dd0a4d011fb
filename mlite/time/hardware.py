"""Hardware profiles: what one GPU, its node and its network can do, as data.

A profile is a JSON object with every field of :class:`HardwareProfile` (``sources`` says where each vendor figure
comes from; ``measured`` what ``mlite calibrate`` measured on the user's machine). The shipped profiles are
``data/hardware/{A100,H100,H200,B200}.json``; ``mlite time --hardware`` takes one of their names or the path of a
profile file (``mlite calibrate --out PROFILE.json`` writes one). A missing, unknown or non-positive field is refused
in one line that names it.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from ..errors import MliteError


@dataclass(frozen=True, kw_only=True)
class HardwareProfile:
    """One GPU model in its node: peak rates, bandwidths and the efficiencies the time model applies to them."""

    name: str
    """Display name (``H200``, or what ``mlite calibrate`` saw: ``NVIDIA H200 (calibrated)``)."""
    peak_bf16_flops: float
    """Dense bf16 tensor-core peak, FLOP/s (vendor datasheet, no 2:4 sparsity)."""
    peak_fp8_flops: float
    """Dense fp8 tensor-core peak, FLOP/s (0 where the GPU has none)."""
    hbm_bytes_per_s: float
    """Device memory bandwidth, bytes/s (vendor figure; calibrate: a measured device-to-device copy, read + write)."""
    memory_gib: float
    """Device memory, GiB."""
    nvlink_bytes_per_s: float
    """NVLink bandwidth per GPU, one direction, bytes/s (inside the node)."""
    network_bytes_per_s: float
    """Inter-node (InfiniBand / RoCE) bandwidth per GPU, one direction, bytes/s."""
    pcie_bytes_per_s: float
    """Host <-> device bandwidth per GPU (pinned memory), bytes/s."""
    gpus_per_node: int
    """GPUs per node (NVLink domain)."""
    gemm_efficiency: float
    """Share of the bf16 peak a large GEMM reaches (calibrate: fitted to GEMMs at the model's shapes)."""
    gemm_overhead_s: float
    """Fixed cost of one GEMM beyond its FLOPs (launch, tile and wave quantisation), seconds."""
    grouped_gemm_efficiency: float
    """Share of the bf16 peak the routed experts' grouped GEMM reaches at large token groups."""
    attention_efficiency: float
    """Share of the bf16 peak the flash-attention forward kernel reaches (its FLOPs: 4 x tokens x context x heads x d)."""
    attention_bwd_efficiency: float
    """Share of the bf16 peak the flash-attention backward kernel reaches (its FLOPs: 2.5 x the forward's)."""
    elementwise_efficiency: float
    """Share of ``hbm_bytes_per_s`` that norms, activations, rotary, residual adds and the loss reach."""
    kernel_launch_s: float
    """Host time to launch one kernel (eager PyTorch); a layer is never faster than its launches."""
    comm_efficiency: float
    """Share of the link bandwidth an NCCL ring collective reaches (bus bandwidth / link bandwidth)."""
    comm_latency_s: float
    """Fixed cost of one collective or point-to-point transfer, seconds."""
    host_adam_params_per_s: float
    """Parameters per second the host (CPU) Adam update of one GPU's offloaded shard runs at."""
    host_memory_gib: float
    """Host RAM per node, GiB."""
    recompute_selective_host_s: float = 0.0
    """Host seconds per layer and micro-batch that selective recompute costs beyond its GPU work (the lite
    runtime's checkpointing; ``mlite calibrate``'s layer anchor; 0: none known)."""
    recompute_full_host_s: float = 0.0
    """The same for full recompute."""
    fsdp_layer_host_s: float = 0.0
    """Host seconds per layer and micro-batch of FSDP2's hooks (the unit's gathers and reduce-scatters launched
    tensor by tensor) beyond the copies they make (``mlite calibrate``'s layer anchor; 0: none known)."""
    optimizer_layer_host_s: float = 0.0
    """dist_opt: seconds per decoder layer and step that the runtime's optimizer step + ``zero_grad`` take beyond
    the HBM bytes of the update (host work per tensor, the waits; ``mlite calibrate``'s optimizer anchor)."""
    optimizer_step_host_s: float = 0.0
    """dist_opt: the same once per step (the norm, the clip, the syncs, the embedding and head tensors)."""
    fsdp_optimizer_layer_host_s: float = 0.0
    """fsdp2: seconds per decoder layer and step of the optimizer step + ``zero_grad`` beyond the update's bytes."""
    fsdp_optimizer_step_host_s: float = 0.0
    """fsdp2: the same once per step."""
    host_floor_layer_s: float = 0.0
    """Host seconds one decoder layer's forward + backward takes to issue in the lite runtime (dist_opt, no
    recompute), measured where the GPU work is negligible (``mlite calibrate``'s host-floor anchor at a few tokens):
    a micro-batch is never faster than its host floor, however little the GPU does (0: none known). It is the
    calibrated model's layer kind."""
    host_floor_microbatch_s: float = 0.0
    """Host seconds per micro-batch outside the decoder layers (embedding, head, loss, the runtime's own work), the
    same anchor's intercept."""
    host_floor_selective_s: float = 0.0
    """Host-floor seconds per layer that selective recompute adds (the same anchor with ``recompute=selective``)."""
    host_floor_full_s: float = 0.0
    """Host-floor seconds per layer that full recompute adds."""
    host_floor_fsdp_layer_s: float = 0.0
    """Host-floor seconds per layer that fsdp2's hooks add over dist_opt (the anchor on ``optimizer=fsdp2``)."""
    gdn_efficiency: float = 0.0
    """Share of the bf16 peak the chunked Gated DeltaNet kernel (fla ``chunk_gated_delta_rule``) reaches, its forward
    FLOPs :func:`mlite.models.flops.attention_flops`'s and its backward twice those (0: not known, the flash-attention
    efficiencies apply)."""
    sources: dict = field(default_factory=dict)
    """Field -> where its value comes from (datasheet URL, measurement, documented guess)."""
    measured: dict = field(default_factory=dict)
    """What ``mlite calibrate`` measured (raw rates, shapes, device name); empty for a shipped profile."""

    def to_dict(self) -> dict:
        return asdict(self)


OPTIONAL = (
    "recompute_selective_host_s",
    "recompute_full_host_s",
    "fsdp_layer_host_s",
    "optimizer_layer_host_s",
    "optimizer_step_host_s",
    "fsdp_optimizer_layer_host_s",
    "fsdp_optimizer_step_host_s",
    "host_floor_layer_s",
    "host_floor_microbatch_s",
    "host_floor_selective_s",
    "host_floor_full_s",
    "host_floor_fsdp_layer_s",
    "gdn_efficiency",
)
"""Fields a profile may leave out (their default: nothing known)."""
REQUIRED = tuple(f.name for f in fields(HardwareProfile) if f.name not in ("sources", "measured", *OPTIONAL))
"""The fields a profile file must give."""
_FRACTIONS = (
    "gemm_efficiency",
    "grouped_gemm_efficiency",
    "attention_efficiency",
    "attention_bwd_efficiency",
    "elementwise_efficiency",
    "comm_efficiency",
    "gdn_efficiency",
)
_MAY_BE_ZERO = (
    "peak_fp8_flops",
    "gemm_overhead_s",
    "kernel_launch_s",
    "comm_latency_s",
    "network_bytes_per_s",
    *OPTIONAL,
)


def hardware_dir() -> Path:
    """The folder of the shipped profiles."""
    from ..paths import data_dir

    return data_dir() / "hardware"


def hardware_names() -> list[str]:
    """The shipped profile names (file stems)."""
    d = hardware_dir()
    return sorted(p.stem for p in d.glob("*.json")) if d.is_dir() else []


DEFAULT_HARDWARE = "H200"
"""The profile a speed ranking or a launcher's predicted step uses when neither the hardware nor a GPU name with a
shipped profile is given."""


def hardware_for_gpu(gpu, default: str = DEFAULT_HARDWARE) -> str:
    """The shipped profile's name for a ``--gpu-mem`` value that names a GPU with one (``h100`` -> ``H100``), else
    ``default`` (a number of GiB, a GPU without a profile, None)."""
    by_upper = {n.upper(): n for n in hardware_names()}
    return by_upper.get(str(gpu).upper(), default) if gpu is not None else default


def profile_from_dict(doc, where: str) -> HardwareProfile:
    """A checked profile from a JSON object (``where`` names the file in messages)."""
    if not isinstance(doc, dict):
        raise MliteError(f"{where}: a hardware profile is a JSON object with the fields {', '.join(REQUIRED)}")
    missing = [k for k in REQUIRED if k not in doc]
    if missing:
        raise MliteError(
            f"{where}: missing field {missing[0]!r} ({len(missing)} missing); a profile gives every one of "
            f"{', '.join(REQUIRED)} (mlite calibrate --out writes a complete one)"
        )
    known = set(REQUIRED) | set(OPTIONAL) | {"sources", "measured"}
    unknown = sorted(set(doc) - known)
    if unknown:
        raise MliteError(f"{where}: unknown field {unknown[0]!r}; the fields are {', '.join(sorted(known))}")
    values: dict[str, Any] = {}
    for k in (*REQUIRED, *(o for o in OPTIONAL if o in doc)):
        v = doc[k]
        if k == "name":
            if not isinstance(v, str) or not v.strip():
                raise MliteError(f"{where}: field 'name' must be a non-empty string")
            values[k] = v
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise MliteError(f"{where}: field {k!r} = {v!r} must be a finite number")
        if v < 0 or (v == 0 and k not in _MAY_BE_ZERO):
            raise MliteError(f"{where}: field {k!r} = {v!r} must be positive")
        if k in _FRACTIONS and v > 1:
            raise MliteError(f"{where}: field {k!r} = {v!r} is a share of a peak: give a number in (0, 1]")
        if k == "gpus_per_node":
            if int(v) != v:
                raise MliteError(f"{where}: field 'gpus_per_node' = {v!r} must be a whole number")
            v = int(v)
        values[k] = float(v) if k != "gpus_per_node" else v
    for k in ("sources", "measured"):
        v = doc.get(k, {})
        if not isinstance(v, dict):
            raise MliteError(f"{where}: field {k!r} must be a JSON object")
        values[k] = v
    return HardwareProfile(**values)


def load_hardware(name_or_path: str | Path | HardwareProfile) -> HardwareProfile:
    """A shipped profile by name (case-insensitive: ``H200``) or a profile file's path."""
    if isinstance(name_or_path, HardwareProfile):
        return name_or_path
    text = str(name_or_path)
    names = hardware_names()
    by_upper = {n.upper(): n for n in names}
    if text.upper() in by_upper:
        path = hardware_dir() / f"{by_upper[text.upper()]}.json"
    else:
        path = Path(text).expanduser()
        if not path.is_file():
            raise MliteError(
                f"--hardware {text!r}: not a shipped profile ({', '.join(names)}) nor a profile file; give one of "
                "those names or the path mlite calibrate --out wrote"
            )
    try:
        doc = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as e:
        raise MliteError(f"{path}: cannot read the hardware profile ({e.__class__.__name__}); check the path") from None
    except json.JSONDecodeError as e:
        raise MliteError(f"{path}: not JSON (line {e.lineno}: {e.msg}); a profile is one JSON object") from None
    return profile_from_dict(doc, str(path))


def add_hardware_flag(p, *, default: str | None, also: str = "") -> None:
    """``--hardware NAME|PROFILE.json`` (``mlite time``, ``mlite mesh --list``, ``mlite export``), read by
    :func:`mlite.time.hardware.load_hardware`; ``also``: what the flag does besides in this command."""
    p.add_argument(
        "--hardware",
        default=default,
        metavar="NAME|PROFILE.json",
        help=f"a shipped profile ({', '.join(hardware_names())}) or a profile file from mlite calibrate --out{also}",
    )
