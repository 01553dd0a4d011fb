"""The launcher header's predicted step (issue 25): ``mlite export`` states ``mlite time``'s prediction for the plan
and the options its fits verdict uses, on ``--hardware`` (default: the ``--gpu-mem`` GPU's profile, else H200), and
the command in the line reproduces it."""

from __future__ import annotations

import re
import shlex

import pytest
from conftest import assert_one_line_error, run_cli

LINE = re.compile(
    r"^# predicted step: (?P<step>[\d.e+-]+) s, (?P<tps>[\d,]+) tokens/s/GPU, MFU (?P<mfu>[\d.]+) % on (?P<hw>\S+) "
    r"\(mlite time; assumptions: (?P<cmd>mlite time .* --json)\)$"
)


def _header_prediction(out_dir) -> re.Match:
    launcher = next(p for p in out_dir.iterdir() if p.suffix == ".sh")
    found = [m for ln in launcher.read_text().splitlines() if (m := LINE.match(ln))]
    assert len(found) == 1, launcher.read_text()[:3000]
    return found[0]


def _same_numbers(m: re.Match, doc: dict) -> None:
    assert m["step"] == f"{doc['step_s']:.3g}"
    assert m["tps"] == f"{doc['tokens_per_s_per_gpu']:,.0f}"
    assert m["mfu"] == f"{100 * doc['mfu']:.1f}"
    assert m["hw"] == doc["hardware"]["name"]


CASES = {
    # (export flags beyond the mesh, the mesh flags mlite time takes as they are, the profile the header names)
    "megatron-moe": (
        ["Qwen3-30B-A3B", "--nodes", "2", "--target", "verl-megatron-grpo", "--gpu-mem", "H100"],
        ["--ep", "8", "--cp", "2", "--pao", "--grad-dtype", "bf16"],
        "H100",
    ),
    "sft-dense-hardware": (
        ["Llama-3.1-70B", "--nodes", "4", "--target", "verl-mlite-sft", "--gpu-mem", "H100", "--hardware", "B200"],
        ["--tp", "8", "--pp", "4", "--vpp", "5"],
        "B200",
    ),
    "default-h200": (
        ["Qwen3-8B", "--nodes", "1", "--target", "verl-mlite-grpo", "--gpu-mem", "100"],
        ["--tp", "2", "--recompute", "full"],
        "H200",
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_header_states_mlite_times_prediction(case, tmp_path):
    export, mesh, hw = CASES[case]
    out = tmp_path / "out"
    res = run_cli("export", *export, *mesh, "--out", out)
    assert res.rc == 0, res.err
    m = _header_prediction(out)
    assert m["hw"] == hw
    assert f"predicted step: {m['step']} s" in res.out  # the console says it too
    # the command the header names prints the same numbers
    words = shlex.split(m["cmd"])
    assert words[:3] == ["mlite", "time", export[0]] and words[words.index("--hardware") + 1] == hw
    shown = run_cli(*words[1:])
    assert shown.rc == 0, shown.err
    _same_numbers(m, shown.json())
    # and so does mlite time with the export's own flags (the same model, GPUs and options)
    ngpu = int(export[export.index("--nodes") + 1]) * 8
    mine = run_cli("time", export[0], "--ngpu", ngpu, *mesh, "--hardware", hw, "--json")
    assert mine.rc == 0, mine.err
    _same_numbers(m, mine.json())


def test_an_uneven_layout_the_planner_chose_is_in_the_command(tmp_path):
    # DeepSeek-V3's 61 layers do not split over 4 stages: the export runs the planner's layout, the command says it
    out = tmp_path / "out"
    res = run_cli(
        "export", "DeepSeek-V3", "--nodes", "32", "--pp", "4", "--ep", "32", "--gpu-mem", "H200",
        "--target", "verl-megatron-grpo", "--out", out,
    )  # fmt: skip
    assert res.rc == 0, res.err
    m = _header_prediction(out)
    words = shlex.split(m["cmd"])
    assert "--pp-layout" in words
    shown = run_cli(*words[1:])
    assert shown.rc == 0, shown.err
    _same_numbers(m, shown.json())


def test_a_bad_hardware_writes_nothing(tmp_path):
    out = tmp_path / "out"
    res = run_cli(
        "export", "Qwen3-8B", "--nodes", "1", "--target", "verl-mlite-sft", "--hardware", "TPUv9", "--out", out
    )
    assert_one_line_error(res, "--hardware")
    assert not out.exists()
