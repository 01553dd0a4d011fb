"""Every ``$ mlite ...`` command of the README's console blocks, run as a new user would: from an empty folder
outside the repository (one folder for the whole README, so that a block's later commands find what its earlier
ones wrote: ``runs/moe`` for ``mlite logs export runs/moe``), or from the repository root for the rest of a block
after its ``$ cd mlite-lab`` line (commands that read the repository's launchers and sample logs). Each command's
exit code is what its ``# exit N`` comment says (0 without one), and its first line of output is the line the
README shows under it: compared with runs of spaces collapsed, and the run folder's absolute path written as the
README writes it, relative (``run directory runs/moe``).

A block is one test (its commands depend on each other); the README's blocks are found by their line numbers.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass

import pytest
from conftest import REPO

README = REPO / "README.md"
REPO_ROOT_CD = "cd mlite-lab"
"""The line that moves a block into the repository root (the folder a clone makes)."""


@dataclass(frozen=True)
class Command:
    line: int
    """README line of the command."""
    words: tuple[str, ...]
    """The command line, ``mlite`` first, without its comment."""
    exit_code: int
    """What its ``# exit N`` comment says (0 without one)."""
    first_line: str | None
    """The line the README shows under it (None when it shows none)."""
    in_repo: bool
    """Run from the repository root (after ``$ cd mlite-lab`` in its block)."""


def console_blocks(text: str) -> list[tuple[int, list[Command]]]:
    """``(first line number, commands)`` of every ```` ```console ```` block that has a ``$ mlite`` command."""
    lines = text.splitlines()
    out, i = [], 0
    while i < len(lines):
        if lines[i].strip() != "```console":
            i += 1
            continue
        start, i, cmds, in_repo = i + 1, i + 1, [], False
        while i < len(lines) and lines[i].strip() != "```":
            ln = lines[i]
            if not ln.startswith("$ "):
                i += 1
                continue
            at, parts = i + 1, [ln[2:]]
            while parts[-1].rstrip().endswith("\\"):
                parts[-1] = parts[-1].rstrip()[:-1]
                i += 1
                parts.append(lines[i])
            i += 1
            text_cmd = " ".join(p.strip() for p in parts)
            words = tuple(shlex.split(text_cmd, comments=True))
            if " ".join(words) == REPO_ROOT_CD:
                in_repo = True
                continue
            m = re.search(r"#\s*exit (\d+)", text_cmd)
            shown = lines[i] if i < len(lines) and not lines[i].startswith(("$ ", "```")) else None
            cmds.append(Command(at, words, int(m.group(1)) if m else 0, shown, in_repo))
        if any(c.words[:1] == ("mlite",) for c in cmds):
            out.append((start, cmds))
        i += 1
    return out


BLOCKS = console_blocks(README.read_text(encoding="utf-8"))


def _squash(line: str) -> str:
    return " ".join(line.split())


@pytest.fixture(scope="module")
def elsewhere(tmp_path_factory):
    """The empty folder outside the repository the README's commands run in."""
    return tmp_path_factory.mktemp("readme_user")


def test_the_readme_has_its_commands():
    cmds = [c for _, block in BLOCKS for c in block]
    assert len(cmds) >= 15 and all(c.words[0] == "mlite" for c in cmds), [c.words for c in cmds]
    subs = {c.words[1] for c in cmds}
    assert {"params", "mesh", "memory", "rl-memory", "export", "import-launcher", "logs", "run"} <= subs
    missing = [c.line for c in cmds if c.first_line is None]
    assert not missing, f"README lines {missing}: show the first line each command prints under it"
    assert any(c.exit_code for c in cmds) and any(c.in_repo for c in cmds)


@pytest.mark.parametrize("block", [b for _, b in BLOCKS], ids=[f"README line {n}" for n, _ in BLOCKS])
def test_readme_block_runs_as_written(block, elsewhere):
    env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONWARNINGS="ignore")
    for cmd in block:
        cwd = REPO if cmd.in_repo else elsewhere
        p = subprocess.run(
            [sys.executable, "-m", "mlite", *cmd.words[1:]],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        where = f"README line {cmd.line}: {' '.join(cmd.words)} (in {cwd})"
        assert p.returncode == cmd.exit_code, f"{where}: exit {p.returncode}\n{p.stdout[-800:]}{p.stderr[-800:]}"
        first = p.stdout.splitlines()[0] if p.stdout.strip() else ""
        first = first.replace(f"{cwd}{os.sep}", "")
        assert _squash(first) == _squash(cmd.first_line or ""), f"{where}: prints first\n{first}"


DOCS = [README, REPO / "data" / "models" / "README.md", *sorted((REPO / "docs").glob("*.md"))]


@pytest.mark.parametrize("doc", DOCS, ids=[str(d.relative_to(REPO)) for d in DOCS])
def test_links_resolve_in_a_clone_and_sources_are_public(doc):
    """Every relative link and picture of the README, ``docs/`` and ``data/models/README.md`` names a file of the
    repository (nothing outside a clone such as ``../shared/reference``), and sources are cited by URL or
    repository path, never by the id of an internal index."""
    text = doc.read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    local = [t for t in targets if not re.match(r"[a-z]+:", t)]
    missing = [t for t in local if not (doc.parent / t).resolve().is_relative_to(REPO) or not (doc.parent / t).exists()]
    assert not missing, missing
    assert "shared/reference" not in text
    assert not re.search(r"\b(?:index|file) ids? \d{6,}", text), re.search(r".{40}\bids? \d{6,}.{20}", text)
