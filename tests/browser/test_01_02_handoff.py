"""The notebook 01 -> 02 hand-off in a real JupyterLab: run 01_plan.ipynb, press *read launcher* on the launcher it
reads by default (Qwen3.5-35B-A3B, TP 2, EP 8 on 8 GPUs), press *Write files* in its Export view, then run
02_debug_run.ipynb: its "Debug this plan" cell takes that plan (the newest), shrinks it onto 2 CPU processes
(``ep 8 -> 2 (nproc 2)``) and runs it to completion (2 steps).

Oracles: the files the export wrote (``plan.json``'s model and mesh, the launcher without MTP training, as the
import read it), the cell's printed plan path and shrink lines, and the debug run's own folder (``status.json``
completed, two metric lines, the mesh line of its ``train.log``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from playwright.sync_api import expect

from .conftest import open_notebook, run_all_cells, shot, wait_kernel_idle

pytestmark = pytest.mark.browser

RUN_TIMEOUT_MS = 420_000


def test_read_launcher_write_files_then_debug_this_plan(page, lab):
    open_notebook(page, "01_plan.ipynb")
    run_all_cells(page)

    launcher = page.locator(".mlite-launcher").first
    launcher.locator("button.mlite-launcher-read").click()
    expect(launcher.locator(".mlite-launcher-summary")).to_contain_text("Qwen3.5-35B-A3B")
    wait_kernel_idle(page)
    expect(launcher.locator(".mlite-error")).to_be_hidden()

    export = page.locator(".mlite-export-view").first
    export.locator("button.mlite-export-write").click()
    summary = export.locator(".mlite-export-summary")
    expect(summary).to_contain_text("wrote 3 files to", timeout=RUN_TIMEOUT_MS)
    expect(export.locator(".mlite-error")).to_be_hidden()
    folder = Path(re.search(r"wrote 3 files to (\S+);", summary.inner_text()).group(1))
    assert folder.parent == lab.root / "runs" / "export", folder  # beside the notebook, git-ignored
    plan = folder / "plan.json"
    doc = json.loads(plan.read_text())
    assert (doc["model"], doc["mesh"]["tp"], doc["mesh"]["ep"], doc["train_mtp"]) == ("Qwen3.5-35B-A3B", 2, 8, False)
    launcher_text = (folder / doc["launcher"]).read_text()
    assert "mtp.enable" not in launcher_text  # the launcher read does not train MTP: neither does the export

    open_notebook(page, "02_debug_run.ipynb")
    run_all_cells(page)  # fails with the cells' errors: the debug cell asserts its run completed
    cell = page.locator(".jp-CodeCell").filter(has_text="newest_plan()")
    output = cell.locator(".jp-Cell-outputArea")
    expect(output).to_contain_text(f"plan: {plan}")
    expect(output).to_contain_text("plan shrunk: ep 8 -> 2 (nproc 2)")
    expect(output).to_contain_text("plan shrunk: layers 40 -> 2")
    runs = [d for d in (lab.root / "runs").glob("Qwen3.5-35B-A3B-*") if (d / "status.json").is_file()]
    assert len(runs) == 1, runs
    status = json.loads((runs[0] / "status.json").read_text())
    assert status["status"] == "completed", status
    assert len((runs[0] / "metrics.jsonl").read_text().splitlines()) == 2
    log = (runs[0] / "train.log").read_text()
    assert "mesh: tp 2, cp 1, ep 2" in log
    cell.scroll_into_view_if_needed()
    shot(page, "02_debug_this_plan", cell)
