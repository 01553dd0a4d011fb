"""``launcher_verl_version(text, overrides) -> (version | None, source)``: the verl release a launcher runs, when it
says so, for :func:`mlite.memory.rl_metrics.predicted_metrics` (what the logged memory metrics cover depends on it).

Read in this order, the first that matches wins:

- a pin: ``pip install verl==0.5.0`` (also ``verl[vllm]==...``, and the ``verl==release/0.7.1`` of verl's own
  example headers, ``examples/grpo_trainer/run_qwen3_vl_30b_a3b_megatron.sh`` @ v0.9.0);
- an image tag on a line naming an image, docker or a container: ``verlai/verl:app-verl0.5-...``,
  ``quay.io/ascend/verl:v0.8.0-cann...`` (``run_qwen3_5_122b_a10b_megatron.sh`` @ v0.9.0);
- ``actor_rollout_ref.rollout.mode=sync``: verl v0.7.0 deprecated the sync rollout (``verl/workers/config/rollout.py``
  @ ``f9c855f7``: "only async mode is supported"; ``verl/trainer/ppo/ray_trainer.py``: "mode is always async"), so
  the launcher was written for 0.6 at the newest, read as 0.6.

The version is then checked by :func:`mlite.memory.rl_metrics.verl_release`; one the kit does not know is reported
with its source and left out (the default release is used).
"""

from __future__ import annotations

import re

_PIP = re.compile(r"\bverl(?:\[[^\]]*\])?\s*==\s*(?:release/)?v?(\d+\.\d+(?:\.\d+)?(?:\.post\d+)?)")
_IMAGE = re.compile(r"\bverl(?::|[-_])?v?(\d+\.\d+(?:\.\d+)?)")


def launcher_verl_version(text: str, overrides: dict) -> tuple[str | None, str]:
    """``(version, where it came from)``; ``(None, why not)`` when the launcher does not say."""
    for n, line in enumerate(text.splitlines(), 1):
        m = _PIP.search(line)
        if m:
            return m[1], f"pinned '{m[0]}' (line {n})"
    for n, line in enumerate(text.splitlines(), 1):
        if "image" in line.lower() or "docker" in line.lower() or "container" in line.lower():
            m = _IMAGE.search(line)
            if m:
                return m[1], f"image tag '{m[0]}' (line {n})"
    mode = overrides.get("actor_rollout_ref.rollout.mode")
    if str(mode).lower() == "sync":
        return "0.6", "actor_rollout_ref.rollout.mode=sync: deprecated from verl v0.7.0, so 0.6 at the newest"
    return None, "the launcher names no verl release (pip pin, image tag or rollout.mode=sync)"


__all__ = ["launcher_verl_version"]
