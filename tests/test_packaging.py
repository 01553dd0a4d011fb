"""A non-editable install works without the source tree: the wheel carries the embedded defaults (model configs,
tokenizer, tiny dataset, sample logs) and ``py.typed``, and ``mlite`` installed from it finds them.

The wheel is built from a copy of the checkout (an in-tree build would leave ``build/`` and ``*.egg-info`` in the
repository), installed with ``pip install --target`` into a temporary folder, and run from another temporary folder
with only that folder on ``PYTHONPATH``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import REPO

SOURCES = ("pyproject.toml", "README.md", "mlite", "widgets", "data")
"""What the build reads (``mlite/_data/*`` are links into ``data/``)."""


def _env(site: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLITE_")}
    env.update(PYTHONPATH=str(site), PYTHONWARNINGS="ignore")
    return env


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """``(wheel, site)``: the wheel built from a copy of the checkout, and the folder it was installed into."""
    root = tmp_path_factory.mktemp("pkg")
    src = root / "src"
    src.mkdir()
    for name in SOURCES:
        p = REPO / name
        if p.is_dir():
            shutil.copytree(p, src / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(p, src / name)
    pip = [sys.executable, "-m", "pip"]
    subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(root / "whl"), str(src)],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    (wheel,) = (root / "whl").glob("mlite_lab-*.whl")
    site = root / "site"
    subprocess.run(
        [*pip, "install", "--no-deps", "--no-index", "-q", "--target", str(site), str(wheel)],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return wheel, site


def test_the_wheel_carries_the_embedded_defaults_and_py_typed(installed):
    wheel, _ = installed
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "mlite/py.typed" in names
    shipped = {f"mlite/_data/models/{p.name}" for p in (REPO / "data" / "models").glob("*.json")}
    assert shipped and shipped <= names
    for rel in ("tokenizer/tokenizer.json", "datasets/tiny_sft/train.parquet", "datasets/tiny_sft/val.parquet"):
        assert f"mlite/_data/{rel}" in names, rel
    assert not [n for n in names if n.startswith("mlite/_data/") and n.endswith(".py")]  # data, not modules
    assert not [n for n in names if n.startswith("data/")]  # no top-level package named data
    assert "mlite/rundir.py" in names and "widgets/run_monitor.py" in names


def test_the_installed_package_finds_its_data_without_the_source_tree(installed, tmp_path):
    _, site = installed
    code = "import mlite, mlite.paths as p; print(mlite.__file__); print(p.data_dir()); print(p.is_source_checkout())"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=tmp_path, env=_env(site)
    ).stdout.split("\n")
    assert Path(out[0]).is_relative_to(site) and Path(out[1]) == site / "mlite" / "_data" and out[2] == "False"
    res = subprocess.run(
        [sys.executable, "-m", "mlite", "params", "tiny-moe", "--json"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=_env(site),
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    from mlite.models import from_hf_config

    assert json.loads(res.stdout)["total"] == from_hf_config("tiny-moe").total
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_the_installed_package_runs_a_debug_run_from_another_directory(installed, tmp_path):
    _, site = installed
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "mlite",
            "run",
            "--model",
            "tiny-moe",
            "--steps",
            "2",
            "--nproc",
            "2",
            "--device",
            "cpu",
            "--out",
            "r",
            "--json",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=_env(site),
        timeout=400,
    )
    assert res.returncode == 0, (res.stdout, res.stderr)
    doc = json.loads(res.stdout)
    assert doc["status"] == "completed" and doc["steps"] == 2 and doc["run_dir"] == str(tmp_path / "r")
    assert "parameters" in (tmp_path / "r" / "train.log").read_text()
