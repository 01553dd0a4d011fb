"""Write the sample logs of ``data/logs/`` (deterministic; run from the repository root):

    .venv/bin/python data/logs/make_samples.py

Every file comes from :mod:`mlite.logs.generate` with a fixed seed, except the real debug runs of the kit
(the ``mlite_tiny_moe_*`` run directories: made by ``mlite run``, see the README, never written here). The README
next to this script says how each one was made and what it shows.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

from mlite.logs.generate import GenSpec, generate  # noqa: E402


def main() -> None:
    out = HERE
    # the mlite_tiny_moe_* run directories are real runs (README: the mlite run commands)
    generate(GenSpec(format="verl", kind="grpo", steps=60, seed=11, spikes=(31,), nan_from=52, ending="oom",
                     noise=0.6), out / "verl_grpo_2x8_spike_nan_oom.out")
    generate(GenSpec(format="verl", kind="sft", steps=30, seed=12, precision="np", glued_tqdm=True, val_every=10,
                     wrap=160, ending="time_limit", noise=0.3), out / "verl_sft_1x8_wrapped_timelimit.out")
    generate(GenSpec(format="verl_jsonl", kind="grpo", steps=40, seed=13, restart=(30, 21), null_nan=False),
             out / "verl_grpo_file_logger_resumed.jsonl")
    generate(GenSpec(format="megatron", steps=40, seed=14, nodes=4, prefix="srun", skipped=(1, 2), val_every=10,
                     spikes=(27,), restart=(30, 25), ending="preempted"), out / "megatron_gpt_4x8_restart_preempted.out")
    print("wrote", ", ".join(sorted(p.name for p in out.iterdir() if not p.name.startswith(".") and p.name not in ("README.md", "make_samples.py"))))


if __name__ == "__main__":
    main()
