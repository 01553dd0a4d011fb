"""Live tensor bytes on the CPU: the transient a piece of runtime code allocates, measured without a GPU.

:class:`LiveBytes` is a ``TorchDispatchMode`` that sees every storage an aten op creates while it is active, keeps
a weak reference to it (``StorageWeakRef``) and, at every op, sums the bytes of the ones still alive: ``peak`` is
the largest such sum, ``live`` the sum now (storages created before the mode are not counted). It runs the same
Python and aten ops as a CUDA run; what it cannot see are a kernel's internal workspaces (cuBLAS, the CUDA
``count_nonzero``'s mask), which the runtime bounds by chunking. ``sizes_at_peak`` lists the storages alive at the
peak (bytes, dtype), largest first.
"""

from __future__ import annotations

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


class LiveBytes(TorchDispatchMode):
    """Bytes of the storages created while the mode is active and still alive (see the module docstring); storages
    of at most ``small`` bytes (the step's bookkeeping: the norm and its per-tensor parts, zero counts, the clip
    factor; 1 KiB holds 128 fp64 per-tensor norms) are counted apart, in ``scalars``, not in ``peak``."""

    def __init__(self, small: int = 1024):
        super().__init__()
        self.small = small
        self.alive: dict[int, tuple[StorageWeakRef, int, torch.dtype]] = {}
        self.peak = 0
        self.sizes_at_peak: list[tuple[int, torch.dtype]] = []
        self.scalars = 0

    def _sweep(self) -> int:
        for k in [k for k, (ref, _, _) in self.alive.items() if ref.expired()]:
            del self.alive[k]
        return sum(n for _, n, _ in self.alive.values())

    @property
    def live(self) -> int:
        return self._sweep()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        inputs = {
            t.untyped_storage().data_ptr() for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)
        }
        out = func(*args, **kwargs)
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor):
                continue
            st = t.untyped_storage()
            ptr, nb = st.data_ptr(), st.nbytes()
            if nb == 0 or ptr in inputs or (ptr in self.alive and not self.alive[ptr][0].expired()):
                continue  # an input's storage (in-place and view ops) or one already counted
            if nb <= self.small:
                self.scalars += 1
                continue
            self.alive[ptr] = (StorageWeakRef(st), nb, t.dtype)
        cur = self._sweep()
        if cur > self.peak:
            self.peak = cur
            self.sizes_at_peak = sorted(((n, d) for _, n, d in self.alive.values()), key=lambda x: -x[0])
        return out
