"""``mlite logs check|export|plot|compare`` through the real console entry point: the JSON contract, exit
codes, one-line errors, and a bitwise CSV round trip."""

from __future__ import annotations

import csv
import io
import json
import math
import shutil

from conftest import REPO, assert_one_line_error, run_cli

from mlite.logs import EVENT_KINDS, read_log
from mlite.synth import GenSpec, generate

LOGS = REPO / "tests" / "data" / "logs"
SAMPLES = REPO / "data" / "logs"
RUN_KEYS = {"path", "format", "num_steps", "first_step", "last_step", "metrics", "events", "skipped_lines"}
EVENT_KEYS = {"kind", "line", "step", "metric", "message"}


def _ref(prefix: str) -> str:
    return str(next(LOGS.glob(prefix + "*")))


def test_check_json_contract(tmp_path):
    oom = generate(GenSpec(steps=30, seed=3, nan_from=25, ending="oom"), tmp_path / "oom.out").path
    res = run_cli("logs", "check", _ref("22_"), _ref("09_"), str(oom), "--json")
    assert res.rc == 0, res.err  # failures found is not an error of check itself
    doc = res.json()
    assert set(doc) == {"runs", "skipped"} and len(doc["runs"]) == 3 and doc["skipped"] == []
    for run in doc["runs"]:
        assert set(run) == RUN_KEYS
        for ev in run["events"]:
            assert set(ev) == EVENT_KEYS and ev["kind"] in EVENT_KINDS
    slurm, meg, gen = doc["runs"]
    assert slurm["num_steps"] == 0 and slurm["first_step"] is None and slurm["format"] == "unknown"
    assert {e["kind"] for e in slurm["events"]} == {"no_metrics", "traceback", "exit_code", "cancelled"}
    assert (meg["format"], meg["num_steps"], meg["first_step"], meg["last_step"]) == ("megatron", 26, 10, 260)
    assert "val/lm_loss" in meg["metrics"] and meg["skipped_lines"] == 0
    assert {"nan", "oom", "traceback", "exit_code"} <= {e["kind"] for e in gen["events"]}
    nan = next(e for e in gen["events"] if e["kind"] == "nan")
    assert nan["step"] == 25 and nan["metric"] in gen["metrics"] and isinstance(nan["line"], int)


def test_check_skips_files_that_are_not_logs_among_several(tmp_path):
    """``mlite logs check data/logs/*`` (the shell's expansion or a quoted glob) leaves the README and the script out
    in one line, instead of reading their prose as Megatron logs; the one file named alone gets a clear refusal."""
    logs = tmp_path / "logs"
    logs.mkdir()
    for name in ("README.md", "make_samples.py", "synthetic_megatron_gpt_4x8_restart_preempted.out"):
        shutil.copy(SAMPLES / name, logs / name)
    shutil.copytree(SAMPLES / "mlite_tiny_moe_fsdp2", logs / "mlite_tiny_moe_fsdp2")
    (logs / "slurm-77").write_text("Traceback (most recent call last):\nRuntimeError: boom\n")  # no suffix: read
    record = {"step": 1, "data": {"actor/loss": 0.5}}
    (logs / "metrics.json").write_text(json.dumps(record) + "\n")  # a .json holding records: read
    expected = ["mlite_tiny_moe_fsdp2", "slurm-77", "synthetic_megatron_gpt_4x8_restart_preempted"]
    for args in ([str(logs / "*")], sorted(str(p) for p in logs.iterdir())):
        res = run_cli("logs", "check", *args)
        assert res.rc == 0, res.err
        assert res.out.splitlines()[0] == "skipped 2 file(s) that are not training logs: README.md, make_samples.py"
        doc = run_cli("logs", "check", *args, "--json").json()
        assert doc["skipped"] == [str(logs / "README.md"), str(logs / "make_samples.py")]
        names = sorted(r["path"].rsplit("/", 1)[-1].removesuffix(".out") for r in doc["runs"])
        assert names == sorted([*expected, "metrics.json"]), names
        assert all("README" not in r["path"] for r in doc["runs"])
    assert_one_line_error(run_cli("logs", "check", logs / "README.md"), "README.md' is not a training log", ".md")
    assert_one_line_error(
        run_cli("logs", "check", logs / "README.md", logs / "make_samples.py"), "no log among the inputs"
    )


def test_check_exit_codes_and_errors(tmp_path):
    assert run_cli("logs", "check", _ref("22_"), "--strict").rc == 1
    assert run_cli("logs", "check", _ref("05_"), "--strict").rc == 0
    spiky = generate(GenSpec(steps=40, seed=4, spikes=(30,), noise=0), tmp_path / "spiky.log").path
    assert run_cli("logs", "check", str(spiky), "--strict").rc == 0  # a spike is a warning
    assert run_cli("logs", "check", str(spiky), "--fail-on", "spike,oom").rc == 1
    assert_one_line_error(run_cli("logs", "check", str(spiky), "--fail-on", "bogus"), "--fail-on", "bogus")
    assert_one_line_error(run_cli("logs", "check", str(tmp_path / "missing.out")), "missing.out", "does not exist")
    assert_one_line_error(run_cli("logs", "check", str(tmp_path / "nothing-*.out")), "no log file matches")
    empty = tmp_path / "empty_dir"
    empty.mkdir()
    assert_one_line_error(run_cli("logs", "check", str(empty)), "holds no log file")
    human = run_cli("logs", "check", _ref("04_"))
    assert human.rc == 0 and "kl_zero" in human.out and "L1726" in human.out


def test_export_csv_round_trip_is_bitwise(tmp_path):
    nan_log = generate(GenSpec(steps=20, seed=5, nan_from=15, precision="np"), tmp_path / "nan.log").path
    files = [_ref("21_"), _ref("01_"), _ref("09_"), str(nan_log)]
    out = tmp_path / "all.csv"
    res = run_cli("logs", "export", *files, "--csv", str(out))
    assert res.rc == 0, res.err
    rows = list(csv.reader(out.open(newline="")))
    assert rows[0] == ["run", "step", "metric", "value"]
    expected = []
    for f in files:
        run = read_log(f)
        t = run.tidy
        expected += list(
            zip([run.name] * len(t), t["step"].tolist(), t["metric"].astype(str).tolist(), t["value"].tolist())
        )
    assert len(rows) - 1 == len(expected)
    for (run, step, metric, value), (r2, s2, m2, v2) in zip(rows[1:], expected):
        assert (run, int(step), metric) == (r2, s2, m2)
        x = float(value)
        assert value == repr(x)  # repr precision
        assert (math.isnan(x) and math.isnan(v2)) or x.hex() == v2.hex()  # bitwise
    stdout = run_cli("logs", "export", _ref("02_"), "--csv", "-")
    assert stdout.rc == 0 and stdout.out.startswith("run,step,metric,value\n")
    back = list(csv.DictReader(io.StringIO(stdout.out)))
    assert len(back) == 31 and back[0]["value"] == "1.0605114698410034" and back[1]["metric"] == "train/lr(1e-3)"
    assert_one_line_error(
        run_cli("logs", "export", _ref("02_"), "--csv", str(tmp_path / "no" / "x.csv")), "does not exist"
    )


def test_plot_writes_png(tmp_path):
    png = tmp_path / "curves.png"
    res = run_cli(
        "logs",
        "plot",
        _ref("01_"),
        str(SAMPLES / "synthetic_verl_grpo_2x8_spike_nan_oom.out"),
        "-o",
        str(png),
        "--metrics",
        "loss",
        "grad_norm",
        "kl",
        "actor/entropy",
        "--smooth",
        "0.8",
    )
    assert res.rc == 0, res.err
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    assert_one_line_error(run_cli("logs", "plot", _ref("01_"), "-o", str(png), "--metrics", "no/such"), "no/such")
    assert_one_line_error(run_cli("logs", "plot", _ref("01_"), "-o", str(png), "--smooth", "1.5"), "smoothing")


def _nudged_copy(src, dst, step: int):
    """A copy of run directory ``src`` whose train/loss at ``step`` is moved by one ulp (the smallest difference
    a float64 can have): compare must find it, at that step."""
    import json
    import shutil

    shutil.copytree(src, dst)
    rows = [json.loads(ln) for ln in (dst / "metrics.jsonl").read_text().splitlines()]
    for r in rows:
        if r["step"] == step:
            r["data"]["train/loss"] = math.nextafter(r["data"]["train/loss"], math.inf)
    (dst / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return dst


def test_compare(tmp_path):
    fsdp2, pao = (str(SAMPLES / n) for n in ("mlite_tiny_moe_fsdp2", "mlite_tiny_moe_pao"))
    dist = str(_nudged_copy(SAMPLES / "mlite_tiny_moe_fsdp2", tmp_path / "fsdp2_one_ulp", 7))
    same = run_cli("logs", "compare", fsdp2, pao, "--json")
    assert same.rc == 0
    doc = same.json()
    assert doc["bitwise_equal"] is True and doc["common_steps"] == 40
    assert {m["metric"] for m in doc["metrics"]} == {"train/loss", "train/grad_norm", "train/lr"}
    assert "perf/cpu_memory_used_gb" in doc["ignored"]
    diff = run_cli("logs", "compare", fsdp2, dist, "--json").json()
    loss = next(m for m in diff["metrics"] if m["metric"] == "train/loss")
    assert diff["bitwise_equal"] is False and not loss["bitwise_equal"] and 0 < loss["max_rel_diff"] < 1e-15
    assert loss["first_diff_step"] == 7
    strict = run_cli("logs", "compare", fsdp2, dist, "--strict")
    assert strict.rc == 1 and "NOT bitwise equal" in strict.out and "train/loss" in strict.out
    by_role = run_cli("logs", "compare", fsdp2, _ref("09_"), "--by", "role", "--json").json()
    loss = next(m for m in by_role["metrics"] if m["metric"] == "loss")
    assert (loss["metric_a"], loss["metric_b"]) == ("train/loss", "lm_loss") and loss[
        "steps"
    ] == 3  # 20, 30, 40 (10 was skipped)
    assert_one_line_error(run_cli("logs", "compare", fsdp2, dist, "--metrics", "nope"), "nope")
