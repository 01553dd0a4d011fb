"""``#SBATCH`` headers as the source of the ``SLURM_*`` variables a batch script reads.

sbatch reads ``#SBATCH`` lines up to the first line that is neither a comment nor blank, and sets the job's
environment from them (https://slurm.schedmd.com/sbatch.html, "INPUT ENVIRONMENT VARIABLES" / "OUTPUT ENVIRONMENT
VARIABLES"): ``--nodes`` / ``-N`` gives ``SLURM_JOB_NUM_NODES`` and ``SLURM_NNODES``, ``--ntasks-per-node``
``SLURM_NTASKS_PER_NODE``, ``--ntasks`` / ``-n`` ``SLURM_NTASKS``, ``--cpus-per-task`` / ``-c``
``SLURM_CPUS_PER_TASK``, ``--gpus-per-node`` ``SLURM_GPUS_PER_NODE`` (and the GPUs on each node,
``SLURM_GPUS_ON_NODE``), ``--gres=gpu[:type]:N`` ``SLURM_GPUS_ON_NODE``, ``--job-name`` / ``-J`` ``SLURM_JOB_NAME``.

An ``srun`` line's own options do not change these values on that line: the batch shell expands
``${SLURM_JOB_NUM_NODES}`` before ``srun`` starts the step, so only the headers are read.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass


@dataclass(frozen=True)
class SlurmValue:
    """One ``SLURM_*`` value and the header it comes from."""

    value: str
    """The value Slurm sets."""
    line: int
    """Line of the ``#SBATCH`` header."""
    header: str
    """The option as written (``--nodes=16``)."""

    def note(self, name: str) -> str:
        """The output line that says where a value came from."""
        return f"{name}={self.value} from #SBATCH {self.header} (line {self.line})"


_LONG = {
    "nodes": ("SLURM_JOB_NUM_NODES", "SLURM_NNODES"),
    "ntasks-per-node": ("SLURM_NTASKS_PER_NODE",),
    "ntasks": ("SLURM_NTASKS",),
    "cpus-per-task": ("SLURM_CPUS_PER_TASK",),
    "gpus-per-node": ("SLURM_GPUS_PER_NODE", "SLURM_GPUS_ON_NODE"),
    "job-name": ("SLURM_JOB_NAME",),
}
_SHORT = {"N": "nodes", "n": "ntasks", "c": "cpus-per-task", "J": "job-name"}
_COUNTED = {"nodes", "ntasks-per-node", "ntasks", "cpus-per-task", "gpus-per-node"}


def _count(option: str, value: str) -> str | None:
    """The number Slurm sets for a counted option: ``4``, ``4-8`` (min nodes), ``h100:8`` (GPU type)."""
    v = value.rsplit(":", 1)[-1] if option == "gpus-per-node" else value
    m = re.fullmatch(r"(\d+)(-\d+)?", v)
    return m.group(1) if m else None


def _gres_gpus(value: str) -> str | None:
    """GPUs per node in a ``--gres`` list: ``gpu:8``, ``gpu:h100:8``, ``gpu`` (1)."""
    for item in value.split(","):
        parts = item.split(":")
        if parts[0] != "gpu":
            continue
        n = parts[-1] if len(parts) > 1 else "1"
        n = n.split("(")[0]
        return n if n.isdigit() else None
    return None


def _options(words: list[str]):
    """``(long option name, value, as written)`` of the words of one header."""
    i = 0
    while i < len(words):
        w = words[i]
        i += 1
        if w.startswith("--"):
            name, eq, val = w[2:].partition("=")
            if not eq and i < len(words) and not words[i].startswith("-"):
                val, i = words[i], i + 1
            yield name, val, w if eq else f"{w} {val}".strip()
        elif w.startswith("-") and len(w) >= 2 and w[1] in _SHORT:
            val = w[2:].lstrip("=")
            if not val and i < len(words):
                val, i = words[i], i + 1
            yield _SHORT[w[1]], val, f"{w[:2]} {val}"


def sbatch_values(text: str) -> dict[str, SlurmValue]:
    """``SLURM_*`` name -> :class:`SlurmValue` from the ``#SBATCH`` headers of ``text`` (a later header wins)."""
    out: dict[str, SlurmValue] = {}
    for n, raw in enumerate(text.splitlines(), 1):
        s = raw.strip()
        if n == 1 and s.startswith("#!"):
            continue
        if s and not s.startswith("#"):
            break  # sbatch stops reading headers at the first command
        if not s.startswith("#SBATCH"):
            continue
        body = s[len("#SBATCH") :].split(" #", 1)[0]
        try:
            words = shlex.split(body)
        except ValueError:
            continue
        for name, val, shown in _options(words):
            if name == "gres":
                gpus = _gres_gpus(val)
                if gpus:
                    out["SLURM_GPUS_ON_NODE"] = SlurmValue(gpus, n, shown)
                continue
            if name not in _LONG:
                continue
            value = _count(name, val) if name in _COUNTED else val
            if value is None:
                continue
            for var in _LONG[name]:
                out[var] = SlurmValue(value, n, shown)
    return out
