"""Optimizer primitives of the lite runtime: AdamW math on flat shards (:mod:`.adamw`), fp32 master vs PAO int16
remainders (:mod:`.master`), update-state offload and context offload (:mod:`.offload`), global grad norm and
clipping (:mod:`.clip`), the learning-rate schedule (:mod:`.schedule`), the optimizer over FSDP2 shards
(:mod:`.optimizer`) and over dist_opt's buffer shards (:mod:`.distributed`)."""

from .master import merge_fp32, round_bf16, split_fp32
from .offload import offload_split
from .optimizer import CHUNK, STATE_KEYS, ShardedAdamW
from .schedule import LRScheduler

__all__ = [
    "CHUNK",
    "STATE_KEYS",
    "LRScheduler",
    "ShardedAdamW",
    "merge_fp32",
    "offload_split",
    "round_bf16",
    "split_fp32",
]
