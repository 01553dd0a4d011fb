"""environment.yml (conda users) must name the same requirements as pyproject.toml and the Makefile.

pyproject.toml is the single source of dependencies; environment.yml only brings Python and pip and installs the
kit through pip with every extra, after the same torch pin as ``make setup`` (the Makefile's TORCH_SPEC default).
:func:`drift` lists every disagreement in words; the drift tests below feed it edited copies to show it notices.
"""

from __future__ import annotations

import re

import pytest
import tomllib
import yaml
from conftest import REPO
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

EDITABLE = re.compile(r"^-e\s+\.\[(?P<extras>[^\]]*)\]$")
"""The kit installed through pip from the repository root, with extras: ``-e .[lab,dev]``."""


def _texts() -> tuple[str, str, str]:
    return tuple((REPO / f).read_text(encoding="utf-8") for f in ("environment.yml", "pyproject.toml", "Makefile"))


def makefile_torch_spec(makefile: str) -> str:
    m = re.search(r"^TORCH_SPEC\s*\?=\s*(\S+)\s*$", makefile, re.M)
    assert m, "Makefile: no 'TORCH_SPEC ?= ...' default line"
    return m.group(1).strip("'\"")


def drift(env_text: str, pyproject_text: str, makefile_text: str) -> list[str]:
    """Every way environment.yml disagrees with pyproject.toml / the Makefile, one sentence each."""
    problems: list[str] = []
    env = yaml.safe_load(env_text)
    project = tomllib.loads(pyproject_text)["project"]

    if env.get("name") != "mlite-lab":
        problems.append(f"environment.yml: name is {env.get('name')!r}, expected 'mlite-lab'")
    if env.get("channels") != ["conda-forge"]:
        problems.append(f"environment.yml: channels are {env.get('channels')!r}, expected ['conda-forge']")
    pip_lines = _conda_drift(env, project, problems)
    if pip_lines is None:
        problems.append("environment.yml: no 'pip:' section installing the kit")
        return problems
    extras, torch = _pip_drift(pip_lines, set(project["optional-dependencies"]) - {"all"}, problems)
    _torch_drift(torch, makefile_torch_spec(makefile_text), project, problems)
    if (
        torch
        and extras is not None
        and pip_lines.index(torch[0]) > next(i for i, ln in enumerate(pip_lines) if EDITABLE.match(str(ln).strip()))
    ):
        problems.append("environment.yml: the torch pin must come before '-e .[...]' so pip keeps that build")
    return problems


def _conda_drift(env: dict, project: dict, problems: list[str]) -> list | None:
    """The conda dependencies: only ``python=X.Y`` (within requires-python), ``pip`` and the ``pip:`` section;
    returns that section's lines (None: there is none)."""
    python, has_pip, pip_lines = None, False, None
    for dep in env.get("dependencies") or []:
        if isinstance(dep, dict) and set(dep) == {"pip"}:
            pip_lines = dep["pip"] or []
        elif isinstance(dep, str) and re.fullmatch(r"python\s*[=<>!~].*", dep):
            python = re.sub(r"^python\s*=*", "", dep).strip()
        elif dep == "pip":
            has_pip = True
        else:
            problems.append(
                f"environment.yml: conda dependency {dep!r}: only python and pip belong there, "
                "every other requirement goes into pyproject.toml"
            )
    if not has_pip:
        problems.append("environment.yml: 'pip' is missing from dependencies")
    if python is None:
        problems.append("environment.yml: no 'python=X.Y' dependency")
    elif not SpecifierSet(project["requires-python"]).contains(python):
        problems.append(
            f"environment.yml: python={python} does not satisfy pyproject's requires-python "
            f"'{project['requires-python']}'"
        )
    return pip_lines


def _pip_drift(pip_lines: list, groups: set[str], problems: list[str]) -> tuple[set[str] | None, list[str]]:
    """The ``pip:`` lines: pip options, torch, and ``-e .[extras]`` naming every optional-dependency group;
    returns ``(extras, torch lines)``."""
    extras, torch = None, []
    for line in pip_lines:
        line = str(line).strip()
        if line.startswith("--"):  # pip options such as --extra-index-url (a CUDA torch index)
            continue
        m = EDITABLE.match(line)
        if m:
            extras = {e.strip() for e in m.group("extras").split(",") if e.strip()}
            continue
        try:
            req = Requirement(line)
        except Exception:  # noqa: BLE001 - packaging's InvalidRequirement and friends
            problems.append(f"environment.yml: pip line {line!r} is neither a requirement nor '-e .[extras]'")
            continue
        if req.name == "torch":
            torch.append(line)
        else:
            problems.append(f"environment.yml: pip requirement {line!r}: declare it in pyproject.toml, not here")
    if extras is None:
        problems.append("environment.yml: no '-e .[extras]' pip line installing the kit")
    elif extras != groups:
        problems.append(
            f"environment.yml installs extras {sorted(extras)} but pyproject's optional-dependency "
            f"groups (except 'all') are {sorted(groups)}; missing {sorted(groups - extras)}, "
            f"unknown {sorted(extras - groups)}"
        )
    return extras, torch


def _torch_drift(torch: list[str], make_torch: str, project: dict, problems: list[str]) -> None:
    """One torch line, the Makefile's TORCH_SPEC default, within pyproject's torch dependency."""
    if torch != [make_torch]:
        problems.append(
            f"environment.yml: torch pin {torch} differs from the Makefile's TORCH_SPEC default "
            f"{make_torch!r} (one torch line, the same pin)"
        )
        return
    pin = Requirement(make_torch)
    version = next(iter(pin.specifier)).version if len(pin.specifier) == 1 else None
    for dep in project.get("dependencies", []):
        r = Requirement(dep)
        if r.name == "torch" and version and not r.specifier.contains(version, prereleases=True):
            problems.append(f"torch pin {make_torch!r} does not satisfy pyproject's dependency {dep!r}")


def test_environment_yml_matches_pyproject_and_makefile():
    problems = drift(*_texts())
    assert not problems, "environment.yml drifted:\n" + "\n".join(problems)


def test_all_extra_names_every_group():
    """``make setup`` installs ``.[all]``: it must name the same groups environment.yml installs."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    groups = set(project["optional-dependencies"]) - {"all"}
    (self_ref,) = project["optional-dependencies"]["all"]
    req = Requirement(self_ref)
    assert req.name == project["name"], self_ref
    assert set(req.extras) == groups, f"'all' names {sorted(req.extras)}, the groups are {sorted(groups)}"


def _edit(pattern: str, repl: str, which: int):
    def apply(texts):
        texts = list(texts)
        new = re.sub(pattern, repl, texts[which], count=1, flags=re.M)
        assert new != texts[which], f"edit {pattern!r} did not apply"
        texts[which] = new
        return texts

    return apply


@pytest.mark.parametrize(
    "edit, needle",
    [
        (_edit(r"\[lab,", "[", 0), "missing ['lab']"),  # an extra dropped from environment.yml
        (_edit(r"^dev = \[", 'docs = ["sphinx"]\ndev = [', 1), "missing ['docs']"),  # a new group in pyproject
        (_edit(r"python=3\.11", "python=3.13", 0), "requires-python"),
        (_edit(r"torch==2\.13\.0", "torch==2.12.0", 0), "TORCH_SPEC"),
        (_edit(r"^TORCH_SPEC \?= torch==2\.13\.0", "TORCH_SPEC ?= torch==2.14.0", 2), "TORCH_SPEC"),
        (_edit(r"^  - pip$", "  - pip\n  - numpy", 0), "numpy"),
        (_edit(r"^(\s+)- torch==2\.13\.0$", r"\1- torch==2.13.0\n\1- rich", 0), "rich"),
        (_edit(r"^(\s+- torch==2\.13\.0)\n(\s+- -e .*)$", r"\2\n\1", 0), "before"),  # torch after the kit
        (_edit(r"^channels:\n  - conda-forge", "channels:\n  - defaults", 0), "channels"),
    ],
)
def test_drift_is_reported(edit, needle):
    problems = drift(*edit(_texts()))
    assert any(needle in p for p in problems), problems
