"""The real third-party logs of ``tests/data/logs/`` that are byte-identical copies of the shared reference set
(``01_`` .. ``22_``, see its README): every file parses, and for most of them the values at chosen steps, the step
counts and the events are checked against what the files say (values read by hand from the files). The logs
found later (``23_`` on) are tested in ``test_logs_real.py``."""

from __future__ import annotations

import re

import pytest
from conftest import REPO

from mlite.logs import EVENT_KINDS, check_logs, read_log

LOGS = REPO / "tests" / "data" / "logs"
SHARED = ("01", "02", "03", "04", "05", "07", "08", "09", "11", "21", "22")
"""Prefixes of the copies of the shared reference set."""
FILES = sorted(p for p in LOGS.iterdir() if p.suffix in (".log", ".err") and p.name[:2] in SHARED)


def _log(prefix: str):
    [path] = [p for p in FILES if p.name.startswith(prefix)]
    return read_log(path)


def _kinds(run) -> set[str]:
    return {e.kind for e in run.events}


def test_reference_copies_are_present():
    assert len(FILES) == 11
    assert (LOGS / "README.md").is_file()


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name[:2])
def test_every_reference_log_parses(path):
    run = read_log(path)
    assert run.skipped_lines == 0
    assert {e.kind for e in run.events} <= set(EVENT_KINDS)
    text = path.read_bytes().decode("utf-8", "replace")
    heads = re.findall(r"(?<![\w/.])step:(\d+) - ", text) + re.findall(r"iteration\s+(\d+)/\s*\d+ \|", text)
    # every metric line in the file is recovered (no step is missed)
    assert {int(s) for s in heads} == set(run.wide.index.tolist())
    for e in run.events:
        assert e.message and (e.line is None or 1 <= e.line <= run.num_lines)


def test_01_verl_ppo_resumed_ansi_3_decimals():
    run = _log("01_")
    assert run.format == "verl"
    assert (run.num_steps, run.first_step, run.last_step) == (335, 101, 435)
    w = run.wide
    assert w.loc[101, "actor/pg_loss"] == 0.019
    assert w.loc[101, "critic/grad_norm"] == 19.522
    assert w.loc[101, "perf/throughput"] == 326.485
    assert w.loc[102, "actor/ppo_kl"] == -0.001
    assert w.loc[110, "val-core/openai/gsm8k/reward/mean@1"] == 0.892
    assert w.loc[435, "actor/grad_norm"] == 2.093
    assert w.loc[435, "val-core/openai/gsm8k/reward/mean@1"] == 0.867
    assert run.roles()["kl"] == "actor/ppo_kl" and run.roles()["loss"] == "actor/pg_loss"
    # a clean run: no failure, no restart (resumed at 101 but the log never goes back), KL not all zero
    assert not _kinds(run) & {
        "nan",
        "inf",
        "oom",
        "nccl_timeout",
        "cancelled",
        "exit_code",
        "traceback",
        "no_metrics",
        "restart",
        "kl_zero",
    }


def test_02_sft_glued_tqdm_spliced_runs():
    run = _log("02_")
    assert (run.num_steps, run.first_step, run.last_step) == (15, 1, 250)
    assert sorted(run.wide.index) == list(range(1, 11)) + list(range(246, 251))
    w = run.wide
    assert w.loc[1, "train/loss"] == 1.0605114698410034
    assert w.loc[2, "train/loss"] == 1.0065364837646484  # glued behind "...9.45s/it]"
    assert w.loc[10, "train/lr(1e-3)"] == 0.002702702702702703
    assert w.loc[246, "train/loss"] == 0.5490185022354126
    assert w.loc[250, "train/loss"] == 0.5836241245269775
    assert w.loc[250, "val/loss"] == 0.5834625363349915
    assert run.role("loss") == "train/loss" and run.role("lr") == "train/lr(1e-3)"
    assert "restart" not in _kinds(run)  # 10 -> 246 goes forward


def test_03_early_crash_no_metrics_ray_task_error():
    run = _log("03_")
    assert run.num_steps == 0 and run.format == "verl"
    assert _kinds(run) == {"no_metrics", "traceback"}
    [tb] = [e for e in run.events if e.kind == "traceback"]
    assert "RayTaskError(NotImplementedError)" in tb.message and tb.message.endswith("-> NotImplementedError")
    assert tb.line == 265 and tb.step is None


def test_04_grpo_kl_zero_on_policy():
    run = _log("04_")
    assert (run.num_steps, run.first_step, run.last_step) == (2, 1, 2)
    w = run.wide
    assert w.loc[1, "actor/pg_loss"] == 6.183079727109635e-10
    assert w.loc[2, "actor/grad_norm"] == 0.7876539826393127
    assert w.loc[1, "perf/total_num_tokens"] == 2740470
    assert (w["actor/ppo_kl"] == 0).all() and (w["actor/pg_clipfrac"] == 0).all()
    [kl] = [e for e in run.events if e.kind == "kl_zero"]
    assert kl.metric == "actor/ppo_kl" and kl.step == 1 and kl.line == 1726
    assert "actor/pg_clipfrac is 0 too" in kl.message and "on-policy" in kl.message
    tbs = [e for e in run.events if e.kind == "traceback"]
    assert any("TypeError: cannot unpack non-iterable NoneType object" in e.message for e in tbs)


def test_05_step0_validation_only():
    run = _log("05_")
    assert (run.num_steps, run.first_step, run.last_step) == (2, 0, 1)
    t = run.tidy
    step0 = t[t.step == 0]
    assert len(step0) == 13 and all(m.startswith(("val-aux/", "val-core/")) for m in step0.metric)
    w = run.wide
    assert w.loc[0, "val-aux/char_count/reward/mean@1"] == 0.121524201853759
    assert w.loc[1, "actor/ppo_kl"] == 0.00015248422758824226
    assert w.loc[1, "perf/throughput"] == 3283.320414789452
    assert not run.events


def test_07_wandb_only_no_console_metrics():
    run = _log("07_")
    [ev] = run.events
    assert ev.kind == "no_metrics" and "33/15625" in ev.message and "console" in ev.message


def test_08_init_crash_interleaved_raylet():
    run = _log("08_")
    assert run.num_steps == 0
    msgs = [e.message for e in run.events if e.kind == "traceback"]
    assert any("AssertionError: failed to get register_center_actor" in m for m in msgs)
    assert any(m.startswith("ImportError") and "flash_attn_2_cuda" in m for m in msgs)
    assert run.events[0].kind == "no_metrics"


def test_09_megatron_fp16_skips_and_validation():
    run = _log("09_")
    assert run.format == "megatron"
    assert (run.num_steps, run.first_step, run.last_step) == (26, 10, 260)
    w = run.wide
    assert w.loc[10, "loss_scale"] == 8388608.0 and w.loc[10, "skipped_iterations"] == 10
    assert "lm_loss" not in run.tidy[run.tidy.step == 10].metric.tolist()  # all 10 iterations skipped
    assert w.loc[20, "lm_loss"] == 10.72453 and w.loc[20, "grad_norm"] == 3.874 and w.loc[20, "num_zeros"] == 71.0
    assert w.loc[30, "lm_loss"] == 10.38769
    assert "grad_norm" not in run.tidy[run.tidy.step == 30].metric.tolist()
    assert w.loc[20, "elapsed_time_per_iteration_ms"] == 820.7 and w.loc[20, "learning_rate"] == 4e-05
    assert w.loc[50, "val/lm_loss"] == 8.88954 and w.loc[50, "val/lm_loss_ppl"] == 7255.679
    assert run.series("val/lm_loss").index.tolist() == [50, 100, 150, 200, 250]
    assert w.loc[260, "lm_loss"] == 6.939181 and w.loc[260, "consumed_samples"] == 4160
    assert not _kinds(run) & {"nan", "restart", "no_metrics", "traceback"}


def test_11_megatron_hostrank_prefix():
    run = _log("11_")
    assert (run.num_steps, run.first_step, run.last_step) == (7, 50, 350)
    w = run.wide
    assert w.loc[50, "lm_loss"] == 6.258318 and w.loc[50, "grad_norm"] == 1.52
    assert w.loc[50, "throughput_per_gpu"] == 134.0 and w.loc[50, "consumed_samples"] == 50400
    assert w.loc[350, "lm_loss"] == 3.181144 and w.loc[350, "learning_rate"] == 5.6e-05
    assert run.role("throughput") == "throughput_per_gpu"


def test_21_numpy_scalar_values():
    run = _log("21_")
    assert (run.num_steps, run.first_step, run.last_step) == (8, 71, 78)
    w = run.wide
    assert w.loc[71, "critic/vf_loss"] == 0.007003280876688223  # np.float64(0.007003280876688223)
    assert w.loc[71, "actor/entropy"] == 0.1194450631737709  # bare float on the same line
    assert w.loc[71, "training/global_step"] == 71
    assert w.loc[78, "perf/throughput"] == 1217.2562416538915
    assert w.loc[78, "actor/ppo_kl"] == 0.0001464904675572143
    assert w.loc[74, "actor/pg_clipfrac_lower"] == 2.2163119865581393e-05


def test_22_slurm_cancelled_exit_codes():
    run = _log("22_")
    assert run.num_steps == 0 and run.format == "unknown"
    assert _kinds(run) == {"no_metrics", "traceback", "exit_code", "cancelled"}
    exits = [e for e in run.events if e.kind == "exit_code"]
    assert next((e.line, "task 3" in e.message, "ault44" in e.message) for e in exits) == (83, True, True)
    assert len(exits) == 2 and all("exit code 1" in e.message for e in exits)
    cancelled = [e for e in run.events if e.kind == "cancelled"]
    assert cancelled[0].line == 86 and "524549" in cancelled[0].message
    [tb] = [e for e in run.events if e.kind == "traceback"]
    assert "Address already in use" in tb.message and "seen 2 times" in tb.message


# spike events by eye: every other stretch of every file is healthy and must stay quiet
HEALTHY_EXCEPT = {
    # the critic's grad norm jumps to 51.8 (median ~9), 26.7 and 42.5 (median ~6.8); the actor's to 3.889 (median
    # 2.04); actor/pg_loss to 0.774 and 0.645 at 357-358 (median -0.106)
    "01": {
        (163, "critic/grad_norm"),
        (302, "critic/grad_norm"),
        (304, "critic/grad_norm"),
        (335, "actor/grad_norm"),
        (357, "actor/pg_loss"),
    },
}


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name[:2])
def test_no_spike_on_healthy_stretches(path):
    run = read_log(path)
    spikes = {(e.step, e.metric) for e in run.events if e.kind == "spike"}
    assert spikes == HEALTHY_EXCEPT.get(path.name[:2], set())


def test_01_only_change_point_is_the_critic_grad_norm_episode():
    """critic/grad_norm sits at 20.3, 34.8, 39.4, 29.6, 18.8, 21.8 ... 31.1, 32.7 over steps 191-206 against ~11
    before: the one drift the CUSUM reports; the wobble of the rest of the run does not add up."""
    run = _log("01_")
    cps = [e for e in run.events if e.kind == "change_point"]
    assert [(e.step, e.metric) for e in cps] == [(190, "critic/grad_norm")]
    assert "drifts upward from step 190" in cps[0].message


def test_check_keeps_no_values_but_same_summary():
    full = [read_log(p).summary() for p in FILES]
    light = [r.summary() for r in check_logs(FILES)]
    assert full == light
