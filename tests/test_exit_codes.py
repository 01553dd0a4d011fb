"""One exit-code rule for every command (:data:`mlite.cli.EXIT_CODES`): 0 done and yes; 1 a verdict the user asked
for is no, the reasons on stdout; 2 input the command cannot act on, one line on stderr, nothing written.

Each command is run in-process through :func:`mlite.cli.main` (the console entry point's function) from a tmp folder;
``tests/test_cli_edge.py`` runs the same commands as subprocesses."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import REPO

from mlite.cli import EXIT_CODES, _commands, main

SAMPLES = REPO / "data" / "logs"
ROLLOUT = ("--rollout", "vllm", "--rollout-tp", "1", "--prompt-len", "64", "--response-len", "64")
ROLLOUT += ("--rollout-n", "2", "--rollout-batch", "4")
INVALID = ("--ngpu", "2", "--tp", "3")  # 2 GPUs are not divisible by TP 3


def _mlite(capsys, *args) -> tuple[int, str, str]:
    """``mlite ARGS`` in-process: (exit code, stdout, stderr); argparse's exits are caught."""
    try:
        rc = main([str(a) for a in args])
    except SystemExit as e:
        rc = int(e.code or 0)
    out, err = capsys.readouterr()
    return rc, out, err


def _verdict_no(res) -> None:
    rc, out, err = res
    assert rc == 1, res
    assert out.strip() and "Traceback" not in out + err and err == "", res


def _bad_input(res, *needles: str) -> None:
    rc, out, err = res
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == 2 and len(lines) == 1 and out == "" and "Traceback" not in err, res
    for n in needles:
        assert n in lines[0], (n, lines[0])


@pytest.fixture
def here(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLITE_RUNS", str(tmp_path / "default-runs"))
    return tmp_path


def test_the_rule_is_printed_by_help_and_quoted_once_in_the_readme(capsys):
    rc, out, _ = _mlite(capsys, "--help")
    assert rc == 0 and EXIT_CODES in out
    readme = " ".join(REPO.joinpath("README.md").read_text().split())
    rules = re.split(r"\n  (?=[012]  )", EXIT_CODES)
    assert len(rules) == 4  # the title and the three codes
    for rule in rules[1:]:
        code, text = rule.split(maxsplit=1)
        assert f"- {code} {' '.join(text.split())}" in readme, rule
    assert readme.count("Exit codes (every command") == 1


@pytest.mark.parametrize("name", [m.COMMAND for m in _commands()])
def test_argparse_errors_name_the_sub_command(capsys, name):
    extra = ("check",) if name == "logs" else ()
    rc, out, err = _mlite(capsys, name, *extra, "--no-such-flag")
    prog = " ".join(("mlite", name, *extra))
    assert rc == 2 and out == "" and err.startswith(f"{prog}: error: "), err
    assert err.count("\n") == 1 and f"(see {prog} --help)" in err


def test_mesh_judges_a_mesh(capsys, here):
    assert _mlite(capsys, "mesh", "tiny-moe", "--ngpu", "2")[0] == 0
    _verdict_no(_mlite(capsys, "mesh", "tiny-moe", *INVALID))
    _bad_input(_mlite(capsys, "mesh", "no-such-model", "--ngpu", "2"), "no-such-model")


def test_memory_judges_fit_and_mesh(capsys, here):
    assert _mlite(capsys, "memory", "tiny-moe", "--ngpu", "2")[0] == 0
    _verdict_no(_mlite(capsys, "memory", "Llama-3.1-70B", "--ngpu", "1"))  # does not fit
    _verdict_no(_mlite(capsys, "memory", "tiny-moe", *INVALID))
    _bad_input(_mlite(capsys, "memory", "tiny-moe", "--ngpu", "2", "--gpu-mem", "lots"), "--gpu-mem")


def test_rl_memory_judges_the_mesh(capsys, here):
    _verdict_no(_mlite(capsys, "rl-memory", "tiny-moe", *INVALID, *ROLLOUT))
    _bad_input(_mlite(capsys, "rl-memory", "tiny-moe", "--ngpu", "0", *ROLLOUT), "--ngpu")


def test_export_of_an_invalid_mesh_is_bad_input_and_writes_nothing(capsys, here):
    args = ("export", "tiny-moe", "--nodes", "1", "--gpus-per-node", "2", "--target", "verl-mlite-sft")
    assert _mlite(capsys, *args, "--out", "ok")[0] == 0 and (here / "ok" / "plan.json").is_file()
    for json_flag in ((), ("--json",)):
        res = _mlite(capsys, *args, "--tp", "3", "--out", "bad", *json_flag)
        _bad_input(res, "mlite export: invalid mesh", "not divisible by TP")
        assert not (here / "bad").exists()


def test_run_of_an_invalid_mesh_is_bad_input_and_starts_nothing(capsys, here):
    run = ("run", "--model", "tiny-moe", "--steps", "2", "--nproc", "2", "--device", "cpu")
    _bad_input(_mlite(capsys, *run, "--tp", "3", "--out", "r"), "mlite run: mesh:", "is not a valid mesh")
    assert not (here / "r").exists() and not (here / "default-runs").exists()


def test_import_launcher_judges_the_launchers_mesh(capsys, here):
    bad = here / "bad.sh"
    bad.write_text(
        "#!/bin/bash\nTP=3\npython3 -m verl.trainer.main_ppo actor_rollout_ref.actor.megatron."
        "tensor_model_parallel_size=${TP} trainer.nnodes=1 trainer.n_gpus_per_node=8\n"
    )
    _verdict_no(_mlite(capsys, "import-launcher", bad, "--config", "Qwen3-8B"))
    _bad_input(_mlite(capsys, "import-launcher", here / "missing.sh"), "missing.sh")


def test_logs_verdicts_only_when_asked(capsys, here):
    crash = SAMPLES / "mlite_tiny_moe_crash"
    assert _mlite(capsys, "logs", "check", crash)[0] == 0  # finding failures is the job
    _verdict_no(_mlite(capsys, "logs", "check", crash, "--strict"))
    a, b = SAMPLES / "mlite_tiny_moe_fsdp2", SAMPLES / "mlite_tiny_moe_dist_opt"
    assert _mlite(capsys, "logs", "compare", a, b)[0] == 0
    _verdict_no(_mlite(capsys, "logs", "compare", a, b, "--strict"))
    _bad_input(_mlite(capsys, "logs", "check", here / "missing.log"), "missing.log")
