"""The log-format registry (mlite.logs.formats.registry): a format is one entry. A toy format registered here (a
sniff and a line reader for ``toy step=3 loss=1.5 gnorm=0.2``, its roles) is detected, read, checked, exported,
plotted and compared by the CLI, the Python API and the curve explorer's session without any other change, and is
gone once unregistered; the built-in formats are each named in their own module only."""

from __future__ import annotations

import ast
import csv
import io
import json
import re
from pathlib import Path

import pytest
from conftest import REPO

import mlite.logs
from mlite.cli import main
from mlite.logs import LogFormat, read_log, read_logs, registry, resolve_inputs, sniff_format
from mlite.logs.formats.registry import LineReader
from mlite.logs.plots.session import CurveSession

_TOY_RE = re.compile(r"toy step=(\d+)((?: \w+=\S+)*)\s*$")


def _parse_toy(line: str):
    m = _TOY_RE.match(line)
    if not m:
        return None
    pairs = [kv.split("=", 1) for kv in m.group(2).split()]
    return int(m.group(1)), [f"toy/{k}" for k, _ in pairs], [float(v) for _, v in pairs]


TOY = LogFormat(
    name="toy",
    label="toy lines",
    sniff=lambda head: head.first.startswith("toy "),
    reader=LineReader(parse=_parse_toy),
    roles={"loss": ("toy/loss",), "grad_norm": ("toy/gnorm",)},
    no_metrics="no 'toy step=N' line",
)
"""The whole toy format: its entry."""

LOSSES = [2.0, 1.5, 1.25, 1.0]


def _write(path, losses=LOSSES, *, scale: float = 1.0):
    lines = ["toy run starting"] + [
        f"toy step={i} loss={v * scale!r} gnorm={0.1 * i!r}" for i, v in enumerate(losses, 1)
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def toy():
    with registry.registered(TOY):
        yield TOY


def _cli(capsys, *args):
    rc = main(["logs", *map(str, args), "--no-progress"])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_detection_and_formats_pick_the_toy_up(tmp_path, toy):
    log = _write(tmp_path / "a.log")
    assert sniff_format(log) == "toy"
    assert "toy" in mlite.logs.FORMATS and mlite.logs.FORMATS[-1] == "unknown"
    [src] = resolve_inputs([tmp_path])  # a folder of logs: the toy file is one source
    assert (src.fmt, src.name) == ("toy", "a")
    (tmp_path / "v.log").write_text("step:1 - train/loss:1.0 - train/lr:0.1\n")
    assert sniff_format(tmp_path / "v.log") == "verl"  # the others still sniff as before


def test_the_python_api_reads_the_toy_with_its_roles(tmp_path, toy):
    run = read_log(_write(tmp_path / "a.log"))
    assert (run.format, run.num_steps, run.first_step, run.last_step) == ("toy", 4, 1, 4)
    assert run.metrics == ["toy/loss", "toy/gnorm"]
    assert run.role("loss") == "toy/loss" and run.roles() == {"loss": "toy/loss", "grad_norm": "toy/gnorm"}
    assert run.series("loss").tolist() == LOSSES
    assert run.loss_span == ("toy/loss", LOSSES[0], LOSSES[-1])
    assert run.events == [] and run.skipped_lines == 0  # a non-record line is not a skipped one (strict=False)


def test_a_toy_log_without_records_gets_the_entrys_no_metrics_message(tmp_path, toy):
    log = tmp_path / "empty.log"
    log.write_text("toy run starting\ntoy run crashed\n")
    run = read_log(log)
    assert run.format == "toy" and run.num_steps == 0
    [ev] = run.events
    assert ev.kind == "no_metrics" and ev.message == TOY.no_metrics


def test_the_cli_checks_exports_plots_and_compares_the_toy(tmp_path, toy, capsys):
    a, b = _write(tmp_path / "a.log"), _write(tmp_path / "b.log", scale=2.0)
    rc, out, _ = _cli(capsys, "check", a, "--json")
    [doc] = json.loads(out)["runs"]
    assert rc == 0 and (doc["format"], doc["num_steps"], doc["metrics"]) == ("toy", 4, ["toy/gnorm", "toy/loss"])
    rc, out, _ = _cli(capsys, "check", a)
    assert rc == 0 and out.strip() == "OK  a  [toy]  4 steps (1..4), toy/loss 2 -> 1, no events"
    csv_path = tmp_path / "a.csv"
    rc, _, _ = _cli(capsys, "export", a, "--csv", csv_path)
    rows = list(csv.DictReader(io.StringIO(csv_path.read_text())))
    assert rc == 0 and [float(r["value"]) for r in rows if r["metric"] == "toy/loss"] == LOSSES
    png = tmp_path / "a.png"
    rc, _, err = _cli(capsys, "plot", a, b, "-o", png, "--metrics", "loss", "grad_norm")
    assert rc == 0, err
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rc, out, _ = _cli(capsys, "compare", a, b, "--json", "--by", "role", "--metrics", "loss")
    cmp = json.loads(out)
    assert rc == 0 and cmp["bitwise_equal"] is False
    [m] = cmp["metrics"]
    assert m["steps"] == 4 and m["max_abs_diff"] == pytest.approx(max(LOSSES))


def test_the_curve_session_offers_the_toys_roles(tmp_path, toy):
    _write(tmp_path / "a.log")
    s = CurveSession()
    s.load(str(tmp_path))
    assert s.summary_rows()[0][:3] == ["a", "toy", 4]
    assert ("[loss]", "loss") in s.metric_options(["a"]) and s.default_metrics(["a"])[:2] == ["loss", "grad_norm"]
    assert s.figure_png(["a"])[:4] == b"\x89PNG"


def test_unregistered_the_toy_is_gone(tmp_path):
    log = _write(tmp_path / "a.log")
    with registry.registered(TOY):
        assert read_log(log).format == "toy"
    assert "toy" not in mlite.logs.FORMATS and registry.get("toy") is None
    run = read_logs([log])[0]
    assert (sniff_format(log), run.format, run.num_steps) == ("verl", "unknown", 0)


def test_a_name_is_registered_once():
    with registry.registered(TOY), pytest.raises(ValueError, match="'toy' is already registered"):
        registry.register(TOY)
    with pytest.raises(ValueError, match="'toy' is not registered"):
        registry.unregister("toy")
    with pytest.raises(ValueError, match="'verl' is already registered"):
        registry.register(LogFormat(name="verl", label="x", sniff=lambda h: False, reader=TOY.reader))


def test_each_builtin_format_is_named_in_its_own_module_only():
    """The name of a built-in format appears as a string in its registry module and nowhere else in the log code
    (no if-chain dispatches on it)."""
    from mlite.logs import formats

    modules = [m for m in vars(formats).values() if hasattr(m, "FORMAT") and hasattr(m, "__file__")]
    homes = {m.FORMAT.name: Path(m.__file__) for m in modules}
    assert set(homes) == {f.name for f in registry.entries()} and len(homes) == 7
    files = sorted((REPO / "mlite" / "logs").rglob("*.py")) + [REPO / "mlite" / "cli" / "logs.py"]
    for path in files:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value in homes:
                assert path == homes[node.value], f"{path.relative_to(REPO)}:{node.lineno} names '{node.value}'"
