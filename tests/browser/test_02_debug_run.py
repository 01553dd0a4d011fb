"""02_debug_run.ipynb in a real JupyterLab: run all cells (the notebook trains 10 steps of tiny-moe on 2 CPU
processes and waits for them), then press Start in the run view for a long run, watch the step counter rise and
the plot image change, press Stop and see the status turn ``stopped``.

Oracles: the status word and step counter the view shows, the bytes of the PNG the browser displays (fetched
from the image's ``src`` and hashed in the page) before and after steps arrive, and the run's own ``train.log``
(found through the run folder the view names) ending with ``[mlite] status: stopped``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.sync_api import expect

from mlite.launch import RunHandle

from .conftest import open_notebook, png_digest, run_all_cells, shot

pytestmark = pytest.mark.browser

LONG_RUN = 3000
"""Steps of the run started from the button (it is stopped long before)."""

_STEP_AT_LEAST = """(n) => {
  const e = document.querySelector('.mlite-run-view .mlite-run-step');  // re-rendered on every update
  return e !== null && parseInt(e.textContent) >= n;
}"""


def _step(view) -> int:
    return int(view.locator(".mlite-run-step").inner_text().strip() or 0)


def test_start_watch_and_stop_a_run(page):
    open_notebook(page, "02_debug_run.ipynb")
    run_all_cells(page)

    view = page.locator(".mlite-run-view").first
    expect(view).to_be_visible()
    state = view.locator(".mlite-run-state")
    expect(state).to_have_text("completed")  # the notebook's own 10-step run
    expect(view.locator(".mlite-run-step")).to_have_text("10")
    expect(view.locator(".mlite-error")).to_be_hidden()
    expect(view.locator(".mlite-run-memory")).to_contain_text("measured")
    plot = view.locator("img.mlite-run-plot")
    expect(plot).to_have_attribute("src", re.compile(r"^(blob:|data:image/png)"))

    steps = view.locator(".mlite-run-steps input")
    steps.fill(str(LONG_RUN))
    steps.press("Enter")
    view.locator("button.mlite-run-start").click()
    expect(view.locator(".mlite-run-status")).to_contain_text(f"/{LONG_RUN}", timeout=120_000)
    run_dir = Path(re.search(r"run folder (\S+)", view.locator(".mlite-run-dir").inner_text()).group(1))
    try:
        expect(state).to_have_text("running", timeout=120_000)
        expect(view.locator(".mlite-run-step")).to_have_text(re.compile(r"^([3-9]|\d{2,})$"), timeout=180_000)
        first_step = _step(view)
        first_png, first_src = png_digest(plot)  # hash and src in one read: an update may land between two
        assert first_png.startswith("true:"), first_png

        page.wait_for_function(_STEP_AT_LEAST, arg=first_step + 3, timeout=120_000)
        expect(plot).not_to_have_attribute("src", first_src, timeout=30_000)  # the poller sent a new image
        later_png, _ = png_digest(plot)
        assert later_png.startswith("true:") and later_png != first_png, (first_png, later_png)

        view.locator("button.mlite-run-stop").click()
        expect(state).to_have_text("stopped", timeout=120_000)
    finally:  # never leave a 3000-step run behind, whatever failed above
        RunHandle.open(run_dir).stop(timeout=120)
    lines = (run_dir / "train.log").read_text().splitlines()
    m = re.fullmatch(r"\[mlite\] status: stopped \(stop requested; stopped after step (\d+)\)", lines[-1])
    assert m, lines[-1]
    stopped_at = int(m.group(1))
    assert first_step + 3 <= stopped_at < LONG_RUN
    assert sum(ln.startswith("step:") for ln in lines) == stopped_at
    # the view settles on the same last step (its poller may be one update behind the log when the state flips)
    expect(view.locator(".mlite-run-step")).to_have_text(str(stopped_at), timeout=30_000)
    expect(view.locator(".mlite-run-status")).to_contain_text("stop requested")
    expect(view.locator(".mlite-error")).to_be_hidden()

    cell = page.locator(".jp-CodeCell").filter(has=view)
    cell.scroll_into_view_if_needed()
    shot(page, "02_debug_run_stopped", cell)
