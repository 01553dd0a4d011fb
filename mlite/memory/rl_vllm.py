"""vLLM's KV-cache budget rule by version: how much of ``gpu_memory_utilization x total`` becomes KV cache, and
whether memory held by OTHER processes on the device (the colocated actor, the reference, sibling workers' CUDA
contexts) counts. One :class:`VllmKVRule` per rule, :func:`kv_rule` maps a ``vllm_version`` to it;
:func:`mlite.memory.rl_engine.start_engine` applies it. Read in the code (file names relative to
vllm-project/vllm):

- ``v1_per_instance`` (vLLM >= 0.9.1, today's): ``vllm/v1/worker/gpu_worker.py`` @ 35d5cda1. ``init_device`` takes a
  ``MemorySnapshot`` after the distributed init, ``requested_memory = total x gpu_memory_utilization`` and raises
  "Free memory on device ... on startup is less than desired GPU memory utilization" when the free memory is
  smaller; ``determine_available_memory`` gives the KV cache ``requested_memory - non_kv_cache_memory``, where
  ``memory_profiling(init_snapshot, weights_memory=...)`` counts this instance's weights, its torch peak increase
  and its non-torch increase SINCE the snapshot: what other processes held before is not charged to the KV cache
  (only the start-up check sees it). The change is vllm-project/vllm#18974 ("[BugFix][V1] Fix memory profiling
  bug", opened 2025-05-30, merged June 2025; #19312 rebased on it), first released in v0.9.1 (vllm#20305 and
  vllm-project/llm-compressor#1560 report the new start-up refusal against v0.9.1).
- ``global`` (V1 engine 0.8.0 - 0.9.0, the default engine from 0.8.0; and V0 0.6.4): ``vllm/v1/worker/
  gpu_worker.py`` @ 0012cf69, ``determine_available_memory``: ``peak = torch peak allocated + (total - free -
  torch allocated)`` (the "non-torch allocations" are the device's whole used memory less this process's torch
  memory, so every other process counts), KV = ``total x gpu_memory_utilization - peak``; no start-up check, a
  budget <= 0 is "No available memory for the cache blocks". Introduced by vllm#10528, reported as a bug in
  vllm#17979 (v0.8.5.post1) and vllm#18858, replaced by #18974. V0 had the same global meaning in v0.6.4 only
  (vllm#9352; vllm#10451 "Breaking Change in gpu_memory_utilization Behavior in vLLM 0.6.4", reverted by #10511
  in v0.6.5).
- ``v0_per_instance`` (V0 worker, vLLM < 0.6.4 and 0.6.5 - 0.7.x): ``vllm/worker/worker.py``
  ``determine_num_available_blocks`` (stored version @ 002a0ba9): ``peak = init_gpu_memory - free after the
  profiling run`` with ``init_gpu_memory`` read by ``torch.cuda.mem_get_info()`` in ``init_device`` (vllm#2863:
  the memory other processes held at init does not count), KV = ``total x gpu_memory_utilization - peak``; from
  v0.6.5 the same per-instance meaning through ``memory_profiling(baseline_snapshot)`` and
  ``memory_for_current_instance - result.non_kv_cache_memory`` (vllm#10511). No start-up check: when the share
  exceeds what is free the KV allocation itself runs out of memory.

In verl every rule sees the actor's and the reference's resident state as "other" memory: with vLLM in its own
processes (the ``mp`` executor) it is another process's, with vLLM inside the actor worker (verl up to 0.7) it is
the same process's torch memory allocated before the engine's snapshot (the global rule's torch peak includes it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import MliteError


@dataclass(frozen=True)
class VllmKVRule:
    """One vLLM KV-cache budget rule."""

    name: str
    """Rule name (``vllm_version`` may give it directly)."""
    versions: str
    """The vLLM releases that use it (one line)."""
    counts_other_processes: bool
    """True: the KV budget is ``util x total`` less EVERYTHING on the device, other processes included."""
    refuses_start: bool
    """True: the engine refuses to start when less than ``util x total`` is free (``init_device``)."""
    source: str
    """Where the rule is read (repository, file, commit, PR)."""


VLLM_KV_RULES: dict[str, VllmKVRule] = {
    r.name: r
    for r in (
        VllmKVRule(
            name="v1_per_instance",
            versions=">= 0.9.1",
            counts_other_processes=False,
            refuses_start=True,
            source="vllm-project/vllm vllm/v1/worker/gpu_worker.py @ 35d5cda1 (init_device, "
            "determine_available_memory), vllm#18974",
        ),
        VllmKVRule(
            name="global",
            versions="0.6.4.x (V0) and 0.8.0 - 0.9.0 (V1)",
            counts_other_processes=True,
            refuses_start=False,
            source="vllm-project/vllm vllm/v1/worker/gpu_worker.py @ 0012cf69 (determine_available_memory), "
            "vllm#10528 (V1), vllm#9352 (V0 0.6.4)",
        ),
        VllmKVRule(
            name="v0_per_instance",
            versions="< 0.6.4 and 0.6.5 - 0.7.x (V0 worker)",
            counts_other_processes=False,
            refuses_start=False,
            source="vllm-project/vllm vllm/worker/worker.py @ 002a0ba9 (determine_num_available_blocks), "
            "vllm#2863, vllm#10511",
        ),
    )
}
"""Rule name -> rule."""

LATEST = "latest"
"""``vllm_version`` default: the newest vLLM's rule."""

_BOUNDS: tuple[tuple[tuple[int, ...], str], ...] = (
    ((0, 6, 4), "v0_per_instance"),
    ((0, 6, 5), "global"),
    ((0, 8, 0), "v0_per_instance"),
    ((0, 9, 1), "global"),
)
"""(first version NOT using the rule, rule) in order; later versions use ``v1_per_instance``."""


def parse_version(text: str) -> tuple[int, ...]:
    """``0.9.1`` / ``v0.8.5.post1`` / ``0.10.0rc2`` -> (major, minor, patch); MliteError if none."""
    m = re.fullmatch(r"v?(\d+)\.(\d+)(?:\.(\d+))?(?:[.+-]?[A-Za-z0-9.+-]*)?", str(text).strip())
    if not m:
        raise MliteError(
            f"vllm_version (--vllm-version) {text!r} is not a vLLM version: give one such as 0.9.1, "
            f"{LATEST!r}, or a rule name ({', '.join(VLLM_KV_RULES)})"
        )
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def kv_rule(version: str = LATEST) -> VllmKVRule:
    """The KV-budget rule of vLLM ``version`` (a release, ``latest`` or a rule name)."""
    v = str(version).strip()
    if v in VLLM_KV_RULES:
        return VLLM_KV_RULES[v]
    if v.lower() in (LATEST, "newest"):
        return VLLM_KV_RULES["v1_per_instance"]
    parts = parse_version(v)
    for bound, name in _BOUNDS:
        if parts < bound:
            return VLLM_KV_RULES[name]
    return VLLM_KV_RULES["v1_per_instance"]


__all__ = ["LATEST", "VLLM_KV_RULES", "VllmKVRule", "kv_rule", "parse_version"]
