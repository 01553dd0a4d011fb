"""Synthetic logs with known contents (``mlite.synth``): every format and quirk reads back exactly, and
the events the log was written with (and no others) are found, each at its line and step."""

from __future__ import annotations

import math
import random
import shutil

import pytest
from conftest import REPO

from mlite.logs import read_log, read_logs
from mlite.synth import GenSpec, generate

SAMPLES = REPO / "data" / "logs"

CASES = {
    "grpo_repr": GenSpec(steps=50, seed=1),
    "ppo_3f_oom_spike": GenSpec(kind="ppo", precision="3f", steps=50, seed=2, spikes=(30,), ending="oom"),
    "sft_np_glued_val_timelimit": GenSpec(
        kind="sft", precision="np", glued_tqdm=True, val_every=5, steps=30, seed=3, ending="time_limit"
    ),
    "wrapped_nan_nccl": GenSpec(wrap=173, nan_from=35, steps=45, seed=4, ending="nccl_timeout"),
    "wrapped_np_noansi": GenSpec(wrap=97, precision="np", ansi=False, steps=30, seed=5, ending="exit_code"),
    "restart_preempted": GenSpec(restart=(25, 15), steps=40, seed=6, ending="preempted"),
    "cancelled_gzip_crlf": GenSpec(gzip=True, crlf=True, steps=30, seed=7, ending="cancelled"),
    "traceback": GenSpec(steps=20, seed=8, ending="traceback"),
    "jsonl_bare_nan_restart": GenSpec(
        format="verl_jsonl", nan_from=30, null_nan=False, restart=(20, 11), steps=40, seed=9
    ),
    "jsonl_null_nan_spike": GenSpec(format="verl_jsonl", nan_from=30, steps=40, seed=10, spikes=(18,)),
    "megatron_torchrun": GenSpec(format="megatron", skipped=(1, 2), val_every=5, steps=40, seed=11, ending="oom"),
    "megatron_srun_restart": GenSpec(
        format="megatron", prefix="srun", restart=(30, 22), spikes=(26,), steps=40, seed=12, ending="time_limit"
    ),
    "megatron_hostrank_nan": GenSpec(
        format="megatron", prefix="hostrank", nan_from=33, steps=40, seed=13, ending="cancelled"
    ),
}


def _path(tmp_path, name: str, spec: GenSpec):
    return tmp_path / (name + (".jsonl" if spec.format == "verl_jsonl" else ".log") + (".gz" if spec.gzip else ""))


@pytest.mark.parametrize("name", list(CASES))
def test_generated_log_reads_back_exactly(tmp_path, name):
    spec = CASES[name]
    truth = generate(spec, _path(tmp_path, name, spec))
    run = read_log(truth.path)
    assert run.format == spec.format
    assert run.skipped_lines == 0
    expected = [(step, k, v) for step, values in truth.records for k, v in values.items()]
    t = run.tidy
    got = list(zip(t["step"].tolist(), t["metric"].astype(str).tolist(), t["value"].tolist()))
    assert len(got) == len(expected)
    for (s1, k1, v1), (s2, k2, v2) in zip(got, expected):
        assert (s1, k1) == (s2, k2)
        assert v1 == v2 or (math.isnan(v1) and math.isnan(v2)), (s1, k1, v1, v2)
    assert {e.kind for e in run.events} == truth.events
    steps = {s for s, _ in truth.records}
    assert (run.num_steps, run.first_step, run.last_step) == (len(steps), min(steps), max(steps))


def test_event_positions(tmp_path):
    truth = generate(
        GenSpec(steps=40, seed=21, spikes=(25,), nan_from=33, restart=(36, 30), noise=0), tmp_path / "a.log"
    )
    run = read_log(truth.path)
    lines = truth.path.read_text().split("\n")
    by_kind = {}
    for e in run.events:
        by_kind.setdefault(e.kind, []).append(e)
    spike = next(e for e in by_kind["spike"] if e.metric == "actor/grad_norm")
    assert spike.step == 25 and "step:25 - " in lines[spike.line - 1]
    nan = [e for e in by_kind["nan"] if e.metric == "actor/grad_norm"]
    assert [e.step for e in nan] == [33, 33]  # before and after the restart: two stretches
    assert "step:33 - " in lines[nan[0].line - 1]
    [restart] = by_kind["restart"]
    assert restart.step == 30 and "step:30 - " in lines[restart.line - 1] and "36 to 30" in restart.message
    # the wide view keeps the resumed run's values for the repeated steps
    resumed = [v for s, v in truth.records if s == 31][-1]
    assert run.wide.loc[31, "actor/entropy"] == resumed["actor/entropy"]
    assert run.tidy["step"].tolist().count(31) == 2 * len(resumed)


def test_kl_zero_messages(tmp_path):
    base = "step:{s} - actor/ppo_kl:0.0 - actor/pg_clipfrac:{c} - actor/pg_loss:{p}\n"
    on_policy = tmp_path / "on_policy.log"
    on_policy.write_text("".join(base.format(s=s, c=0.0, p=0.01 * s) for s in range(1, 6)))
    off_policy = tmp_path / "off_policy.log"
    off_policy.write_text("".join(base.format(s=s, c=0.003, p=0.5) for s in range(1, 6)))
    [a] = [e for e in read_log(on_policy).events if e.kind == "kl_zero"]
    assert "pg_clipfrac is 0 too" in a.message and "on-policy" in a.message and a.step == 1 and a.line == 1
    [b] = [e for e in read_log(off_policy).events if e.kind == "kl_zero"]
    assert "is not" in b.message and "flat" in b.message  # clipfrac moves, pg_loss flat
    nonzero = tmp_path / "kl_moves.log"
    nonzero.write_text(
        "".join(base.format(s=s, c=0.0, p=0.1).replace("ppo_kl:0.0", f"ppo_kl:{s}e-4") for s in range(1, 6))
    )
    assert not [e for e in read_log(nonzero).events if e.kind == "kl_zero"]


def test_spike_detector_is_robust(tmp_path):
    """A lone outlier in a noisy series is a spike; quantised 3-decimal values that wobble are not; a falling
    loss is not."""
    import random

    rng = random.Random(0)
    vals = [2.0 * math.exp(rng.gauss(0, 0.1)) for _ in range(60)]
    vals[40] = 9.0
    p = tmp_path / "spike.log"
    p.write_text(
        "".join(
            f"step:{i} - actor/grad_norm:{v!r} - train/loss:{3.0 * math.exp(-i / 20):.3f}\n" for i, v in enumerate(vals)
        )
    )
    spikes = [e for e in read_log(p).events if e.kind == "spike"]
    assert [(e.step, e.metric) for e in spikes] == [(40, "actor/grad_norm")]
    q = tmp_path / "quantised.log"
    q.write_text(
        "".join(f"step:{i} - train/grad_norm:{1.0 + 0.001 * (i % 3):.3f} - train/loss:0.500\n" for i in range(60))
    )
    assert not read_log(q).events


def test_directory_of_mixed_logs(tmp_path):
    for name in ("jsonl_null_nan_spike", "megatron_torchrun", "grpo_repr"):
        generate(CASES[name], _path(tmp_path, name, CASES[name]))
    shutil.copytree(SAMPLES / "mlite_tiny_moe_fsdp2", tmp_path / "fsdp2")  # a real run directory of the kit
    (tmp_path / "notes.md").write_text("not a log")
    runs = read_logs([tmp_path])
    assert sorted(r.name for r in runs) == sorted(["fsdp2", "jsonl_null_nan_spike", "megatron_torchrun", "grpo_repr"])
    assert {r.name: r.format for r in runs} == {
        "fsdp2": "mlite",
        "jsonl_null_nan_spike": "verl_jsonl",
        "megatron_torchrun": "megatron",
        "grpo_repr": "verl",
    }
    assert {r.name: r.role("loss") for r in runs} == {
        "fsdp2": "train/loss",
        "jsonl_null_nan_spike": "actor/pg_loss",
        "megatron_torchrun": "lm_loss",
        "grpo_repr": "actor/pg_loss",
    }


@pytest.mark.parametrize("name", ["mlite_tiny_moe_fsdp2", "mlite_tiny_moe_pao", "mlite_tiny_moe_dist_opt"])
def test_real_run_directories(name):
    """The kit's real debug runs: metrics from metrics.jsonl (40 steps), lifecycle lines from train.log, values
    identical to the train.log console lines, and a completed run has no event."""
    run = read_log(SAMPLES / name)
    assert run.format == "mlite" and (run.num_steps, run.first_step, run.last_step) == (40, 1, 40)
    assert run.skipped_lines == 0 and run.events == []
    console = read_log(SAMPLES / name / "train.log")
    assert console.wide[run.metrics].equals(run.wide)


@pytest.mark.parametrize("width", [50, 53, 64, 80, 101, 132, 200, 317])
def test_hard_wrapped_metric_lines_at_any_terminal_width(tmp_path, width):
    """A terminal wrap cuts anywhere: inside the head, a key, a value, np.float64(...) or a separator."""
    spec = GenSpec(
        wrap=width,
        seed=width,
        precision=("np", "3f", "repr")[width % 3],
        steps=25,
        kind=("grpo", "ppo", "sft")[width % 5 % 3],
        noise=width % 2,
    )
    truth = generate(spec, tmp_path / "wrapped.log")
    run = read_log(truth.path)
    t = run.tidy
    got = list(zip(t["step"].tolist(), t["metric"].astype(str).tolist(), t["value"].tolist()))
    expected = [(s, k, v) for s, values in truth.records for k, v in values.items()]
    assert got == expected and run.skipped_lines == 0


def test_slow_drift_is_a_change_point_with_its_start_step(tmp_path):
    """Loss, grad norm and KL rise x3 over 20 steps from step 30 (no single record jumps): change points that start
    within 15 steps of 30, on those metrics only, and no spike."""
    truth = generate(GenSpec(steps=70, seed=6, drift_from=30, noise=0), tmp_path / "drift.log")
    run = read_log(truth.path)
    cps = [e for e in run.events if e.kind == "change_point"]
    assert {e.metric for e in cps} == {"actor/pg_loss", "actor/grad_norm", "actor/ppo_kl", "actor/kl_loss"}
    assert all(30 <= e.step <= 45 for e in cps), [(e.metric, e.step) for e in cps]
    assert not [e for e in run.events if e.kind == "spike"]
    lines = truth.path.read_text().split("\n")
    assert all(f"step:{e.step} - " in lines[e.line - 1] for e in cps)
    assert truth.events == {"change_point"}


def test_tensorboard_logdir_reads_back_exactly(tmp_path):
    """verl's tensorboard logger (one scalar per event, float32), a restart written into a second event file of the
    same logdir, a spike and NaN: every value as float32 rounds it, the events, tag names as written."""
    from mlite.synth import write_tensorboard

    truth = write_tensorboard(
        GenSpec(steps=40, seed=18, spikes=(18,), nan_from=27, restart=(30, 24)), tmp_path / "tb" / "grpo_run"
    )
    run = read_log(truth.path)
    assert run.format == "tensorboard" and run.name == "grpo_run"
    t = run.tidy
    got = list(zip(t["step"].tolist(), t["metric"].astype(str).tolist(), t["value"].tolist()))
    expected = [(s, k, v) for s, values in truth.records for k, v in values.items()]
    assert len(got) == len(expected)
    assert all(
        a[:2] == b[:2] and (a[2] == b[2] or (math.isnan(a[2]) and math.isnan(b[2]))) for a, b in zip(got, expected)
    )
    assert {e.kind for e in run.events} == truth.events == {"spike", "restart", "nan"}
    [restart] = [e for e in run.events if e.kind == "restart"]
    assert restart.step == 24 and "30 to 24" in restart.message
    assert run.roles()["loss"] == "actor/pg_loss"
    assert read_logs([tmp_path / "tb"])[0].name == "grpo_run"  # a folder of logdirs: one run per logdir


@pytest.mark.parametrize("width", [80, 97, 113, 131, 160, 200, 257])
def test_hard_wrapped_megatron_records_at_any_terminal_width(tmp_path, width):
    """A wrap cuts a Megatron record anywhere after its 'iteration' word: inside the head, a field name, a number,
    a separator; validation records too."""
    spec = GenSpec(
        format="megatron",
        wrap=width,
        seed=width,
        steps=30,
        val_every=7,
        skipped=(2,),
        prefix=("", "torchrun", "srun", "hostrank")[width % 4],
        noise=width % 2,
    )
    truth = generate(spec, tmp_path / "wrapped_megatron.log")
    run = read_log(truth.path)
    t = run.tidy
    got = list(zip(t["step"].tolist(), t["metric"].astype(str).tolist(), t["value"].tolist()))
    expected = [(s, k, v) for s, values in truth.records for k, v in values.items()]
    assert got == expected and run.skipped_lines == 0


# -- plausible values per metric -------------------------------------------------------------------------------------
def _plausible(records: list[tuple[int, dict[str, float]]]) -> None:
    """Every value in its metric's range (clip fractions in [0, 1], 0/1 rewards, lengths up to the configured maximum,
    a fixed small kl_coef, an epoch that is small and never goes down while the steps go up)."""
    from mlite.synth.metrics import KL_COEF, MAX_PROMPT_LENGTH, MAX_RESPONSE_LENGTH

    prev_step = prev_epoch = None
    for step, r in records:
        for k, v in r.items():
            if math.isnan(v):
                continue
            if "clipfrac" in k or k.endswith("/clip_ratio") or k.startswith(("critic/score/", "critic/rewards/")):
                assert 0.0 <= v <= 1.0, (step, k, v)
            if k.startswith(("perf/mfu", "train/mfu")):
                assert 0.0 < v < 1.0, (step, k, v)
            if k.startswith(("timing", "perf/", "response_length/", "prompt_length/")):
                assert v >= 0.0, (step, k, v)
        if "actor/kl_coef" in r:
            assert r["actor/kl_coef"] == KL_COEF
        if "response_length/max" in r:
            assert r["response_length/min"] <= r["response_length/mean"] <= r["response_length/max"]
            assert r["response_length/max"] <= MAX_RESPONSE_LENGTH and r["prompt_length/max"] <= MAX_PROMPT_LENGTH
        if "training/epoch" in r:
            epoch = r["training/epoch"]
            assert epoch.is_integer() and 0 <= epoch <= step / 10, (step, epoch)
            if prev_step is not None and step > prev_step:
                assert epoch >= prev_epoch, (step, epoch, prev_epoch)
            prev_step, prev_epoch = step, epoch


@pytest.mark.parametrize("kind", ["grpo", "ppo", "sft"])
def test_generated_values_are_plausible_for_their_metric(kind):
    from mlite.synth.verl import verl_values

    spec = GenSpec(kind=kind, steps=120, seed=21)
    rng = random.Random(spec.seed)
    _plausible([(step, verl_values(rng, step, spec)) for step in range(1, 121)])


@pytest.mark.parametrize("name", sorted(p.name for p in SAMPLES.glob("synthetic_verl_*")))
def test_sample_logs_hold_plausible_values(name):
    """The committed samples (data/logs/make_samples.py) were written by the plausible generator."""
    run = read_log(SAMPLES / name)
    wide = run.wide
    records = [(int(s), {k: float(v) for k, v in row.items()}) for s, row in zip(wide.index, wide.to_dict("records"))]
    assert records
    _plausible(records)
    assert "actor/kl_coef" not in wide or set(wide["actor/kl_coef"].dropna()) == {0.001}
