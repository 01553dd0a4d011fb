"""03_curves.ipynb in a real JupyterLab: run all cells, move the smoothing slider, and the rendered plot changes.

Oracle: the bytes of the PNG the browser shows (fetched from the image's ``src`` and hashed in the page) before and
after the move; the slider's readout shows the new value; no inline error appears.
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from .conftest import open_notebook, png_digest, run_all_cells, shot

pytestmark = pytest.mark.browser


def test_smoothing_slider_changes_the_plot(page):
    open_notebook(page, "03_curves.ipynb")
    run_all_cells(page)

    view = page.locator(".mlite-curves").first
    expect(view).to_be_visible()
    plot = view.locator("img.mlite-curves-plot")
    expect(plot).to_have_attribute("src", re.compile(r"^(blob:|data:image/png)"))
    expect(view.locator(".mlite-curves-summary")).to_contain_text("mlite_tiny_moe_fsdp2")
    expect(view.locator(".mlite-error")).to_be_hidden()
    before, before_src = png_digest(plot)
    assert before.startswith("true:"), before

    readout = view.locator(".mlite-curves-smooth .widget-readout")
    expect(readout).to_have_text("0.00")
    handle = view.locator(".mlite-curves-smooth .noUi-handle")
    handle.focus()
    page.keyboard.press("End")  # keyboard on the slider's handle: to its maximum
    expect(readout).to_have_text("0.99")

    expect(plot).not_to_have_attribute("src", before_src)  # the kernel sent a new image
    after, _ = png_digest(plot)
    assert after.startswith("true:") and after != before, (before, after)
    expect(view.locator(".mlite-error")).to_be_hidden()
    cell = page.locator(".jp-CodeCell").filter(has=view)
    cell.scroll_into_view_if_needed()
    shot(page, "03_curves_explorer", cell)
