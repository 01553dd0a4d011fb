"""Write the synthetic sample logs of ``data/logs/`` (deterministic; run from the repository root):

    .venv/bin/python data/logs/make_samples.py

Every ``synthetic_*`` file comes from :mod:`mlite.synth` with a fixed seed. The ``mlite_tiny_moe_*`` run
directories are real runs of the kit (made by ``mlite run``, see the README next to this script) and are never
written here.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

from mlite.synth import GenSpec, generate  # noqa: E402 - after the sys.path line (a script run from data/logs/)

SAMPLES = {
    "synthetic_verl_grpo_2x8_spike_nan_oom.out": GenSpec(
        format="verl", kind="grpo", steps=60, seed=11, spikes=(31,), nan_from=52, ending="oom", noise=0.6
    ),
    "synthetic_verl_sft_1x8_wrapped_timelimit.out": GenSpec(
        format="verl",
        kind="sft",
        steps=30,
        seed=12,
        precision="np",
        glued_tqdm=True,
        val_every=10,
        wrap=160,
        ending="time_limit",
        noise=0.3,
    ),
    "synthetic_verl_grpo_file_logger_resumed.jsonl": GenSpec(
        format="verl_jsonl", kind="grpo", steps=40, seed=13, restart=(30, 21), null_nan=False
    ),
    "synthetic_megatron_gpt_4x8_restart_preempted.out": GenSpec(
        format="megatron",
        steps=40,
        seed=14,
        nodes=4,
        prefix="srun",
        skipped=(1, 2),
        val_every=10,
        spikes=(27,),
        restart=(30, 25),
        ending="preempted",
    ),
}
"""File name -> what it holds (the README's table says what each one shows)."""


def main() -> None:
    for name, spec in SAMPLES.items():
        generate(spec, HERE / name)
    print("wrote", ", ".join(SAMPLES))


if __name__ == "__main__":
    main()
