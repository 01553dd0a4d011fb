"""Shared test helpers: repository paths and a CLI runner that checks the no-traceback contract."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "reference"


@dataclass
class CliResult:
    rc: int
    out: str
    err: str

    def json(self):
        return json.loads(self.out)


def run_cli(*args: str, timeout: float = 300, env: dict | None = None) -> CliResult:
    """Run ``mlite ARGS`` in a subprocess (the real console entry point's code path)."""
    e = dict(os.environ, PYTHONWARNINGS="ignore", **(env or {}))
    p = subprocess.run(
        [sys.executable, "-m", "mlite.cli", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        env=e,
    )
    return CliResult(p.returncode, p.stdout, p.stderr)


def assert_one_line_error(res: CliResult, *needles: str) -> None:
    """Exit 2, exactly one line on stderr, no traceback, and the line names what is wrong."""
    assert res.rc == 2, (res.rc, res.out, res.err)
    lines = [ln for ln in res.err.splitlines() if ln.strip()]
    assert len(lines) == 1, res.err
    assert "Traceback" not in res.err
    for n in needles:
        assert n in lines[0], (n, lines[0])


@pytest.fixture
def cli():
    return run_cli


@pytest.fixture(scope="session")
def shared_groups() -> dict:
    """``{world: [rank] -> {worker name: result}}``: the workers registered with ``runtime_workers.shares_group``
    (the lite-runtime mesh and dist_opt runs), all in one spawned group per world size 1, 2, 4, so the session pays
    for three groups' start-up and trains their common fsdp2 references once."""
    from runtime_workers import SHARED_WORKERS, shared_group_worker

    from mlite.runtime.dist import run_local

    fns = tuple(SHARED_WORKERS)
    return {w: run_local(shared_group_worker, w, args=(fns,), timeout_s=1200) for w in (1, 2, 4)}


def pytest_collection_modifyitems(config, items):
    """Real-browser tests run last: Playwright's sync API keeps an event loop running in the main thread for the
    whole session, which would change the ground under tests that drive asyncio themselves."""
    browser = REPO / "tests" / "browser"
    items.sort(key=lambda item: browser in Path(str(item.path)).parents)
