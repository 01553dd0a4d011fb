"""The real logs of verl 0.7 agent-loop runs and NeMo-RL found for issue 28 (``tests/data/logs/60_`` .. ``62_``, see
the README there for where each comes from): a verl 0.7.1 GRPO record copied one metric a line, a NeMo-RL GRPO job's
console log (steps 4 to 10 of a Gemma-3 27B run) and one NeMo-RL results block without its step header. Every
expected value below was read by eye from the files."""

from __future__ import annotations

import csv
import math

import pytest
from conftest import REPO, run_cli

from mlite.logs import EVENT_KINDS, export_csv, read_log
from mlite.logs.formats import nemo_rl, npscan

LOGS = REPO / "tests" / "data" / "logs"
FOUND = sorted(p for p in LOGS.iterdir() if p.name[:2].isdigit() and 60 <= int(p.name[:2]) < 63)
BY_NUMBER = {p.name[:3]: p for p in FOUND}
"""``"60_"`` -> the file."""


def _log(number: str):
    return read_log(BY_NUMBER[number])


def test_issue_28_logs_are_present():
    assert [p.name[:2] for p in FOUND] == ["60", "61", "62"]


@pytest.mark.parametrize("path", FOUND, ids=lambda p: p.name[:2])
def test_every_issue_28_log_parses_and_checks(path):
    run = read_log(path)
    assert run.skipped_lines == 0 and run.num_steps >= 1
    assert {e.kind for e in run.events} <= set(EVENT_KINDS)
    res = run_cli("logs", "check", str(path), "--json")
    assert res.rc == 0 and "Traceback" not in res.err


# -- verl 0.7.1: one metric a line -------------------------------------------------------------------------------
def _one_per_line(text: str) -> dict[str, float]:
    """The `` - key:value`` lines of log 60, split by hand."""
    out = {}
    for line in text.splitlines()[1:]:
        key, _, value = line.removeprefix(" - ").partition(":")
        out[key] = float(value)
    return out


def test_60_verl_071_record_one_metric_a_line_is_read_whole_at_its_step():
    """verl 0.7.1 (GRPO, vLLM, gsm8k, an agent-loop manager) as copied from the Ray dashboard: the ``step:1`` head
    behind ``(TaskRunner pid=15930, ip=10.4.1.33)``, then each of the 81 metrics on a line of its own."""
    path = BY_NUMBER["60_"]
    run = read_log(path)
    assert run.format == "verl" and run.wide.index.tolist() == [1]
    expected = _one_per_line(path.read_text())
    assert len(expected) == 81 and set(run.metrics) == set(expected)
    row = run.wide.loc[1]
    assert {k: row[k] for k in expected} == expected
    assert row["actor/pg_loss"] == 0.05410893690350349 and row["actor/grad_norm"] == 0.167236328125
    assert row["timing_s/agent_loop/slowest/generate_sequences"] == 20.618110499111935
    assert row["timing_s/agent_loop/num_preempted/min"] == -1 and row["actor/lr"] == 1e-06
    assert run.roles() == {
        "loss": "actor/pg_loss",
        "grad_norm": "actor/grad_norm",
        "kl": "actor/ppo_kl",
        "entropy": "actor/entropy",
        "reward": "critic/score/mean",
        "lr": "actor/lr",
        "throughput": "perf/throughput",
    }


def test_60_many_records_one_metric_a_line_across_read_blocks(tmp_path):
    """Log 60's record written 400 times with its head renumbered ``step:1`` .. ``step:400`` (nothing else changed),
    larger than one fast-path block: the reader and the CSV export find every metric at its step."""
    text = BY_NUMBER["60_"].read_text()
    steps = 400
    path = tmp_path / "verl071_400_steps.log"
    path.write_text("".join(text.replace("step:1\n", f"step:{s}\n", 1) for s in range(1, steps + 1)))
    assert path.stat().st_size > 2 * npscan.MIN_BYTES
    expected = _one_per_line(text)
    run = read_log(path)
    assert run.skipped_lines == 0 and run.wide.index.tolist() == list(range(1, steps + 1))
    assert run.wide.shape == (steps, 81) and not run.wide.isna().any().any()
    assert (run.wide["perf/throughput"] == expected["perf/throughput"]).all()
    out = tmp_path / "m.csv"
    assert export_csv([path], out)["rows"] == steps * 81
    rows = list(csv.DictReader(out.open()))
    by_step = {}
    for r in rows:
        by_step.setdefault(int(r["step"]), {})[r["metric"]] = float(r["value"])
    assert sorted(by_step) == list(range(1, steps + 1)) and by_step[steps] == expected


# -- NeMo-RL --------------------------------------------------------------------------------------------------------
def test_61_nemorl_grpo_steps_4_to_10_every_block_at_its_header_step():
    """A Gemma-3 27B GRPO job's log from its step 4 on: ``Step N/10`` headers, vLLM progress bars, Ray worker lines,
    one ``Training Results`` / ``Timing`` / ``Performance Metrics`` block per step and a validation at step 10."""
    run = _log("61_")
    assert run.format == "nemo_rl" and run.wide.index.tolist() == [4, 5, 6, 7, 8, 9, 10]
    w = run.wide
    assert w["train/generation_kl_error"].tolist() == [0.0003, 0.0003, 0.0003, 0.0004, 0.0003, 0.0004, 0.0004]
    assert w["train/mean_generation_length"].tolist() == [
        229.0537,
        210.6094,
        202.7646,
        183.4688,
        176.0332,
        176.5830,
        168.9199,
    ]
    assert w["timing/total_step_time"].tolist() == [970.66, 970.25, 929.50, 925.58, 950.98, 1003.15, 1076.14]
    assert w["perf/e2e_tokens_sec_gpu"].tolist() == [14.47, 13.76, 14.07, 13.48, 12.82, 11.72, 10.60]
    assert (w["train/loss"] == 0).all() and (w["train/avg_reward"] == 0).all()
    assert w.loc[4, "timing/policy_training"] == 744.26 and w.loc[4, "timing/prepare_for_generation/total"] == 1.87
    assert w.loc[10, "perf/generation_worker_group_tokens_sec"] == 8000.78
    only_10 = ["timing/checkpointing", "val/accuracy", "val/average_response_length", "val/total_validation_time"]
    assert w[only_10].dropna().index.tolist() == [10]
    assert (w.loc[10, "val/average_response_length"], w.loc[10, "val/samples_processed"]) == (189.2, 256)
    assert len(run.metrics) == 30 and not any(m.startswith("perf/max_value") for m in run.metrics)
    assert run.roles() == {
        "loss": "train/loss",
        "kl": "train/generation_kl_error",
        "reward": "train/avg_reward",
        "throughput": "perf/e2e_tokens_sec_gpu",
    }
    assert run.events == []


def test_62_nemorl_results_block_without_a_step_header_is_step_1():
    run = _log("62_")
    assert run.format == "nemo_rl" and run.wide.index.tolist() == [1]
    row = run.wide.loc[1]
    assert (row["train/loss"], row["train/generation_kl_error"], row["train/mean_generation_length"]) == (
        0.0,
        0.001,
        201.2197,
    )
    assert (row["timing/total_step_time"], row["timing/checkpointing"], row["perf/e2e_tokens_sec"]) == (
        35.70,
        6.49,
        8588.75,
    )


def test_61_nan_loss_is_flagged_at_its_step(tmp_path):
    """Log 61 with step 7's ``Loss: 0.0000`` respelled ``Loss: nan`` (what NeMo-RL's ``:.4f`` prints for a NaN)."""
    lines = BY_NUMBER["61_"].read_text().split("\n")
    assert lines[548] == "  • Loss: 0.0000" and lines[458].startswith("========================= Step 7/10 ")
    lines[548] = "  • Loss: nan"
    path = tmp_path / "nemorl_nan.log"
    path.write_text("\n".join(lines))
    run = read_log(path)
    assert math.isnan(run.wide.loc[7, "train/loss"]) and run.wide.loc[8, "train/loss"] == 0
    [ev] = run.events
    assert (ev.kind, ev.line, ev.step) == ("nan", 549, 7) and "train/loss" in ev.message
    assert run_cli("logs", "check", str(path), "--strict").rc == 1


def test_61_failure_lines_of_a_nemorl_log_are_found(tmp_path):
    """Log 61 followed by log 03's crash (a verl job's ``RayTaskError``): the NeMo-RL records and the traceback."""
    path = tmp_path / "nemorl_then_crash.log"
    path.write_bytes(BY_NUMBER["61_"].read_bytes() + next(LOGS.glob("03_*")).read_bytes())
    run = read_log(path)
    assert run.format == "nemo_rl" and run.num_steps == 7
    [tb] = [e for e in run.events if e.kind == "traceback"]
    assert tb.line > 1029 and "RayTaskError(NotImplementedError)" in tb.message


def test_nemorl_epochs_add_the_steps_of_the_earlier_epochs():
    """The headers as ``grpo_train`` prints them (``f"{'=' * 25} Epoch {e}/{n} {'=' * 25}"``, the same for the
    step): the step counter restarts each epoch, the parser's step does not."""
    p = nemo_rl.BlockParser()
    bar = "=" * 25
    lines = [f"{bar} Epoch 1/2 {bar}", f"{bar} Step 1/2 {bar}", "📊 Training Results:", "  • Loss: 0.5000"]
    lines += [f"{bar} Step 2/2 {bar}", "📊 Training Results:", "  • Loss: 0.4000", f"{bar} Epoch 2/2 {bar}"]
    lines += [f"{bar} Step 1/2 {bar}", "▶ Preparing batch...", "  • Loss: 9.0000", "📊 Training Results:"]
    lines += ["  • Loss: 0.3000"]
    records = [r for r in map(p.parse, lines) if r is not None]
    assert records == [(1, ["train/loss"], [0.5]), (2, ["train/loss"], [0.4]), (3, ["train/loss"], [0.3])]


def test_nemorl_sniff_leaves_verl_and_prose_alone():
    assert read_log(BY_NUMBER["60_"]).format == "verl"
    assert not nemo_rl.has_record("the Training Results: section shows the loss")
    assert nemo_rl.has_record("x\n📊 Training Results:\n  • Loss: 0.1\n")
