"""Write the sample logs of ``data/logs/`` (deterministic; run from the repository root):

    .venv/bin/python data/logs/make_samples.py

Every file comes from :mod:`mlite.logs.generate` with a fixed seed, except the two real debug runs of the kit
(``mlite_tiny_moe_fsdp2``, ``mlite_tiny_moe_pao``: made by ``mlite run``, see the README, never rewritten here)
and ``mlite_tiny_moe_dist_opt``, derived from the real fsdp2 run. The README next to this script says what each
one shows.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

from mlite.logs.generate import GenSpec, generate  # noqa: E402


def _perturb_run(src: Path, dst: Path, *, rel: float, memory_scale: float) -> None:
    """A copy of run ``src`` whose loss differs in the last bits (another optimizer's rounding) and whose
    memory figures differ (what a different optimizer layout changes)."""
    if dst.exists():
        shutil.rmtree(dst)
    dst.mkdir(parents=True)
    rows = [json.loads(ln) for ln in (src / "metrics.jsonl").read_text().splitlines()]
    log = []
    for i, row in enumerate(rows):
        d = row["data"]
        if rel:
            d["train/loss"] = d["train/loss"] * (1 + rel * ((i % 7) - 3))
        d["perf/cpu_memory_used_gb"] = d["perf/cpu_memory_used_gb"] * memory_scale
        log.append(f"step:{row['step']} - " + " - ".join(f"{k}:{v!r}" for k, v in d.items()))
    (dst / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    head = (src / "train.log").read_text().splitlines()[:3]
    (dst / "train.log").write_text("\n".join(head + log + ["[mlite] status: completed"]) + "\n")


def main() -> None:
    out = HERE
    # mlite_tiny_moe_fsdp2 and mlite_tiny_moe_pao are real runs (README: the mlite run commands)
    _perturb_run(out / "mlite_tiny_moe_fsdp2", out / "mlite_tiny_moe_dist_opt", rel=2e-7, memory_scale=1.1)
    generate(GenSpec(format="mlite", steps=12, seed=8, ending="traceback"), out / "mlite_tiny_moe_crash")
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
