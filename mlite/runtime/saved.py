"""What autograd keeps for the backward: bytes of saved tensors per decoder block (the activation measurement).

``saved_activation_bytes(model, batch)`` runs one forward of a plain (not FSDP-wrapped) :class:`LiteModel` under
``torch.autograd.graph.saved_tensors_hooks`` and adds up the storages the saved tensors live in, once each,
attributed to the decoder block running when they were saved (``root``: embedding, final norm, loss, rotary
tables). Parameters are not activations and are left out. This is the measurement the memory estimator's lite
activation model (:mod:`mlite.memory.lite`) is held against, on CPU in the tests and on CUDA in
``bench/gpu_validate.py``.
"""

from __future__ import annotations

import torch


def saved_activation_bytes(model, batch) -> dict:
    """``{"blocks": [bytes per block], "root": bytes, "total": bytes, "loss": float}`` for one forward."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: set = set()
    current = ["root"]
    per: dict = {}

    def pack(t: torch.Tensor):
        st = t.untyped_storage()
        key = (st.data_ptr(), st.nbytes())
        if key not in seen and st.data_ptr() not in params and t.device.type != "meta":
            per[current[0]] = per.get(current[0], 0) + st.nbytes()
        seen.add(key)
        return t

    hooks = []
    for i, block in enumerate(model.blocks):
        hooks.append(block.register_forward_pre_hook(lambda m, a, i=i: current.__setitem__(0, i)))
        hooks.append(block.register_forward_hook(lambda m, a, o: current.__setitem__(0, "root")))
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            loss, n = model.loss(batch)
        value = float(loss.detach()) / max(1, n)
    finally:
        for h in hooks:
            h.remove()
    blocks = [per.get(i, 0) for i in range(len(model.blocks))]
    del loss
    return {"blocks": blocks, "root": per.get("root", 0), "total": sum(blocks) + per.get("root", 0), "loss": value}
