"""The analysis API around the readers: EMA, roles, comparison arithmetic, plots, the progress bar, streaming
memory, the explorer's session object and the widget view (without a browser)."""

from __future__ import annotations

import io
import math
import tracemalloc

import numpy as np
import pandas as pd
import pytest
from conftest import REPO

from mlite.errors import MliteError
from mlite.logs import compare_runs, ema, read_log, read_logs, resolve_inputs
from mlite.logs.input.progress import progress_for, wants_bar
from mlite.logs.plots.plot import plot_runs
from mlite.logs.plots.session import CurveSession
from mlite.logs.scan.frame import check_logs
from mlite.synth import GenSpec, generate, write_bench_log

SAMPLES = REPO / "data" / "logs"


def _write(path, rows):
    path.write_text(
        "".join(f"step:{s} - " + " - ".join(f"{k}:{v!r}" for k, v in vals.items()) + "\n" for s, vals in rows)
    )
    return path


def test_ema_matches_the_debiased_formula():
    x = pd.Series([1.0, 3.0, float("nan"), 2.0, 10.0, float("inf"), 4.0])
    got = ema(x, 0.7).to_numpy()
    num = den = 0.0
    want = []
    for v in x:
        if math.isfinite(v):
            num = 0.7 * num + v
            den = 0.7 * den + 1.0
        want.append(num / den if den else float("nan"))
    finite = np.isfinite(x.to_numpy())
    np.testing.assert_allclose(got[finite], np.array(want)[finite], rtol=1e-12)
    assert ema(x, 0.0) is x
    with pytest.raises(MliteError, match="smoothing"):
        ema(x, 1.0)


def test_compare_arithmetic(tmp_path):
    a = read_log(
        _write(
            tmp_path / "a.log",
            [
                (1, {"loss": 1.0, "gn": 0.0, "x": 1.0}),
                (2, {"loss": 2.0, "gn": 1.0}),
                (3, {"loss": float("nan"), "gn": 2.0}),
            ],
        )
    )
    b = read_log(
        _write(
            tmp_path / "b.log",
            [
                (1, {"loss": 1.0, "gn": -0.0, "y": 1.0}),
                (2, {"loss": 2.5, "gn": 1.0}),
                (3, {"loss": 3.0, "gn": 2.0}),
                (4, {"loss": 1.0, "gn": 1.0}),
            ],
        )
    )
    doc = compare_runs(a, b)
    m = {r["metric"]: r for r in doc["metrics"]}
    assert doc["common_steps"] == 3 and doc["only_in_a"] == ["x"] and doc["only_in_b"] == ["y"]
    assert m["loss"]["max_abs_diff"] == 0.5 and m["loss"]["max_rel_diff"] == 0.2
    assert m["loss"]["nan_mismatch"] == 1 and m["loss"]["first_diff_step"] == 2 and m["loss"]["steps"] == 3
    # 0.0 and -0.0 are equal numbers but not equal bits
    assert m["gn"]["max_abs_diff"] == 0.0 and m["gn"]["bitwise_equal"] is False and m["gn"]["first_diff_step"] == 1
    assert doc["bitwise_equal"] is False
    assert compare_runs(a, a)["bitwise_equal"] is True  # NaN at the same place counts as equal
    with pytest.raises(MliteError, match="'x' is not in both runs"):
        compare_runs(a, b, metrics=["x"])


def test_roles_per_format():
    runs = {r.name: r for r in read_logs([REPO / "tests" / "data" / "logs"])}
    assert runs["02_verl_sft_multiturn_glued_tqdm"].roles() == {"loss": "train/loss", "lr": "train/lr(1e-3)"}
    assert runs["09_megatron_gpt2_fp16_lossscale_skips_val_ckpt"].role("val_loss") == "val/lm_loss"
    r05 = runs["05_verl_grpo_startup_val_step0_step1"].roles()
    assert (r05["loss"], r05["kl"], r05["entropy"], r05["reward"]) == (
        "actor/pg_loss",
        "actor/ppo_kl",
        "actor/entropy",
        "critic/score/mean",
    )
    assert runs["01_verl_ppo_gae_multinode_resumed_ansi"].role("entropy") == "actor/entropy_loss"


def test_plot_panels_events_and_log_scale(tmp_path):
    truth = generate(GenSpec(steps=60, seed=3, spikes=(40,), noise=0), tmp_path / "g.log")
    run = read_log(truth.path)
    fig = plot_runs([run], smooth=0.5)
    axes = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title().split()[0] for ax in axes] == ["loss", "grad", "KL", "entropy", "reward"]
    grad = axes[1]
    spike_marks = [ln for ln in grad.get_lines() if ln.get_label() == "spike"]
    assert len(spike_marks) == 1 and spike_marks[0].get_xdata()[0] == 40
    meg = read_log(next((REPO / "tests" / "data" / "logs").glob("09_*")))
    fig = plot_runs([meg], ["loss", "lr"], logy=True)
    assert fig.axes[0].get_yscale() == "log"
    with pytest.raises(MliteError, match="no run has metric or role 'nope'"):
        plot_runs([meg], ["nope"])


def test_progress_bar_only_for_large_inputs():
    assert not wants_bar(10 << 20, 3) and wants_bar(100 << 20, 1) and wants_bar(16 << 20, 40)
    buf = io.StringIO()
    with progress_for(1000, 1, True, file=buf) as bar:
        bar.update(600)
        bar.update(400)
    assert "reading logs" in buf.getvalue()
    quiet = io.StringIO()
    with progress_for(1000, 1, None, file=quiet) as bar:
        bar.update(1000)
    assert quiet.getvalue() == ""


def test_streaming_memory_does_not_grow_with_file_size(tmp_path, monkeypatch):
    from mlite.logs.input import blockio

    monkeypatch.setattr(blockio, "BLOCK_BYTES", 1 << 18)  # 256 KiB blocks keep the test quick
    small, big = tmp_path / "small.log", tmp_path / "big.log"
    write_bench_log(small, 2)  # both much larger than a block
    write_bench_log(big, 8)
    peaks = []
    for p in (small, big):
        tracemalloc.start()
        [run] = check_logs([p])
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
        assert run.num_steps > 0
    assert peaks[1] < 1.1 * peaks[0] + (256 << 10), peaks
    assert peaks[1] < 8 << 20


def test_session_and_errors(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # notebooks run elsewhere: data/logs/ still means the kit's samples
    s = CurveSession()
    runs = s.load("data/logs/")
    assert len(runs) == len(resolve_inputs([SAMPLES]))
    sel = s.default_selection()
    assert sel and all(s.select([n])[0].format == "mlite" for n in sel)
    labels = dict(s.metric_options(sel))
    assert labels["[loss]"] == "loss" and "train/loss" in labels
    raw = s.figure_png(sel, ["loss"], smooth=0.0)
    smooth = s.figure_png(sel, ["loss"], smooth=0.9)
    assert raw[:4] == b"\x89PNG" and raw != smooth
    doc = s.compare("mlite_tiny_moe_fsdp2", "mlite_tiny_moe_pao")
    assert doc["bitwise_equal"] and s.compare_rows(doc)[0][-1] == "yes"
    assert any(row[3] == "oom" for row in s.event_rows(["synthetic_verl_grpo_2x8_spike_nan_oom"]))
    for bad, needle in (("", "no log given"), (str(tmp_path / "none.out"), "does not exist")):
        with pytest.raises(MliteError, match=needle) as e:
            s.load(bad)
        assert "\n" not in str(e.value)


def test_curve_explorer_widget(tmp_path):
    from widgets.curves import CurveExplorer

    view = CurveExplorer()
    assert view.errors.message == "" and view.png[:4] == b"\x89PNG"
    before = view.png
    view.smoothing = 0.9
    assert view.png != before and view.errors.message == ""
    view.select(runs=["synthetic_verl_grpo_2x8_spike_nan_oom"], metrics=["loss", "grad_norm"])
    assert "spike" in view._events.value and "oom" in view._events.value
    view.set_compare("mlite_tiny_moe_fsdp2", "mlite_tiny_moe_pao")
    view.compare()
    assert "bitwise equal" in view._cmp_out.value and "not bitwise equal" not in view._cmp_out.value
    view.set_compare("mlite_tiny_moe_fsdp2", "synthetic_verl_grpo_2x8_spike_nan_oom")
    view.compare()
    assert "not bitwise equal" in view._cmp_out.value
    view.load(str(tmp_path / "missing-*.out"))  # bad input: shown inline, no exception
    assert "no log file matches" in view.errors.message


def test_import_loads_no_ui_library_and_no_pandas():
    import subprocess
    import sys

    code = (
        "import sys, mlite.logs, mlite.logs.plots.session, mlite.synth, mlite.cli.logs; "
        "print([m for m in ('ipywidgets', 'IPython', 'matplotlib', 'pandas', 'tqdm') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True).stdout
    assert out.strip() == "[]"


def test_line_parsers_edge_cases():
    from mlite.logs.formats import megatron, verl_console

    line = (
        "\x1b[36m(TaskRunner pid=7, ip=10.0.0.2)\x1b[0m step:3 - a/b:np.float64(0.5) - n:np.int64(4) - "
        "x:nan - y:-inf - t:tensor(0.25, device='cuda:0') - flag:True - training/global_step:3"
        "\x1b[32m [repeated 2x across cluster]\x1b[0m"
    )
    [(step, keys, vals, bad)] = verl_console.parse_line(line)
    assert step == 3 and not bad
    got = dict(zip(keys, vals))
    assert got["a/b"] == 0.5 and got["n"] == 4.0 and got["y"] == -math.inf and got["t"] == 0.25
    assert got["flag"] == 1.0 and got["training/global_step"] == 3.0 and math.isnan(got["x"])
    # carriage-return progress pieces and two heads on one physical line
    recs = verl_console.parse_line("Epoch 1: 10%|#| 1/10\rstep:1 - l:1.0\rEpoch 1: 20%|##| 2/10 step:2 - l:2.0 ")
    assert [(r[0], r[2]) for r in recs] == [(1, [1.0]), (2, [2.0])]
    assert verl_console.parse_line("Let's go step by step: step:x - 1") == []
    assert verl_console.parse_line("global_step:5 - loss:1.0") == []
    [(_, keys, vals, bad)] = verl_console.parse_line("step:9 - a:1.0 - broken - b:zz - c:3.0")
    assert keys == ["a", "c"] and vals == [1.0, 3.0] and bad
    # a hard wrap through a value and through a separator
    head = "(TaskRunner pid=1) step:4 - actor/pg_loss:0.12 - actor/grad_norm:1.2"
    assert verl_console.join_continuation(head, "5 - actor/ppo_kl:0.001") == head + "5 - actor/ppo_kl:0.001"
    assert verl_console.join_continuation(head + " -", " x:1.0") == head + " - x:1.0"
    assert verl_console.join_continuation(head, "Training Progress: 5%") is None
    assert verl_console.join_continuation(head, "(TaskRunner pid=1) step:5 - a:1") is None

    it = megatron.parse_iteration(
        " [2025-01-01 00:00:00] iteration      100/   10000 | lm loss: NAN | mtp_1 loss: "
        "2.5E+00 | load_balancing_loss: 1.01 | grad norm: 0.5 | number of nan iterations: 1 |"
    )
    assert it[0] == 100 and it[1] == ["lm_loss", "mtp_1_loss", "load_balancing_loss", "grad_norm", "nan_iterations"]
    assert math.isnan(it[2][0]) and it[2][1:] == [2.5, 1.01, 0.5, 1.0] and not it[3]
    val = megatron.parse_validation(
        "validation loss at the end of training for test data | lm loss value: 2.0E+00 | lm loss PPL: 7.389056E+00 | ",
        last_step=500,
    )
    assert val == (500, ["test/lm_loss", "test/lm_loss_ppl"], [2.0, 7.389056], False)
    assert megatron.parse_iteration("saving checkpoint at iteration     100 to /ckpt") is None


def test_text_event_classification():
    from mlite.logs.analysis.events import classify_line

    def kinds(line):
        return [(e.kind, e.message) for e in classify_line(line, 7, 3)]

    assert kinds("[mlite] status: failed (torch.OutOfMemoryError: CUDA out of memory)")[0][0] == "oom"
    assert kinds("[mlite] status: failed (worker 1 exited with code 1)")[0][0] == "exit_code"
    assert kinds("[mlite] status: stopped")[0][0] == "cancelled"
    assert kinds("[mlite] status: completed") == [] and kinds("[mlite] status: running") == []
    assert kinds("slurmstepd: error: *** JOB 42 ON n1 CANCELLED AT 2025-01-01T00:00:00 DUE TO TIME LIMIT ***")[0] == (
        "time_limit",
        "Slurm job 42 on n1 cancelled at 2025-01-01T00:00:00 due to time limit",
    )
    assert (
        kinds("slurmstepd: error: *** STEP 42.0 ON n1 CANCELLED AT 2025-01-01T00:00:00 DUE TO PREEMPTION ***")[0][0]
        == "preempted"
    )
    assert kinds("srun: error: n3: task 5: Killed") == [("exit_code", "srun: task 5 on n3 exited with killed")]
    assert kinds("srun: error: n3: task 5: Exited with exit code 0") == []
    assert kinds("slurmstepd: error: Detected 1 oom_kill event in StepId=42.0.")[0][0] == "oom"
    assert (
        kinds(
            "[rank3]:[E ProcessGroupNCCL.cpp:632] [Rank 3] Watchdog caught collective operation timeout: "
            "WorkNCCL(SeqNum=9, OpType=ALLREDUCE) ran for 600042 milliseconds"
        )[0][0]
        == "nccl_timeout"
    )
    assert kinds("    exitcode  : -9 (pid: 1234)")[0][0] == "exit_code"
    # benign lines that contain the keywords
    assert kinds("(TaskRunner pid=1) 'nccl_timeout': 600, 'timeout': 30") == []
    assert kinds("to avoid running out of memory, lower ppo_micro_batch_size_per_gpu") == []


def test_plot_with_ten_runs_keeps_legend_and_event_labels_clear(tmp_path):
    """Ten runs, each ending in a failure a step or two from the others: one figure legend outside every panel
    (each run named once), and the event labels, written once per step and panel, overlap neither each other nor
    the legend (issue 30: legends covered the data and labels overlapped)."""
    from mlite.logs.plots.plot import figure_png

    endings = ("oom", "nccl_timeout", "cancelled", "time_limit", "oom", "preempted", "oom", "cancelled", "oom", "ok")
    runs = [
        read_log(generate(GenSpec(steps=40 + i, seed=i, ending=e, noise=0), tmp_path / f"run{i}.log").path)
        for i, e in enumerate(endings)
    ]
    fig = plot_runs(runs, ["loss", "grad_norm"])
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    axes = [ax for ax in fig.axes if ax.get_visible()]
    assert all(ax.get_legend() is None for ax in axes)
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == [r.name for r in runs]
    box = legend.get_window_extent(renderer)
    assert not any(box.overlaps(ax.get_window_extent(renderer)) for ax in axes)
    for ax in axes:
        labels = [t for t in ax.texts if t.get_text()]
        steps = {ev.step for r in runs for ev in r.events if ev.kind in ("oom", "nccl_timeout", "cancelled")}
        assert len(labels) >= len(steps) > 3  # one label per step with an event, not one per run
        boxes = [t.get_window_extent(renderer) for t in labels]
        for i, a in enumerate(boxes):
            assert not box.overlaps(a)
            assert not [j for j, b in enumerate(boxes[i + 1 :], i + 1) if a.overlaps(b)], labels[i].get_text()
    assert figure_png(fig)[:4] == b"\x89PNG"
