"""verl's batch -> the lite runtime's micro-batches (:class:`~mlite.runtime.PackedBatch`), one gather per micro-batch.

verl's own path (``verl.workers.engine.utils.prepare_micro_batches``, verl 0.9.1) partitions the batch by token
budget (``rearrange_micro_batches``: Karmarkar-Karp on ``24576 * len + len**2``, then its bubble-reducing order) and
materialises every micro-batch as a TensorDict: each nested key of the batch (input_ids, loss_mask, position_ids, ...)
unbound into per-sequence tensors and re-nested (``index_select_tensor_dict``). The engine only reads input_ids and
loss_mask, as flat token streams, so :func:`micro_batches` asks verl for the partition alone (the same function on the
sequence lengths alone: a ``[B, max_len]`` mask, the padded-batch branch, which reads only its row sums and width) and
gathers each micro-batch's tokens from the batch's flat values with one index. The partition, the micro-batch order
and every token are verl's (``tests/test_verl_packing.py`` compares with verl's path tensor for tensor). Batches the
fast path does not cover (padded batches, fixed micro-batch size, ``force_group_size > 1``) take verl's path.
"""

from __future__ import annotations

import torch
from verl.utils import tensordict_utils as tu
from verl.utils.seqlen_balancing import rearrange_micro_batches
from verl.workers.engine.utils import prepare_micro_batches


def packed_batch(micro_batch):
    """verl's no-padding micro-batch (nested ``input_ids`` / ``loss_mask``) -> PackedBatch."""
    ids = micro_batch["input_ids"]
    return _packed(ids.values().cpu().long(), micro_batch["loss_mask"].values().cpu().bool(), ids.offsets().cpu())


def _packed(flat: torch.Tensor, mask: torch.Tensor, offsets: torch.Tensor):
    """Labels = the next token where the (rolled) loss mask is 1, none across a sequence end."""
    from ..runtime.batch import IGNORE_INDEX, PackedBatch

    labels = torch.where(torch.roll(mask, -1), torch.roll(flat, -1), torch.full_like(flat, IGNORE_INDEX))
    labels[offsets[1:] - 1] = IGNORE_INDEX  # nothing is learned across a sequence end
    return PackedBatch(input_ids=flat, labels=labels, seq_lens=offsets.diff().to(torch.int32))


def verl_micro_batches(data, dp_group) -> list:
    """verl's path: ``prepare_micro_batches`` (TensorDict micro-batches), then :func:`packed_batch` on each."""
    mbs, _ = prepare_micro_batches(data=data, dp_group=dp_group, same_micro_num_in_dp=True)
    return [packed_batch(mb) for mb in mbs]


def micro_batches(data, dp_group) -> list:
    """The PackedBatch micro-batches of verl's batch ``data`` (the same as :func:`verl_micro_batches`)."""
    ids = data["input_ids"]
    dynamic = tu.get_non_tensor_data(data=data, key="use_dynamic_bsz", default=True)
    grouped = tu.get_non_tensor_data(data=data, key="force_group_size", default=1) != 1
    if not (ids.is_nested and dynamic and not grouped and "loss_mask" in data.keys()):  # noqa: SIM118 (a TensorDict)
        return verl_micro_batches(data, dp_group)
    offsets = ids.offsets().cpu()
    lens = offsets.diff()
    flat, mask = ids.values().cpu().long(), data["loss_mask"].values().cpu().bool()
    out = []
    for part in partition(data, lens, dp_group):
        idx = torch.as_tensor(part, dtype=torch.long)
        n = lens[idx]
        new_off = torch.zeros(len(part) + 1, dtype=torch.long)
        torch.cumsum(n, 0, out=new_off[1:])
        gather = torch.repeat_interleave(offsets[idx] - new_off[:-1], n) + torch.arange(int(new_off[-1]))
        out.append(_packed(flat[gather], mask[gather], new_off))
    return out


def partition(data, lens: torch.Tensor, dp_group) -> list[list[int]]:
    """verl's micro-batch partition of a batch with sequence lengths ``lens`` (``prepare_micro_batches``'s
    arguments, verl's ``rearrange_micro_batches`` on a batch holding nothing but the lengths)."""
    from tensordict import TensorDict

    sp_size = tu.get_non_tensor_data(data=data, key="sp_size", default=1)
    width = int(lens.max())
    light = TensorDict(
        {
            "input_ids": torch.zeros(len(lens), 1, dtype=torch.int8),  # not nested: the row-sum branch
            "attention_mask": torch.arange(width)[None, :] < lens[:, None],
        },
        batch_size=[len(lens)],
    )
    _, parts = rearrange_micro_batches(
        light, max_token_len=data["max_token_len_per_gpu"] * sp_size, dp_group=dp_group, same_micro_num_in_dp=True
    )
    return parts
