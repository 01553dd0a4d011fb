"""The real third-party logs found for the fourth round (``tests/data/logs/47_`` on, see the README there for where
each comes from): a Megatron-Bridge record whose elapsed time carries its unit after the number, wrapped over four
lines, from an FP8 (MXFP8) run whose grad norm is ``nan``; ms-swift's Megatron line with durations
(``elapsed time: 1d 6h 54m 11s``) and a MoE load-balancing loss; Ling-V2's Megatron MoE run with the router
``z_loss`` and an MTP loss. Every expected value below was read by eye from the files."""

from __future__ import annotations

import math
import re

import pytest
from conftest import REPO, run_cli

from mlite.logs import EVENT_KINDS, read_log
from mlite.logs.formats import megatron as meg

LOGS = REPO / "tests" / "data" / "logs"
FOURTH = sorted(p for p in LOGS.iterdir() if p.name[:2].isdigit() and 47 <= int(p.name[:2]) < 60)
BY_NUMBER = {p.name[:3]: p for p in FOURTH}
"""``"47_"`` -> the file."""


def _log(number: str):
    return read_log(BY_NUMBER[number])


def test_fourth_round_logs_are_present():
    assert [p.name[:2] for p in FOURTH] == ["47", "48", "49"]
    readme = (LOGS / "README.md").read_text()
    for p in FOURTH:
        assert f"| {p.name} |" in readme


@pytest.mark.parametrize("path", FOURTH, ids=lambda p: p.name[:2])
def test_every_fourth_round_log_parses_and_checks(path):
    run = read_log(path)
    assert run.skipped_lines == 0
    assert {e.kind for e in run.events} <= set(EVENT_KINDS)
    heads = re.findall(r"iteration\s+(\d+)\s*/\s*\d+ \|", path.read_text())
    assert {int(s) for s in heads} == set(run.wide.index.tolist())
    for e in run.events:
        assert e.message and (e.line is None or 1 <= e.line <= run.num_lines)
    res = run_cli("logs", "check", str(path), "--json")
    assert res.rc in (0, 1) and "Traceback" not in res.err


# -- a unit after the number, an FP8 run's NaN grad norm ------------------------------------------------------------
def test_47_unit_after_the_number_keeps_the_record_and_its_continuation_lines():
    """Megatron-Bridge, DeepSeek V4 Pro FP8-MX on GB300: ``elapsed time per iteration: 21392.5 ms |`` opens a record
    whose learning rate, grad norm ``nan`` and counters follow on three more lines; iteration 6's first line is
    where the excerpt ends."""
    run = _log("47_")
    w = run.wide
    assert w.index.tolist() == [5, 6]
    assert w.loc[5, "elapsed_time_per_iteration_ms"] == 21392.5 and w.loc[6, "elapsed_time_per_iteration_ms"] == 21313.4
    assert w.loc[5, "learning_rate"] == 1.35e-4 and w.loc[5, "global_batch_size"] == 4096
    assert w.loc[5, "loss_scale"] == 1.0 and w.loc[5, "skipped_iterations"] == 0 and w.loc[5, "nan_iterations"] == 0
    assert math.isnan(w.loc[5, "grad_norm"]) and w["learning_rate"].count() == 1
    assert "elapsed_time_per_iteration" not in run.metrics  # one metric for both spellings of the field


def test_47_fp8_nan_grad_norm_is_a_nan_event():
    run = _log("47_")
    [nan] = run.events
    assert (nan.kind, nan.line, nan.step, nan.metric) == ("nan", 1, 5, "grad_norm")
    assert nan.message == "grad_norm is NaN at step 5"
    assert run_cli("logs", "check", str(BY_NUMBER["47_"]), "--strict").rc == 1


def test_47_every_valid_record_around_the_nan_one_is_kept(tmp_path):
    """The same four lines between two clean copies of Megatron-Bridge's record shape (log 44's numbers): the
    records before and after the NaN one keep every field."""
    nan_record = BY_NUMBER["47_"].read_text().split("\n\n")[0] + "\n"
    clean = nan_record.replace("iteration 5/50", "iteration {}/50").replace("grad norm: nan", "grad norm: 0.794")
    p = tmp_path / "around.log"
    p.write_text(clean.format(4) + nan_record + clean.format(6))
    run = read_log(p)
    assert run.skipped_lines == 0 and run.wide.index.tolist() == [4, 5, 6]
    assert run.wide["grad_norm"].tolist()[::2] == [0.794, 0.794] and run.wide["learning_rate"].count() == 3
    assert [(e.kind, e.step) for e in run.events] == [("nan", 5)]


# -- durations after the number (ms-swift) -------------------------------------------------------------------------
def test_48_durations_are_seconds_and_every_other_field_is_kept():
    """ms-swift ``megatron sft`` (Qwen3-Next-80B-A3B, LoRA, EP 4): ``elapsed time: 1d 6h 54m 11s`` and
    ``remaining time: 7h 59m 54s`` between Megatron's own fields."""
    run = _log("48_")
    w = run.wide
    assert w.index.tolist() == [1530]
    assert w.loc[1530, "elapsed_time_s"] == 86400 + 6 * 3600 + 54 * 60 + 11
    assert w.loc[1530, "remaining_time_s"] == 7 * 3600 + 59 * 60 + 54
    assert w.loc[1530, "elapsed_time_per_iteration_ms"] == 85938.4 and w.loc[1530, "memory_gib"] == 72.89
    assert w.loc[1530, "lm_loss"] == 0.3515074 and w.loc[1530, "load_balancing_loss"] == 2.801638
    assert w.loc[1530, "grad_norm"] == 11.293 and w.loc[1530, "learning_rate"] == 4.001458e-06
    assert not run.events


def _record(number: str) -> str:
    """The file's first record as one line (log 47's four physical lines joined at their separators)."""
    first, *rest = BY_NUMBER[number].read_text().split("\n\n")[0].splitlines()
    for ln in rest:
        if ln.startswith("[Rank"):
            break
        joined = meg.join_continuation(first, ln)
        assert joined is not None
        first = joined
    return first


@pytest.mark.parametrize("number", ["47_", "48_", "49_"])
def test_a_record_wrapped_anywhere_after_its_head_is_joined_again(number):
    """The record cut at every character after its ``iteration N/M |`` head (a hard wrap between a number and its
    unit, inside a duration or between its parts, inside a field name, just after a separator; the copy having
    trimmed the space at the cut) reads as the one record, ``nan`` included."""
    line = _record(number)
    want = repr(meg.parse_iteration(line))
    cuts = [i for i in range(line.index("|") + 1, len(line)) if line[i:].strip()]
    got = [meg.join_continuation(line[:i].rstrip(), line[i:]) for i in cuts]
    assert [repr(meg.parse_iteration(j)) if j else None for j in got] == [want] * len(cuts)


@pytest.mark.parametrize(
    "tok,label,value",
    [
        ("1d 6h 54m 11s", "elapsed time (s)", 111251.0),
        ("7h 59m 54s", "elapsed time (s)", 28794.0),
        ("54m 11s", "elapsed time (s)", 3251.0),
        ("21392.5 ms", "elapsed time (ms)", 21392.5),
        ("11.293", "elapsed time", 11.293),
    ],
)
def test_split_unit_reads_durations_and_units(tok, label, value):
    got_label, got = meg.split_unit("elapsed time", tok)
    assert (got_label, float(got)) == (label, value)


@pytest.mark.parametrize("tok", ["d", "1x 2y", "6h54", "", "nan ms"])
def test_split_unit_leaves_other_tokens_alone(tok):
    assert meg.split_unit("elapsed time", tok) == ("elapsed time", tok)


# -- MoE z-loss ----------------------------------------------------------------------------------------------------
def test_49_moe_z_loss_and_mtp_loss_are_metrics_under_their_names():
    """Ling-V2's continual-pretraining guide: ten records of a Megatron MoE run with ``z_loss`` and ``mtp_1 loss``
    beside the lm loss, the memory report after record 1."""
    run = _log("49_")
    w = run.wide
    assert w.index.tolist() == list(range(1, 11)) and run.role("loss") == "lm_loss"
    assert w.loc[1, "z_loss"] == 10.91659 and w.loc[10, "z_loss"] == 10.95377
    assert w["z_loss"].count() == 10 and w["mtp_1_loss"].count() == 10
    assert w.loc[2, "grad_norm"] == 7.737 and w.loc[1, "throughput_per_gpu"] == 18.0
    assert w.loc[2, "lm_loss"] == 2.688647 and w.loc[2, "mtp_1_loss"] == 2.843235
    assert not [m for m in run.metrics if "z_loss" in m and m != "z_loss"]
