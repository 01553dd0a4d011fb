"""The real third-party logs found for the second round of the analysis (``tests/data/logs/23_`` .. ``39_``, see the
README there for where each comes from): short excerpts pasted around the moment a run broke (spikes after two,
three and five records), Megatron records hard-wrapped over several lines, full Slurm jobs, and scheduler endings
in every wording found (time limit, cancellation, preemption, node failure, requeue; old and new Slurm, submitit).
Every expected value below was read by eye from the files; the samples of ``data/logs/`` are checked for quiet
healthy stretches too. The third round's (``40_`` .. ``46_``) are tested in ``test_logs_third_round.py``."""

from __future__ import annotations

import math
import re
import shutil

import pytest
from conftest import REPO, run_cli

from mlite.logs import EVENT_KINDS, check_logs, read_log, read_logs
from mlite.logs.formats import megatron as meg

LOGS = REPO / "tests" / "data" / "logs"
SAMPLES = REPO / "data" / "logs"
FOUND = sorted(p for p in LOGS.iterdir() if p.name[:2].isdigit() and 23 <= int(p.name[:2]) < 40)
TEXT = [p for p in FOUND if p.is_file()]


def _log(prefix: str):
    [path] = [p for p in FOUND if p.name.startswith(prefix)]
    return read_log(path)


def _events(run, kind: str):
    return [e for e in run.events if e.kind == kind]


def test_found_logs_are_present():
    assert [p.name[:2] for p in FOUND] == [str(i) for i in range(23, 40)]


@pytest.mark.parametrize("path", TEXT, ids=lambda p: p.name[:2])
def test_every_found_log_parses(path):
    run = read_log(path)
    assert run.skipped_lines == 0
    assert {e.kind for e in run.events} <= set(EVENT_KINDS)
    text = path.read_text(errors="replace")
    heads = re.findall(r"iteration\s+(\d+)\s*/\s*\d+ \|", text) + re.findall(r"Step: (\d+) \|", text)
    assert {int(s) for s in heads} == (set(run.wide.index.tolist()) if run.num_steps else set())
    for e in run.events:
        assert e.message and (e.line is None or 1 <= e.line <= run.num_lines)


# -- spikes from the third record on -------------------------------------------------------------------------------
def test_23_loss_spike_after_five_records_grad_norm_after_three():
    """BLOOM-176B: lm loss 2.199, 2.220, 2.595, 2.242, 2.345 then 5.098 at 31219; grad norm 0.242, 0.947, 2.390 then
    15.886, 145.119, 960.351 (one event for the three consecutive records)."""
    run = _log("23_")
    w = run.wide
    assert (run.num_steps, run.first_step, run.last_step) == (11, 31214, 31251)
    assert w.loc[31219, "lm_loss"] == 5.098124 and w.loc[31219, "grad_norm"] == 960.351
    assert w.loc[31214, "grad_norm"] == 0.242 and w.loc[31214, "tflops"] == 147.29
    assert w.loc[31214, "elapsed_time_per_iteration_s"] == 106.46
    spikes = {(e.step, e.metric): e for e in _events(run, "spike")}
    assert set(spikes) == {(31217, "grad_norm"), (31219, "lm_loss")}
    assert "3 consecutive records" in spikes[(31217, "grad_norm")].message
    assert "of the 5 previous value(s)" in spikes[(31219, "lm_loss")].message
    assert spikes[(31219, "lm_loss")].line == 6


def test_24_loss_spike_after_three_records():
    """13B: lm loss 2.775923, 2.772822, 2.768131, then 7.343709 at 29050 (loss scale falls 65536 -> 8192)."""
    run = _log("24_")
    w = run.wide
    assert w.loc[29020, "lm_loss"] == 2.775923 and w.loc[29050, "lm_loss"] == 7.343709
    assert w.loc[29040, "loss_scale"] == 65536.0 and w.loc[29050, "loss_scale"] == 8192.0
    [spike] = _events(run, "spike")
    assert (spike.step, spike.metric, spike.line) == (29050, "lm_loss", 7)
    assert "2.65x the median" in spike.message


def test_25_loss_spike_after_two_records_between_deepspeed_overflow_lines():
    """104B: lm loss 2.665295, 2.667121, then 4.374269 at 17062 (only two records before it); grad norm flat at
    464441.887 (skipped steps) until 879946.622 at 17066."""
    run = _log("25_")
    w = run.wide
    assert (run.num_steps, run.first_step, run.last_step) == (9, 17060, 17068)
    assert w.loc[17062, "lm_loss"] == 4.374269 and w.loc[17060, "loss_scale"] == 1048576.0
    spikes = [(e.step, e.metric) for e in _events(run, "spike")]
    assert spikes == [(17062, "lm_loss"), (17066, "grad_norm")]
    assert "of the 2 previous value(s)" in _events(run, "spike")[0].message


def test_29_full_job_whose_loss_explodes_at_iteration_3():
    """GPT-2 with Megatron-DeepSpeed ZeRO: lm loss 12.52221, 12.5177, then 40.75231."""
    run = _log("29_")
    assert run.wide["lm_loss"].tolist() == [12.52221, 12.5177, 40.75231]
    [spike] = _events(run, "spike")
    assert (spike.step, spike.metric) == (3, "lm_loss") and spike.line == 338


def test_short_history_rule_needs_a_relative_jump_and_a_clear_gap(tmp_path):
    """A wobble is no spike however few records there are; a falling loss never is; a series crossing zero waits for
    the rolling rule."""
    rows = [
        ("lm loss", (2.40, 2.38, 2.55, 2.31)),  # +7%: no
        ("grad norm", (0.227, 0.134, 0.270, 0.450)),  # 2x but within 4 ranges of the median: no
        ("lm loss", (9.0, 8.0, 3.0)),  # falling: no
        ("grad norm", (-0.1, 0.1, 5.0)),  # crosses zero: no relative size
        ("grad norm", (1.0, 1.3, 1.7)),
    ]  # +48% of the median: below the minimum size
    for i, (name, vals) in enumerate(rows):
        p = tmp_path / f"short{i}.log"
        p.write_text("".join(f" iteration {k + 1:8d}/ 100 | {name}: {v} |\n" for k, v in enumerate(vals)))
        assert not _events(read_log(p), "spike"), (name, vals)
    p = tmp_path / "jump.log"
    p.write_text("".join(f" iteration {k + 1:8d}/ 100 | grad norm: {v} |\n" for k, v in enumerate((1.0, 1.1, 1.9))))
    assert [(e.step, e.metric) for e in _events(read_log(p), "spike")] == [(3, "grad_norm")]  # +81%, 8.5 ranges


FOUND_SPIKES = {
    "23": {(31217, "grad_norm"), (31219, "lm_loss")},
    "24": {(29050, "lm_loss")},
    "25": {(17062, "lm_loss"), (17066, "grad_norm")},
    "29": {(3, "lm_loss")},
}
"""The spikes read by eye in the found logs; every other stretch of every one of them is healthy."""


@pytest.mark.parametrize("path", TEXT, ids=lambda p: p.name[:2])
def test_found_logs_are_quiet_outside_their_spikes(path):
    run = read_log(path)
    assert {(e.step, e.metric) for e in _events(run, "spike")} == FOUND_SPIKES.get(path.name[:2], set())
    assert not _events(run, "change_point")


# -- records wrapped over several lines ----------------------------------------------------------------------------
def test_26_records_wrapped_over_three_lines_keep_every_field():
    """BLOOM-176B, copied from a terminal: each record cut after 'learning' and after 'number of nan' (the space
    before 'iterations' lost in the copy)."""
    run = _log("26_")
    one_line = _log("23_")
    assert run.metrics == one_line.metrics  # the same fields as the one-line records of the same run
    w = run.wide
    assert (run.num_steps, run.first_step, run.last_step) == (5, 42780, 42784)
    assert w.loc[42780, "learning_rate"] == 4.475e-05 and w.loc[42780, "lm_loss"] == 2.117073
    assert w.loc[42780, "nan_iterations"] == 0 and w.loc[42780, "samples_per_second"] == 19.474
    assert w.loc[42780, "tflops"] == 149.10 and w.loc[42784, "tflops"] == 141.09
    assert w.loc[42783, "elapsed_time_per_iteration_s"] == 110.17 and w.loc[42784, "grad_norm"] == 0.127
    assert not run.events and run.num_lines == 15


def test_27_record_wrapped_after_a_colon_and_inside_a_word():
    """104B: 'learning rate:' / ' 5.996E-05 ...' and 'number of skipped iteratio' / 'ns:   0 | ...'."""
    run = _log("27_")
    w = run.wide
    assert sorted(w.index) == [13251, 14000]
    assert w.loc[13251, "learning_rate"] == 5.996e-05 and w.loc[13251, "lm_loss"] == 2.924229
    assert w.loc[13251, "grad_norm"] == 122160.116 and w.loc[13251, "skipped_iterations"] == 0
    assert w.loc[13251, "nan_iterations"] == 0 and w.loc[14000, "learning_rate"] == 5.994e-05
    assert "number_of_skipped_iteratio" not in " ".join(run.metrics)


def test_wrap_joining_rules():
    head = " iteration      100/    1000 | consumed samples:   1600 | learn"
    rest = "ing rate: 1.0E-04 | lm loss: 2.5E+00 |"
    assert meg.join_continuation(head, rest) == head + rest
    cut_number = " iteration      100/    1000 | lm loss: 2.51"
    joined = meg.join_continuation(cut_number, "2E+00 | grad norm: 0.5 |")
    assert joined.endswith("lm loss: 2.512E+00 | grad norm: 0.5 |")
    trimmed = " iteration      100/    1000 | lm loss: 2.5E+00 | number of nan"
    assert meg.join_continuation(trimmed, "iterations:   0 |").endswith("number of nan iterations:   0 |")
    # the next line starts a record, a launcher prefix, or is not a record's rest: no join
    assert meg.join_continuation(head, " iteration      110/    1000 | lm loss: 2.4E+00 |") is None
    assert meg.join_continuation(head, "[default7]: ing rate: 1.0E-04 |") is None
    assert meg.join_continuation(head, "saving checkpoint at iteration 100 to /ckpt") is None
    assert meg.join_continuation(head + " |", "lm loss: 2.5E+00 |") is None  # the record was complete


def test_wrapped_record_split_across_read_blocks(tmp_path, monkeypatch):
    """A wrap that falls on the boundary of two read blocks is joined all the same."""
    from mlite.logs.input import blockio

    text = (LOGS / "26_megatron_ds_176b_records_wrapped_over_three_lines.log").read_bytes()
    monkeypatch.setattr(blockio, "BLOCK_BYTES", 150)  # a few lines per block: every boundary falls inside a record
    p = tmp_path / "small_blocks.log"
    p.write_bytes(text)
    assert read_log(p).wide.equals(_log("26_").wide)


# -- scheduler endings ----------------------------------------------------------------------------------------------
def test_28_full_slurm_job_ends_at_its_time_limit():
    run = _log("28_")
    assert (run.num_steps, run.first_step, run.last_step) == (6, 10, 60)
    w = run.wide
    assert math.isnan(w.loc[10, "lm_loss"]) and w.loc[10, "skipped_iterations"] == 10  # fp16: all 10 skipped
    assert w.loc[30, "lm_loss"] == 76.76836 and w.loc[60, "grad_norm"] == 14.171
    tl = _events(run, "time_limit")
    assert [(e.line, e.step) for e in tl] == [(2398, 60), (2401, 60)]
    assert "step 1809655.0 on r6i4n3" in tl[0].message and "job 1809655" in tl[1].message
    assert not _events(run, "spike")  # 14.1 -> 76.8 at 30 has a single record before it: no verdict


def test_30_full_slurm_job_cancelled_without_a_reason():
    run = _log("30_")
    assert [(e.kind, e.line) for e in run.events] == [("cancelled", 1712), ("cancelled", 1717)]
    assert run.wide.loc[90, "lm_loss"] == 8.306568


@pytest.mark.parametrize(
    "prefix,expected",
    [
        ("31_", [("preempted", 1), ("requeued", 2), ("requeued", 3), ("exit_code", 8)]),
        ("32_", [("preempted", 14), ("requeued", 15)]),
        ("33_", [("time_limit", 3), ("exit_code", 4), ("exit_code", 6), ("exit_code", 7)]),
        ("34_", [("time_limit", 1)]),
        ("35_", [("cancelled", 1)]),
        ("36_", [("preempted", 1)]),
        ("37_", [("node_failure", 2)]),
        ("38_", [("restart", 9)]),  # its records follow the ending: see the test below
    ],
)
def test_scheduler_endings_in_every_wording(prefix, expected):
    run = _log(prefix)
    assert [(e.kind, e.line) for e in run.events if e.kind != "no_metrics"] == expected


def test_scheduler_ending_messages():
    assert "job 608 on SERVER_NAME" in _events(_log("31_"), "requeued")[0].message
    assert "caught SIGUSR2 on SERVER_NAME" in _events(_log("31_"), "preempted")[0].message
    [req] = _events(_log("32_"), "requeued")
    assert req.message == "job 39025082 requeued (3 remaining timeouts)"
    assert not _events(_log("32_"), "time_limit")  # 'Job has not timed out.' is not a time limit
    assert _events(_log("34_"), "time_limit")[0].message == (
        "Slurm job 830329 on n447 cancelled at 2018-08-06T17:21:44 due to time limit"
    )
    assert _events(_log("35_"), "cancelled")[0].message == (
        "Slurm job 1479012 on sh-2-3 cancelled at 2015-02-04T06:33:25"
    )
    assert "hpcsmall-debug-ghpc-0" in _events(_log("37_"), "node_failure")[0].message


def test_38_requeued_job_that_resumes_is_one_run_with_a_restart(tmp_path):
    """Slurm Longrun's report: the step is cancelled (no reason), the indented job line says time limit (no time),
    the requeued job recovers its state and goes on from step 225 to 1000 in the same log: one run, one restart
    event that keeps both wordings, no time_limit or cancelled left over."""
    run = _log("38_")
    assert run.format == "pipe" and run.role("loss") == "loss"
    assert run.wide["loss"].to_dict() == {1: 12.03, 120: 7.89, 225: 7.56, 995: 4.38, 1000: 4.74}
    assert run.wide.loc[995, "tflops"] == 394.14
    [restart] = run.events
    assert (restart.kind, restart.line, restart.step) == ("restart", 9, 120)
    assert restart.message == (
        "Slurm step 454600.0 cancelled at 2025-05-21T11:33:42; also line 13: Slurm job 454600 "
        "cancelled due to time limit; the job resumed at step 225 (line 20): one run, requeued"
    )
    assert run_cli("logs", "check", str(FOUND[15]), "--strict").rc == 0
    cut = tmp_path / "cut_before_the_requeue.log"  # the same log up to its ending: the ending stays a failure
    cut.write_text("".join(FOUND[15].read_text().splitlines(keepends=True)[:13]))
    assert [(e.kind, e.line) for e in read_log(cut).events] == [("cancelled", 9), ("time_limit", 13)]
    assert run_cli("logs", "check", str(cut), "--strict").rc == 1


def test_requeued_job_that_resumes_is_one_run_with_a_restart(tmp_path):
    """Log 28 as Slurm appends a requeued job's output (--open-mode=append): its time-limit ending, then the same job
    resuming from the checkpoint of iteration 30. The text is the real log's, assembled: every line comes from it."""
    lines = (LOGS / "28_megatron_gpt2_slurm_time_limit_full_job.out").read_text().splitlines(keepends=True)
    resumed = [ln for ln in lines if re.search(r" iteration\s+(30|40|50|60)/", ln)]
    p = tmp_path / "requeued.out"
    p.write_text("".join(lines) + "".join(resumed))
    run = read_log(p)
    kinds = [e.kind for e in run.events]
    assert "time_limit" not in kinds and kinds.count("restart") == 1
    [restart] = _events(run, "restart")
    assert restart.line == 2398 and "due to time limit" in restart.message
    assert "resumed at step 30" in restart.message and "also line 2401: Slurm job 1809655" in restart.message
    assert run_cli("logs", "check", str(p), "--strict").rc == 0  # resumed: nothing failed
    assert run_cli("logs", "check", str(p), "--fail-on", "restart").rc == 1


def test_gate_covers_the_new_kinds():
    assert run_cli("logs", "check", str(FOUND[14]), "--strict").rc == 1  # 37: node_failure
    assert run_cli("logs", "check", str(FOUND[8]), "--strict").rc == 1  # 31: requeued, preempted
    assert run_cli("logs", "check", str(FOUND[0]), "--strict").rc == 0  # 23: spikes are warnings
    assert run_cli("logs", "check", str(FOUND[0]), "--fail-on", "spike").rc == 1
    ref01 = str(next(LOGS.glob("01_*")))
    assert run_cli("logs", "check", ref01, "--fail-on", "change_point").rc == 1
    assert run_cli("logs", "check", ref01, "--fail-on", "node_failure,requeued").rc == 0


# -- the samples of data/logs ---------------------------------------------------------------------------------------
SAMPLE_SPIKES = {
    "mlite_tiny_moe_fsdp2": set(),
    "mlite_tiny_moe_pao": set(),
    "mlite_tiny_moe_dist_opt": set(),
    "synthetic_verl_grpo_2x8_spike_nan_oom.out": {(31, "actor/pg_loss"), (31, "actor/grad_norm")},
    "synthetic_verl_sft_1x8_wrapped_timelimit.out": set(),
    "synthetic_verl_grpo_file_logger_resumed.jsonl": set(),
    "synthetic_megatron_gpt_4x8_restart_preempted.out": {(270, "lm_loss"), (270, "grad_norm")},
}


@pytest.mark.parametrize("name", list(SAMPLE_SPIKES))
def test_samples_are_quiet_outside_their_spikes(name):
    run = read_log(SAMPLES / name)
    assert {(e.step, e.metric) for e in run.events if e.kind == "spike"} == SAMPLE_SPIKES[name]
    assert not _events(run, "change_point")


# -- the one-line verdict -------------------------------------------------------------------------------------------
def test_check_prints_one_line_for_a_healthy_run():
    res = run_cli("logs", "check", str(SAMPLES / "mlite_tiny_moe_fsdp2"), str(FOUND[3]), str(next(LOGS.glob("22_*"))))
    assert res.rc == 0
    out = res.out.splitlines()
    # first and last train/loss of the run: 6.244490356445312 and 3.4522101958216083 (train.log, steps 1 and 40)
    assert out[0] == "OK  mlite_tiny_moe_fsdp2  [mlite]  40 steps (1..40), train/loss 6.244 -> 3.452, no events"
    assert out[1] == (
        "OK  26_megatron_ds_176b_records_wrapped_over_three_lines  [megatron]  5 steps (42780..42784), "
        "lm_loss 2.117 -> 2.128, no events"
    )
    assert out[2].startswith("22_slurm_torchrun") and len(out) > 4  # a failed run keeps its full report
    assert [r.loss_span for r in check_logs([SAMPLES / "mlite_tiny_moe_fsdp2"])] == [
        ("train/loss", 6.244490356445312, 3.4522101958216083)
    ]


# -- difference from a baseline -------------------------------------------------------------------------------------
def test_plot_baseline_draws_each_runs_difference(tmp_path):
    import json

    from mlite.logs import plot_runs

    nudged = tmp_path / "fsdp2_nudged"
    shutil.copytree(SAMPLES / "mlite_tiny_moe_fsdp2", nudged)
    rows = [json.loads(ln) for ln in (nudged / "metrics.jsonl").read_text().splitlines()]
    rows[9]["data"]["train/loss"] += 0.125  # step 10
    (nudged / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    runs = read_logs([SAMPLES / "mlite_tiny_moe_fsdp2", SAMPLES / "mlite_tiny_moe_pao", nudged])
    fig = plot_runs(runs, ["loss", "grad_norm"], baseline="mlite_tiny_moe_fsdp2")
    ax = fig.axes[0]
    assert "difference from mlite_tiny_moe_fsdp2" in ax.get_title()
    curves = {ln.get_label(): ln for ln in ax.get_lines() if not ln.get_label().startswith("_")}
    assert set(curves) == {"mlite_tiny_moe_pao - mlite_tiny_moe_fsdp2", "fsdp2_nudged - mlite_tiny_moe_fsdp2"}
    pao, nudge = curves["mlite_tiny_moe_pao - mlite_tiny_moe_fsdp2"], curves["fsdp2_nudged - mlite_tiny_moe_fsdp2"]
    assert list(pao.get_xdata()) == list(range(1, 41)) and not pao.get_ydata().any()  # bitwise equal runs
    y = dict(zip(nudge.get_xdata(), nudge.get_ydata(), strict=True))
    assert abs(y[10] - 0.125) < 1e-12 and all(v == 0 for s, v in y.items() if s != 10)
    png = tmp_path / "diff.png"
    res = run_cli(
        "logs",
        "plot",
        str(SAMPLES / "mlite_tiny_moe_pao"),
        str(nudged),
        "--baseline",
        str(SAMPLES / "mlite_tiny_moe_fsdp2"),
        "-o",
        str(png),
    )
    assert res.rc == 0 and "difference from" in res.out and png.read_bytes()[:4] == b"\x89PNG"
    bad = run_cli("logs", "plot", str(nudged), "--baseline", "no_such_run", "-o", str(png))
    assert bad.rc == 2 and "--baseline 'no_such_run'" in bad.err and len(bad.err.strip().splitlines()) == 1


# -- TensorBoard ------------------------------------------------------------------------------------------------------
def test_39_real_tensorboard_event_file_tf2_tensor_scalars(tmp_path):
    """The event file committed by dsuess/tensorboa.rs: a file_version event, then tag 'tag' = 0..9 at steps 0..9,
    written as TF2 ``tf.summary.scalar`` tensors (not ``simple_value``)."""
    logdir = LOGS / "39_tensorboard_tf2_scalars_tensoboa_rs"
    [event_file] = list(logdir.iterdir())
    for path in (logdir, event_file):
        run = read_log(path)
        assert run.format == "tensorboard" and run.metrics == ["tag"]
        assert run.series("tag").to_dict() == {s: float(s) for s in range(10)}
        assert run.events == [] and run.num_lines == 11  # 11 events: file_version + 10 scalars
    res = run_cli("logs", "check", str(logdir), "--json")
    [doc] = res.json()["runs"]
    assert doc["format"] == "tensorboard" and (doc["num_steps"], doc["first_step"], doc["last_step"]) == (10, 0, 9)
    out = tmp_path / "tb.csv"
    assert run_cli("logs", "export", str(event_file), "--csv", str(out)).rc == 0
    assert out.read_text().splitlines()[1:3] == [
        "39_tensorboard_tf2_scalars_tensoboa_rs,0,tag,0.0",
        "39_tensorboard_tf2_scalars_tensoboa_rs,1,tag,1.0",
    ]


def test_tensorboard_missing_is_one_clear_error(monkeypatch):
    import sys

    from mlite.errors import MliteError

    monkeypatch.setitem(sys.modules, "tensorboard.backend.event_processing.event_file_loader", None)
    with pytest.raises(MliteError, match="needs the tensorboard package") as e:
        read_log(LOGS / "39_tensorboard_tf2_scalars_tensoboa_rs")
    assert "\n" not in str(e.value)


def test_grep_prefilter_finds_the_same_events(monkeypatch, tmp_path):
    """The failure keywords and Megatron heads found by one grep pass give exactly the events and records of the
    block-by-block search, on every real log (forced on however small the file) and on a fuzzed one with invalid
    UTF-8 and CRLF."""
    from mlite.logs.input import prefilter
    from mlite.logs.scan import reader

    junk = tmp_path / "junk.log"
    junk.write_bytes(
        (LOGS / "22_slurm_torchrun_rendezvous_fail_srun_cancelled_cgroup.err").read_bytes().replace(b"\n", b"\r\n")
        + b"\xff\xfe srun: error: n1: task 3: Exited with exit code 9\r\n"
    )
    paths = [p for p in sorted(LOGS.iterdir()) if p.is_file() and p.suffix != ".md"] + [junk]
    monkeypatch.setattr(prefilter, "MIN_BYTES", 0)
    assert prefilter.keyword_offsets(paths[0], reader.LINE_KEYWORDS) is not None
    with_grep = [r.summary() for r in check_logs(paths)]
    # the metric heads other than 'step:' come from the same grep pass: every record stays the same too
    full = [(r.tidy.to_csv(), [e.to_dict() for e in r.events], r.skipped_lines, r.num_lines) for r in read_logs(paths)]
    monkeypatch.setattr(reader, "keyword_offsets", lambda *a: None)
    assert with_grep == [r.summary() for r in check_logs(paths)]
    assert full == [
        (r.tidy.to_csv(), [e.to_dict() for e in r.events], r.skipped_lines, r.num_lines) for r in read_logs(paths)
    ]
