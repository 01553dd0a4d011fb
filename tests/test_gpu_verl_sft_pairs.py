"""bench/gpu_verl_sft.py --pairs (verl SFT against the bare lite runtime, alternating, one process) without verl: the
rows as a function of the raw JSON (oracle: spans and tokens given here), the report round trip, and the worker's
schedule (bench/verl_sft_pairs.py's Recorder driven by a stand-in loader and runtime). The run itself is
``--device cpu --tiny --pairs 3`` (about a minute: not run here)."""

from __future__ import annotations

import csv
import dataclasses
import json
import statistics
import sys

import torch
from conftest import REPO

sys.path.insert(0, str(REPO / "bench"))

import gpu_verl_sft as g
import verl_sft_pairs as w

# (kind, span_s, tokens) of six trials: bare/verl, verl/bare, bare/verl
TRIALS = [("bare", 2.0, 8000), ("verl", 4.0, 7000), ("verl", 5.0, 9000),
          ("bare", 2.5, 9000), ("bare", 2.0, 7000), ("verl", 3.0, 6600)]  # fmt: skip


def _raw():
    steps = [
        {"step": 3 + i, "total_s": 1.0 + i, "tokens": 3000, "data": 0.1 * (i + 1), "batch": 0.01, "pack": 0.02,
         "fwd_bwd": 0.5, "optim": 0.2, "metrics": 0.01, "other": 0.05}
        for i in range(6)
    ]  # fmt: skip
    return {
        "mode": "pairs",
        "command": "python3 bench/gpu_verl_sft.py --out X --pairs 3",
        "gpu": "NVIDIA H200",
        "torch_version": "2.11.0+cu130",
        "params": {"name": "dense1b", "device": "cuda", "warmup": 2, "pairs": 3, "trial_steps": 2, "steps": 9,
                   "train_batch_size": 500, "tokens_per_microbatch": 4096, "model": g.DENSE_1B, "num_workers": 4,
                   "num_workers_given": None},
        "trials": [{"kind": k, "steps": [3 + 2 * (i // 2), 4 + 2 * (i // 2)] if k == "verl" else [], "span_s": s,
                    "tokens": t} for i, (k, s, t) in enumerate(TRIALS)],
        "verl_steps": [{"step": 1, "total_s": 99.0, "tokens": 3000}, {"step": 2, "total_s": 99.0, "tokens": 3000},
                       *steps],
        "bare_steps": [{"label": "warmup", "total_s": 50.0, "tokens": 1, "micro_batches": 9}]
        + [{"label": "trial", "total_s": 1.0 + i / 10, "tokens": 3000 + i, "micro_batches": 4} for i in range(6)],
    }  # fmt: skip


def _values(rows):
    return {r["measurement"]: r["value"] for r in rows}


def test_pairs_rows_are_the_median_of_the_pair_ratios():
    v = _values(g.pairs_rows(_raw()))
    ratios = []
    for i in range(0, 6, 2):
        t = {k: tok / s for k, s, tok in TRIALS[i : i + 2]}
        ratios.append(t["verl"] / t["bare"])
    assert v["verl_sft pairs dense1b verl/bare median"] == round(statistics.median(ratios), 4)
    assert v["verl_sft pairs dense1b verl/bare min"] == round(min(ratios), 4)
    assert v["verl_sft pairs dense1b verl/bare max"] == round(max(ratios), 4)
    verl = [tok / s for k, s, tok in TRIALS if k == "verl"]
    assert v["verl_sft pairs dense1b verl tokens/s"] == round(statistics.median(verl), 1)
    # the warm-up steps (1, 2 and the bare warm-up) are left out
    assert v["verl_sft pairs dense1b verl step"] == round(statistics.median([1.0 + i for i in range(6)]), 4)
    assert v["verl_sft pairs dense1b verl phase data"] == round(statistics.median([0.1 * (i + 1) for i in range(6)]), 4)
    assert v["verl_sft pairs dense1b bare step"] == round(statistics.median([1.0 + i / 10 for i in range(6)]), 4)
    assert v["verl_sft pairs dense1b micro-batches/step"] == 4
    assert [r["measurement"].rsplit(" ", 1)[-1] for r in g.pairs_rows(_raw())][-len(g.PHASES) :] == list(g.PHASES)


def test_an_incomplete_pair_gives_no_ratio():
    raw = _raw()
    raw["trials"] = raw["trials"][:3]  # the second pair has only its verl trial
    assert [round(d["ratio"], 6) for d in g.pair_ratios(raw)] == [round((7000 / 4.0) / (8000 / 2.0), 6)]


def test_pairs_report_rewrites_the_csv_from_the_raw_json(tmp_path):
    (tmp_path / "raw.json").write_text(json.dumps(_raw()))
    assert g.main(["--report", str(tmp_path / "raw.json"), "--csv", str(tmp_path / "pairs.csv")]) == 0
    with open(tmp_path / "pairs.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["measurement"] for r in rows] == [r["measurement"] for r in g.pairs_rows(_raw())]
    report = g.PAIRS_REPORT_CMD.format(stem="gpu_verl_sft_pairs")
    assert {r["command"] for r in rows} == {f"{_raw()['command']} && {report}"}
    assert "bench/results/gpu_verl_sft_pairs.csv" in report.split()
    raw = _raw()
    raw["params"]["num_workers_given"] = 0  # --num-workers 0: its own files
    g.write_pairs_csv(raw, tmp_path / "w0.csv")
    with open(tmp_path / "w0.csv", newline="") as f:
        (cmd,) = {r["command"] for r in csv.DictReader(f)}
    assert cmd.endswith(
        "--report bench/results/gpu_verl_sft_pairs_w0_raw.json --csv bench/results/gpu_verl_sft_pairs_w0.csv"
    )


def test_pairs_steps_follow_the_schedule():
    a = g.parse_args(["--out", "x", "--pairs", "3", "--trial-steps", "2", "--warmup", "2"])
    assert a.steps == w.total_steps({"warmup": 2, "pairs": 3, "trial_steps": 2}) == 9
    assert w.schedule(3) == ["bare", "verl", "verl", "bare", "bare", "verl"]


class _Runtime:
    """Stands in for LiteRuntime: train_step records the micro-batches it ran."""

    def __init__(self):
        self.ran = []

    def train_step(self, handle, mbs):
        self.ran.append(mbs)
        return {"loss": 1.0, "grad_norm": 2.0}


@dataclasses.dataclass
class _MB:
    step: int
    num_tokens: int


def test_recorder_alternates_trials_and_replays_the_latest_micro_batches(tmp_path):
    spec = {"raw": str(tmp_path / "raw.json"), "csv": str(tmp_path / "pairs.csv"), "warmup": 2, "pairs": 3,
            "trial_steps": 2}  # fmt: skip
    (tmp_path / "raw.json").write_text(json.dumps(_raw() | {"trials": [], "verl_steps": [], "bare_steps": []}))
    rec = w.Recorder(spec)
    rec.runtime = rt = _Runtime()
    lens = [[3, 4], [5], [2, 2, 2], [7], [1, 6], [4, 4], [3], [8], [2, 5], [9]]
    data = [{"input_ids": torch.nested.nested_tensor([torch.ones(n) for n in ls], layout=torch.jagged)} for ls in lens]
    for i, _ in enumerate(rec.loader(data)):
        # what the engine does in a verl step: the runtime's forward_backward sees this step's micro-batches
        rec.captured = [*rec.captured[-(spec["trial_steps"] - 1) :], [_MB(i + 1, sum(lens[i]))]]
        if i + 1 == w.total_steps(spec):
            break  # verl returns after its last step: that one is never timed
    assert [t["kind"] for t in rec.raw["trials"]] == w.schedule(3)
    verl = [t["steps"] for t in rec.raw["trials"] if t["kind"] == "verl"]
    assert verl == [[3, 4], [5, 6], [7, 8]]  # consecutive verl steps after the 2 warm-up ones
    assert [t["tokens"] for t in rec.raw["trials"] if t["kind"] == "verl"] == [
        sum(lens[2]) + sum(lens[3]), sum(lens[4]) + sum(lens[5]), sum(lens[6]) + sum(lens[7])
    ]  # fmt: skip
    # bare runs: the warm-up on step 2's batch, then each bare trial replays the two latest verl steps
    assert [mbs[0].step for mbs in rt.ran] == [2, 1, 2, 5, 6, 5, 6]  # pair 2's bare trial follows pair 1's
    assert [d["label"] for d in rec.raw["bare_steps"]] == ["warmup", "trial0", "trial0", "trial3", "trial3", "trial4",
                                                           "trial4"]  # fmt: skip
    assert json.loads((tmp_path / "raw.json").read_text())["trials"] == rec.raw["trials"]  # written as they end
    assert (tmp_path / "pairs.csv").is_file()
