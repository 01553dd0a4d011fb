"""An mfsdp-style optimizer backend on FSDP2 primitives: Megatron-FSDP's storage and its three offload modes.

Megatron Lite's standalone M-FSDP (ISEEKYAN/Megatron-LM ``experimental/lite/megatron/lite/primitive/optimizers/
mfsdp/``; byte accounting: ``experimental/lite/docs/mfsdp-fsdp2-style-cpu-offload-design.md`` @ adcd21d0) keeps,
per local shard element (N shard elements, O offloaded, G = N - O, C = bucket capacity):

=====================  ============================================  ==============================================
offload_fraction       device ("GPU")                                 host
=====================  ============================================  ==============================================
0                      fp32 param shard 4N (the master), fp32         nothing (no ring, no staging)
                       main_grad 4N, moments 8N
0 < f < 1              fp32 param shard 4N, main_grad 4N, moments    fp32 master + moments of the offloaded part 12O,
                       of the device part 8G                          gradient staging
1                      compute-dtype shard mirror (2N bf16), fp32     12N + gradient staging
                       main_grad 4N
=====================  ============================================  ==============================================

Gradient staging (pinned when CUDA is there): ``persistent`` -- one fp32 buffer of all O offloaded elements (today's
``_cpu_grad_bufs``, 4O) -- or ``ring`` -- the design's two slots, ``min(C, O)`` and ``min(C, O - C)`` elements
(4 x min(O, 2C) bytes in all). The offloaded parameters form one flat stream (the split's order); it is updated
slice by slice of at most one slot: the slice's ``main_grad`` pieces are copied into the slot, the fp32 master and
moments of the slice are updated on the host (one step count per parameter, so slicing changes no bit), and the new
parameter is written back into the device shard (fp32 under partial offload; under full offload the
``round_bf16`` of the master, built in the slot's bytes once its gradient is consumed) before the slot is reused.

How it is built on FSDP2 (:mod:`mlite.runtime.fsdp`): ``fully_shard`` with ``MixedPrecisionPolicy(param_dtype=<the
compute dtype>, reduce_dtype=float32)``. For ``offload_fraction < 1`` the sharded parameters are held in fp32 (FSDP2
casts them to the compute dtype when it all-gathers) -- the fp32 parameter shard. Under full offload they stay in the
compute dtype -- the shard mirror. The fp32 ``main_grad`` shard is a buffer of its own, held for the whole run
(``zero_grad`` zeroes it): each FSDP module's ``set_all_reduce_hook`` (public FSDP2 API) keeps a reference to the
fp32 reduce-scatter output, and a post-accumulate-grad hook on every sharded parameter adds its range of that fp32
output (at the storage offset FSDP2 gave the parameter's gradient view) into the parameter's ``main_grad`` and
drops FSDP2's ``.grad`` (which FSDP2 has cast to the parameter dtype: under full offload with bf16 that cast would
lose the fp32 accumulation M-FSDP keeps). What FSDP2 does not give, and this backend therefore does not have:

* M-FSDP's bucketed all-gather of ``bucket_size`` elements and its bounded fp32 fused-wgrad scratch: FSDP2 gathers
  one ``fully_shard`` unit at a time (and prefetches the next); the gather scratch here is FSDP2's, per unit;
* the full-offload parameter lease (a CPU-resident compute shard staged to the GPU per gather): FSDP2's
  ``CPUOffloadPolicy`` moves parameters, gradients and optimizer state together, so the mirror stays on the device,
  as the design doc's steady-state table has it (2N);
* PAO's decoupled bf16 grads (refused by :func:`mlite.options.rules.mfsdp_no_pao_lite`), TP > 1 and EP > 1 (the
  TP partial-gradient sum and the EP divide factors act on ``.grad``; refused in :func:`mlite.runtime.optim.backends.
  mfsdp`), and checkpoints (M-FSDP's ``{"gpu", "cpu"}`` envelope is not written).

The split of ``0 < f < 1`` is the fork's ``_split_param_groups_by_fraction`` (whole tensors in parameter order, the
decay group first, a tensor goes to the host while the count already sent is below ``int(f x total)``; the real
Megatron-FSDP offloads whole tensors, not an element share), over global tensor sizes so that every rank picks the
same tensors; the rule is :func:`mlite.options.optimizers.mfsdp_split_sizes`, which the lite estimate calls as well.

CUDA allocations of the step beyond the steady state: none (the optimizer-only peak is the steady state). Each
unit's fp32 reduce-scatter output is dropped once the unit's last gradient is in ``main_grad`` (not held until the
next unit's hook: the root unit's, the embedding's fp32 gradient, would stay from the end of backward into the step);
the device part's zero count is inside its fused kernel, the host part's runs over the staged host copy.

Under ``--device cpu`` the "device" is the CPU: the device-role tensors are the ones above (parameters,
``main_grad``, device moments), the host-role tensors the master, moments and staging of the offloaded part;
:meth:`MfsdpAdamW.memory` reports them by role.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch

from ...errors import MliteError
from ...options.optimizers import mfsdp_split_sizes
from ..config import OptimizerConfig
from . import fused
from .adamw import AdamWHyper, adamw_inplace, scratch, step_scalars
from .host import bf16_of_master_
from .master import LITTLE_ENDIAN, split_fp32
from .optimizer import CHUNK, ParamSlot, ShardedAdamW, local

HOST_KEYS = ("master", "exp_avg", "exp_avg_sq")
"""Host state tensors of the offloaded part (fp32, flat over the offloaded stream)."""


def mfsdp_split(named: list[tuple[str, torch.Tensor]], fraction: float) -> list[bool]:
    """Which parameters are offloaded for ``offload_fraction = fraction``, in ``named`` order: the fork's whole-tensor
    rule, :func:`mlite.options.optimizers.mfsdp_split_sizes` (the estimator calls the same function)."""
    return mfsdp_split_sizes([p.numel() for _, p in named], [_decay(n, p) for n, p in named], fraction)


def _decay(name: str, p: torch.Tensor) -> bool:
    return not (name.endswith(".bias") or p.dim() == 1)


def slot_sizes(offloaded: int, bucket: int, staging: str) -> list[int]:
    """Element capacities of the gradient staging slots (see the module docstring)."""
    if offloaded <= 0:
        return []
    if staging == "persistent":
        return [offloaded]
    first = min(bucket, offloaded)
    second = min(bucket, offloaded - first)
    return [first, second] if second > 0 else [first]


class _DeviceAdamW(ShardedAdamW):
    """The device-updated part: :class:`ShardedAdamW` reading the fp32 ``main_grad`` shards."""

    def __init__(self, named, cfg, *, expert_names, device, main_grads: dict):
        self._main = main_grads
        super().__init__(named, replace(cfg, offload_fraction=None), expert_names=expert_names, device=device)

    def _grad(self, s: ParamSlot) -> torch.Tensor | None:  # type: ignore[override]  # the parent's is static
        return self._main[s.name]


class MfsdpAdamW:
    """AdamW with Megatron-FSDP's storage over FSDP2 shards (see the module docstring)."""

    def __init__(self, named_params, cfg: OptimizerConfig, *, expert_names: set[str], device):
        self.cfg = cfg
        self.home = torch.device(device)
        named = [(n, p) for n, p in named_params if p.requires_grad]
        flags = mfsdp_split(named, cfg.fraction)
        self.main_grad: dict[str, torch.Tensor] = {
            n: torch.zeros(local(p).numel(), dtype=torch.float32, device=local(p).device) for n, p in named
        }
        """Parameter name -> its fp32 ``main_grad`` shard (flat, the local elements), for the whole run."""
        self.slots: list[ParamSlot] = []
        for (n, p), off in zip(named, flags):
            mode = "param" if p.dtype == torch.float32 else "master"
            self.slots.append(
                ParamSlot(name=n, param=p, expert=n in expert_names, decay=_decay(n, p), offload=off, mode=mode)
            )
        dev_named = [(s.name, s.param) for s in self.slots if not s.offload]
        self.device_opt = (
            _DeviceAdamW(dev_named, cfg, expert_names=expert_names, device=device, main_grads=self.main_grad)
            if dev_named
            else None
        )
        """The device-updated part (None under full offload)."""
        self.host_slots = [s for s in self.slots if s.offload]
        self.host_offsets: list[int] = []
        n = 0
        for s in self.host_slots:
            self.host_offsets.append(n)
            n += local(s.param).numel()
        self.offloaded = n
        """O: local elements updated on the host."""
        self.host_state: dict[str, torch.Tensor] = {}
        self.staging: list[torch.Tensor] = []
        """The pinned gradient staging slots (fp32), allocated with the state."""
        self.step_count = 0
        self.last_zeros: tuple[int, int] = (0, 0)
        self._reduced: torch.Tensor | None = None
        self._pending = 0
        """Gradients of the unit whose reduce-scatter output is ``_reduced`` not yet added into ``main_grad``."""

    # ------------------------------------------------------------------ gradients
    def install_grad_hooks(self, model: torch.nn.Module) -> None:
        """Route every FSDP2 gradient into the fp32 ``main_grad`` shards (see the module docstring)."""
        from torch.distributed.fsdp import FSDPModule

        trainable = {id(s.param) for s in self.slots}
        units = [m for m in model.modules() if isinstance(m, FSDPModule)]
        for m in units:
            inner = {id(p) for u in m.modules() if u is not m and isinstance(u, FSDPModule) for p in u.parameters()}
            own = len({id(p) for p in m.parameters() if id(p) in trainable and id(p) not in inner})
            m.set_all_reduce_hook(self._reduced_hook(own))
        for s in self.slots:
            s.param.register_post_accumulate_grad_hook(self._make_accumulate(s.name))

    def _reduced_hook(self, params: int):
        """FSDP2's all-reduce hook of a unit of ``params`` trainable parameters (see :meth:`_keep_reduced`)."""

        def hook(reduce_output: torch.Tensor) -> None:
            self._keep_reduced(reduce_output, params)

        return hook

    def _keep_reduced(self, reduce_output: torch.Tensor, params: int) -> None:
        """Keep the unit's fp32 reduce-scatter output (divided in place before the views) until the ``params``
        gradients of the unit have been added into ``main_grad``; the last one drops it, so it is freed as soon as
        it is consumed (kept until the next unit's hook, the root unit's -- the embedding's fp32 gradient -- would
        stay allocated from the end of backward into the optimizer step)."""
        if reduce_output.dtype != torch.float32:
            raise RuntimeError(f"mfsdp: FSDP2 reduced the gradients in {reduce_output.dtype}, expected float32")
        if reduce_output.is_cuda:  # read on this (FSDP2's post-reduce) stream: its block is not reused before that
            reduce_output.record_stream(torch.cuda.current_stream())
        self._reduced = reduce_output
        self._pending = params

    def _make_accumulate(self, name: str):
        main = self.main_grad[name]

        def accumulate(p: torch.Tensor) -> None:
            if p.grad is None:
                return
            g = local(p.grad)
            red = self._reduced
            if red is None:
                raise RuntimeError(f"mfsdp: gradient of {name} arrived without FSDP2's reduce-scatter output")
            n = g.numel()
            src = red.view(-1)[g.storage_offset() : g.storage_offset() + n]
            if g.dtype == torch.float32 and g.data_ptr() != src.data_ptr():
                raise RuntimeError(f"mfsdp: gradient of {name} is not a view of the reduce-scatter output")
            if n != main.numel():
                raise RuntimeError(f"mfsdp: gradient of {name} has {n} elements, its shard {main.numel()}")
            main.add_(src)
            p.grad = None
            self._pending -= 1
            if self._pending == 0:  # the unit's last gradient: its reduce-scatter output is consumed
                self._reduced = None

        return accumulate

    def main_grads(self) -> list[torch.Tensor]:
        """The fp32 ``main_grad`` shards (device-resident for the whole run)."""
        self._reduced = None
        return list(self.main_grad.values())

    def zero_main_grad(self) -> None:
        """``zero_grad``: zero the ``main_grad`` shards (they stay allocated, as M-FSDP's buffer does)."""
        self._reduced = None
        for t in self.main_grad.values():
            t.zero_()

    def _grad(self, s: ParamSlot) -> torch.Tensor:
        return self.main_grad[s.name]

    # ------------------------------------------------------------------ state
    @property
    def initialized(self) -> bool:
        return bool(self.host_state) or (self.device_opt is not None and self.device_opt.initialized)

    def init_state(self) -> None:
        """Allocate the state (idempotent): the device part's moments, the host master (the exact fp32 value of the
        current shard), host moments and the staging slots."""
        if self.device_opt is not None:
            self.device_opt.init_state()
        if self.host_state or not self.host_slots:
            return
        pin = torch.cuda.is_available()
        o = self.offloaded
        self.host_state = {k: torch.zeros(o, dtype=torch.float32, pin_memory=pin) for k in HOST_KEYS}
        for s, a in zip(self.host_slots, self.host_offsets):
            lp = local(s.param).detach().reshape(-1)
            self.host_state["master"][a : a + lp.numel()].copy_(lp)
            s.state = {k: t[a : a + lp.numel()] for k, t in self.host_state.items()}
        sizes = slot_sizes(o, self.cfg.mfsdp_bucket_size, self.cfg.mfsdp_grad_staging)
        self.staging = [torch.empty(c, dtype=torch.float32, pin_memory=pin) for c in sizes]

    def move_state(self, device) -> None:
        """Runtime context offload: the device part's state follows ``device``; the host part stays."""
        self.home = torch.device(device)
        if self.device_opt is not None:
            self.device_opt.move_state(device)

    # ------------------------------------------------------------------ update
    @torch.no_grad()
    def step(self, lr: float, clip_coef: float = 1.0) -> tuple[int, int]:
        dense, expert = self.step_async(lr, fused.scale_tensor(clip_coef, self.home))
        self.last_zeros = (int(dense), int(expert))
        return self.last_zeros

    @torch.no_grad()
    def step_async(self, lr: float, scale: torch.Tensor):
        """The device part (queued, as :meth:`ShardedAdamW.step_async`), then the host part slice by slice."""
        self._reduced = None
        self.init_state()
        self.step_count += 1
        dense: Any = 0
        expert: Any = 0
        if self.device_opt is not None:
            dense, expert = self.device_opt.step_async(lr, scale)
        if not self.host_slots:
            return dense, expert
        clip, finite = scale.tolist()
        zeros = self._host_update(lr, clip, apply=finite != 0.0)
        return dense + zeros[False], expert + zeros[True]

    def cancel_step(self) -> None:
        self.step_count -= 1
        if self.device_opt is not None:
            self.device_opt.cancel_step()

    def _pieces(self, a: int, b: int):
        """``(slot, slot offset, start, end)`` of the offloaded parameters inside the stream range ``[a, b)``."""
        for s, off in zip(self.host_slots, self.host_offsets):
            n = local(s.param).numel()
            lo, hi = max(a, off), min(b, off + n)
            if lo < hi:
                yield s, off, lo, hi

    def _host_update(self, lr: float, clip: float, apply: bool = True) -> dict[bool, int]:
        """The host part, slice by slice of one staging slot (the module docstring); returns the zero-gradient
        counts ``{expert: count}``, counted on the host in the staged copy (on CUDA ``torch.count_nonzero`` of a
        device tensor builds a bool mask and an int64 copy of it, 9 bytes per element of the largest offloaded
        tensor: the H200 row's f = 0.5 and f = 1 optimizer peaks). ``apply=False`` (an inf/nan norm): stage and
        count only."""
        c = self.cfg
        cuda = any(local(s.param).is_cuda for s in self.host_slots)
        cap = self.staging[0].numel()
        hyper = {
            d: step_scalars(
                AdamWHyper(
                    lr=lr,
                    beta1=c.betas[0],
                    beta2=c.betas[1],
                    eps=c.eps,
                    weight_decay=c.weight_decay if d else 0.0,
                    step=self.step_count,
                    decoupled=c.decoupled,
                    clip_coef=clip,
                )
            )
            for d in (True, False)
        }
        work = scratch(min(CHUNK, cap), "cpu")
        i16 = torch.empty(min(CHUNK, cap), dtype=torch.int16)
        released: list[Any] = [None] * len(self.staging)  # per slot: the event of its last write-back
        zeros = {False: 0, True: 0}
        st = self.host_state
        for k, a in enumerate(range(0, self.offloaded, cap)):
            b = min(a + cap, self.offloaded)
            j = k % len(self.staging)
            slot = self.staging[j]
            if released[j] is not None:
                released[j].synchronize()  # the slot's previous write-back has left it
            for s, off, lo, hi in self._pieces(a, b):  # D2H of the slice's main_grad pieces
                slot[lo - a : hi - a].copy_(self.main_grad[s.name][lo - off : hi - off], non_blocking=True)
            if cuda:
                torch.cuda.current_stream().synchronize()
            for s, _off, lo, hi in self._pieces(a, b):
                zeros[s.expert] += (hi - lo) - int(torch.count_nonzero(slot[lo - a : hi - a]))
            if not apply:
                continue
            bf16 = slot.view(torch.bfloat16)  # the slot's bytes hold the written-back bf16 once its grad is used
            for s, off, lo, hi in self._pieces(a, b):
                sc = hyper[s.decay]
                for x in range(lo, hi, CHUNK):
                    y = min(x + CHUNK, hi)
                    w = [t[: y - x] for t in work]
                    adamw_inplace(
                        st["master"][x:y], slot[x - a : y - a], st["exp_avg"][x:y], st["exp_avg_sq"][x:y], sc, w
                    )
                shard = local(s.param).view(-1)[lo - off : hi - off]
                if shard.dtype == torch.float32:
                    shard.copy_(st["master"][lo:hi], non_blocking=True)
                else:
                    out = bf16[lo - a : hi - a]
                    for x in range(lo, hi, CHUNK):
                        y = min(x + CHUNK, hi)
                        if LITTLE_ENDIAN:
                            bf16_of_master_(st["master"][x:y], out[x - lo : y - lo], i16)
                        else:
                            out[x - lo : y - lo].copy_(split_fp32(st["master"][x:y])[0])
                    shard.copy_(out, non_blocking=True)
            if cuda:
                ev = torch.cuda.Event()
                ev.record()
                released[j] = ev
        if cuda:
            torch.cuda.current_stream().synchronize()  # every write-back is visible before the step returns
        return zeros

    # ------------------------------------------------------------------ introspection
    def master_weight(self, s: ParamSlot) -> torch.Tensor:
        """The fp32 master of a slot's local shard."""
        if s.offload and s.state:
            return s.state["master"]
        if self.device_opt is not None and not s.offload:
            return self.device_opt.master_weight(next(x for x in self.device_opt.slots if x.name == s.name))
        return local(s.param).detach().reshape(-1).float()

    def state_dtensors(self) -> dict:
        raise MliteError(
            "save_checkpoint: checkpoints of mfsdp runs are not implemented by the lite runtime (M-FSDP's "
            '{"gpu", "cpu"} envelope is not written); checkpoint an fsdp2 run'
        )

    @property
    def padding_numel(self) -> int:
        return 0 if self.device_opt is None else self.device_opt.padding_numel

    def memory(self) -> dict:
        """``{name: {"bytes", "numel", "by_device"}}`` of the optimizer's tensors: the device part's ``exp_avg`` /
        ``exp_avg_sq`` (and its ``master`` when the parameters are not fp32), ``host_master``, ``host_exp_avg``,
        ``host_exp_avg_sq`` and ``grad_staging`` (the host part). ``main_grad`` is reported as the gradients."""
        out: dict[str, dict[str, Any]] = {}
        if self.device_opt is not None:
            out.update(self.device_opt.memory())
        for k, t in self.host_state.items():
            out[f"host_{k}"] = _tally([t])
        out["grad_staging"] = _tally(self.staging)
        return out


def _tally(tensors) -> dict:
    out: dict[str, Any] = {"bytes": 0, "numel": 0, "by_device": {}}
    for t in tensors:
        nb = t.numel() * t.element_size()
        out["bytes"] += nb
        out["numel"] += t.numel()
        out["by_device"][str(t.device)] = out["by_device"].get(str(t.device), 0) + nb
    return out
