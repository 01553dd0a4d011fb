"""The real third-party logs found for the third round (``tests/data/logs/40_`` on, see the README there for where
each comes from): Slurm / torchrun lines behind the indentation, line numbers and prefixes that a copied log carries,
NeMo 2 iteration lines (stored at ``global_step``), DeepSpeed's launcher ending and Megatron-LLM's bad-grad-norm
warning, MoE load-balancing and MTP losses. Every expected value below was read by eye from the files."""

from __future__ import annotations

import re

import pytest
from conftest import REPO, run_cli
from test_logs_real import _events

from mlite.logs import EVENT_KINDS, read_log
from mlite.logs.analysis.events import classify_line
from mlite.logs.input.text import split_prefix

LOGS = REPO / "tests" / "data" / "logs"
THIRD = sorted(p for p in LOGS.iterdir() if p.name[:2].isdigit() and 40 <= int(p.name[:2]) < 60)
BY_NUMBER = {p.name[:3]: p for p in THIRD}
"""``"42_"`` -> the file."""


def _log(number: str):
    return read_log(BY_NUMBER[number])


def test_third_round_logs_are_present():
    assert [p.name[:2] for p in THIRD] == ["40", "41", "42", "43", "44", "45", "46"]


@pytest.mark.parametrize("path", THIRD, ids=lambda p: p.name[:2])
def test_every_third_round_log_parses_and_checks(path):
    run = read_log(path)
    assert run.skipped_lines == 0
    assert {e.kind for e in run.events} <= set(EVENT_KINDS)
    for e in run.events:
        assert e.message and (e.line is None or 1 <= e.line <= run.num_lines)
    res = run_cli("logs", "check", str(path), "--json")
    assert res.rc in (0, 1) and "Traceback" not in res.err


# -- Slurm and torchrun lines behind what a copy puts in front of them -----------------------------------------------
def test_40_slurmstepd_line_wrapped_before_its_verb_is_a_time_limit():
    """An interactive job's time limit, copied into a tutorial with every line indented and slurmstepd's line wrapped
    after the node (``... ON nc10433`` / ``CANCELLED AT 2024-01-27T23:38:18 DUE TO TIME LIMIT ***``)."""
    run = _log("40_")
    [tl] = _events(run, "time_limit")
    assert tl.line == 5 and tl.message.startswith(
        "Slurm job or step cancelled at 2024-01-27T23:38:18 due to time limit"
    )
    assert run_cli("logs", "check", str(THIRD[0]), "--strict").rc == 1


def test_41_rank_prefixed_traceback_behind_line_numbers():
    """A two-node DDP test pasted with its line numbers: torch's ``[rank1]:`` traceback is followed to its exception,
    srun's task exits and slurmstepd's step cancellation are read behind the numbers."""
    run = _log("41_")
    assert [(e.kind, e.line) for e in run.events if e.kind != "no_metrics"] == [
        ("traceback", 12),
        ("exit_code", 28),
        ("cancelled", 30),
        ("exit_code", 31),
    ]
    [tb] = _events(run, "traceback")
    assert tb.message.startswith("torch.distributed.DistBackendError: NCCL error in:")
    assert _events(run, "cancelled")[0].message == "Slurm step 3082812.1 on g13 cancelled at 2025-10-20T20:38:36"
    assert split_prefix(" 112  [rank1]:   File x") == ("[rank1]:", "  File x")
    assert split_prefix("[rank1]:[W1020 20:38:36.173850072 ProcessGroupNCCL.cpp:1479] x")[0] == "[rank1]:"


PREFIXES = [
    "    ",
    "\t",
    "[lrdn3321:3]: ",
    "0: ",
    "[default3]:",
    "[rank3]: ",
    " 129  ",
    "\x1b[36m(TaskRunner pid=14640)\x1b[0m ",
]
PREFIXES += ["(WorkerDict pid=1609, ip=172.26.135.50) ", "[2025-03-31 05:54:07] ", "2025-05-21 11:33:42 - INFO - "]
"""What the other lines of the real logs carry in front of them (11, 23, 01, 41, 38...)."""


@pytest.mark.parametrize("prefix", PREFIXES, ids=repr)
def test_scheduler_and_launcher_lines_behind_any_prefix(prefix):
    """Every event line of the real logs 28, 33, 34, 36, 37, 41 and 43, with each prefix the other lines of real
    logs carry, gives the event it gives bare (the same kind and message)."""
    lines = [(p, ln) for p in sorted(LOGS.glob("[2-4][0-9]_*")) if p.is_file() for ln in p.read_text().splitlines()]
    picked = [ln for p, ln in lines if p.name[:2] in ("28", "33", "34", "36", "37", "41", "43")]
    picked = [ln for ln in picked if classify_line(ln, 1, None)]
    assert len(picked) >= 12
    for ln in picked:
        bare = [(e.kind, e.message) for e in classify_line(re.sub(r"^\s*\d+  ", "", ln), 1, None)]
        assert [(e.kind, e.message) for e in classify_line(prefix + ln.lstrip(), 1, None)] == bare, (prefix, ln)


# -- NeMo 2 ----------------------------------------------------------------------------------------------------------
def test_42_nemo2_lines_are_stored_at_global_step_and_an_epoch_change_is_no_restart():
    """NeMo 2 pretraining behind Ray's ``(pretraining, pid=4112)``: epoch 1 iterations 0 and 10 are global steps 19
    and 29, epoch 2 iterations 7, 8, 10 are 45, 46, 48."""
    run = _log("42_")
    assert run.format == "megatron" and run.wide.index.tolist() == [19, 29, 45, 46, 48]
    assert run.role("loss") == "reduced_train_loss" and run.role("lr") == "lr"
    w = run.wide
    assert w.loc[19, "reduced_train_loss"] == 11.03 and w.loc[48, "reduced_train_loss"] == 11.02
    assert w.loc[29, "lr"] == 4.498e-06 and w.loc[46, "train_step_timing_in_s"] == 47.15
    assert w.loc[48, "consumed_samples"] == 25088 and "global_step" not in run.metrics
    assert not _events(run, "restart") and not run.events
    res = run_cli("logs", "check", str(THIRD[2]))
    assert res.rc == 0 and "5 steps (19..48), reduced_train_loss 11.03 -> 11.02, no events" in res.out


# -- DeepSpeed's launcher, Megatron-LLM's bad grad norm ----------------------------------------------------------------
def test_43_deepspeed_sigkill_handler_gives_the_exit_code():
    run = _log("43_")
    [ev] = _events(run, "exit_code")
    assert ev.line == 2 and ev.message == (
        "DeepSpeed launcher: a rank exited with return code -9 (killed by SIGKILL); the launcher killed the others"
    )
    assert run_cli("logs", "check", str(THIRD[3]), "--strict").rc == 1


def test_44_bad_grad_norm_warning_is_a_nan_event_and_the_skipped_record_is_kept():
    """Megatron-LLM (bf16, no grad scaler): grad norm 0.794 at 3633, the warning, then 3634 skipped (no grad norm,
    ``number of skipped iterations: 1``)."""
    run = _log("44_")
    assert run.wide.index.tolist() == [3633, 3634]
    w = run.wide
    assert w.loc[3633, "grad_norm"] == 0.794 and w.loc[3634, "skipped_iterations"] == 1
    assert w.loc[3634, "elapsed_time_per_iteration_ms"] == 8295.0 and w["grad_norm"].count() == 1
    [nan] = run.events
    assert (nan.kind, nan.line, nan.step, nan.metric) == ("nan", 2, 3633, "grad_norm")
    assert nan.message == "bad grad norm (nan) after step 3633: the optimizer skipped the next iteration's update"


# -- a number with its unit after it ---------------------------------------------------------------------------------
@pytest.mark.parametrize("prefix", ["23_", "26_", "44_"])
def test_a_unit_after_the_number_reads_as_the_unit_in_the_label(prefix, tmp_path):
    """The real records of logs 23 and 44 and the records of 26 hard-wrapped over three lines, with Megatron's
    ``elapsed time per iteration (s): 106.46`` respelled as Megatron-Bridge-style ``elapsed time per iteration:
    106.46 s`` (the only edit): the same records, every continuation line still joined."""
    [src] = LOGS.glob(prefix + "*")
    text = re.sub(
        r"elapsed time per iteration \((m?s)\): ([\d.]+)", r"elapsed time per iteration: \2 \1", src.read_text()
    )
    assert text != src.read_text()
    p = tmp_path / src.name
    p.write_text(text)
    got, want = read_log(p), read_log(src)
    assert got.skipped_lines == 0 and got.metrics == want.metrics
    assert got.wide.equals(want.wide)
    assert [(e.kind, e.line, e.step) for e in got.events] == [(e.kind, e.line, e.step) for e in want.events]


# -- MoE and MTP losses ----------------------------------------------------------------------------------------------
def test_45_moe_records_wrapped_inside_the_load_balancing_loss_name():
    """Megatron-Core MoE (EP 2, aux_loss) pasted at a fixed width: each record cut inside ``load_bal`` /
    ``ancing_loss`` and the memory report between records 1 and 2; the user's Ctrl-C at the end."""
    run = _log("45_")
    assert run.skipped_lines == 0 and run.wide.index.tolist() == [1, 2, 3, 4, 5]
    w = run.wide
    assert w["load_balancing_loss"].tolist() == [1.010554, 1.0097, 1.010454, 1.010483, 1.009435]
    assert w.loc[1, "lm_loss"] == 11.77436 and w.loc[5, "grad_norm"] == 0.463
    assert w.loc[1, "elapsed_time_per_iteration_ms"] == 14312.0 and w.loc[3, "num_zeros"] == 0.0
    assert not [m for m in run.metrics if m.startswith(("load_bal_", "ancing"))]
    assert not run.events


def test_46_mtp_loss_and_load_balancing_loss_are_metrics_beside_the_lm_loss():
    """Megatron-Bridge's MTP guide, the logged line of a Qwen3-30B-A3B run with one MTP layer."""
    run = _log("46_")
    w = run.wide
    assert run.wide.index.tolist() == [100] and run.role("loss") == "lm_loss"
    assert w.loc[100, "mtp_1_loss"] == 7.925096 and w.loc[100, "load_balancing_loss"] == 1.329517
    assert w.loc[100, "lm_loss"] == 7.968678 and w.loc[100, "grad_norm"] == 1.04
