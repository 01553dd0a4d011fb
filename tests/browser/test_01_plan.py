"""01_plan.ipynb in a real JupyterLab: run all cells, change the model, the rendered totals follow.

Oracle: ``from_hf_config(<model>).total`` from the test process, formatted here (``f"{n:,}"``), against the text
the browser renders; the short figure (``30.53 B``) is parsed back and compared to the same integer.
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from mlite.models import from_hf_config

from .conftest import open_notebook, run_all_cells, shot

pytestmark = pytest.mark.browser

OTHER_MODEL = "DeepSeek-V3"
"""The model the test switches to (MTP layers, MLA, a different total from the notebook's default)."""
UNITS = {"T": 1e12, "B": 1e9, "M": 1e6, "K": 1e3, "": 1}


def _short_value(text: str) -> float:
    m = re.fullmatch(r"\s*([\d.]+)\s*([TBMK]?)\s*", text)
    assert m, f"unexpected short figure {text!r}"
    return float(m.group(1)) * UNITS[m.group(2)]


def _assert_card(card, value: int) -> None:
    expect(card.locator(".mlite-figure-exact")).to_have_text(f"{value:,}")
    short = _short_value(card.locator(".mlite-figure-value").inner_text())
    assert abs(short - value) <= 0.005 * max(value, 1), (short, value)


def test_model_explorer_follows_the_dropdown(page):
    open_notebook(page, "01_plan.ipynb")
    run_all_cells(page)

    view = page.locator(".mlite-model-explorer")
    expect(view).to_be_visible()
    select = view.locator(".mlite-model-select select")
    total = view.locator(".mlite-model-total")
    chart = view.locator(".mlite-model-chart")
    expect(total.locator(".mlite-figure-exact")).not_to_be_empty()

    first = select.input_value()
    assert first and first != OTHER_MODEL, first
    first_spec = from_hf_config(first)
    _assert_card(total, first_spec.total)
    _assert_card(view.locator(".mlite-model-active"), first_spec.active)
    expect(chart).to_have_attribute("src", re.compile(r"^(blob:|data:image/png)"))
    first_chart = chart.get_attribute("src")
    first_text = total.locator(".mlite-figure-exact").inner_text()

    select.select_option(OTHER_MODEL)
    spec = from_hf_config(OTHER_MODEL)
    _assert_card(total, spec.total)  # waits for the kernel round trip
    assert total.locator(".mlite-figure-exact").inner_text() != first_text
    _assert_card(view.locator(".mlite-model-active"), spec.active)
    _assert_card(view.locator(".mlite-model-mtp"), spec.mtp)
    expect(view.locator(".mlite-model-source")).to_contain_text(f"{OTHER_MODEL}.json")
    expect(view.locator(".mlite-model-components")).to_contain_text(f"{spec.components['routed_experts']:,}")
    expect(chart).not_to_have_attribute("src", first_chart)
    expect(view.locator(".mlite-error")).to_be_hidden()
    cell = page.locator(".jp-CodeCell").filter(has=view)
    cell.scroll_into_view_if_needed()
    shot(page, "01_plan_page")
    shot(page, "01_plan_model_explorer", cell)  # the README's picture (docs/img/01_plan_model_explorer.png)


def test_bad_path_shows_one_line_inline(page, lab):
    open_notebook(page, "01_plan.ipynb")
    run_all_cells(page)
    view = page.locator(".mlite-model-explorer")
    bad = lab.root / "broken" / "config.json"
    bad.parent.mkdir(exist_ok=True)
    bad.write_text('{"model_type": "qwen3", "hidden_size": 64,')  # truncated JSON

    path_box = view.locator(".mlite-model-path input")
    path_box.fill(str(bad))
    path_box.press("Enter")
    error = view.locator(".mlite-error")
    expect(error).to_be_visible()
    expect(error).to_contain_text("invalid JSON")
    expect(error).to_contain_text(str(bad))
    assert "Traceback" not in error.inner_text() and len(error.inner_text().strip().splitlines()) == 1
    expect(view.locator(".mlite-model-results")).to_be_hidden()
    assert view.locator(".mlite-error-details").inner_text().strip() == ""

    view.locator(".mlite-model-select select").select_option("tiny-moe")
    _assert_card(view.locator(".mlite-model-total"), from_hf_config("tiny-moe").total)
    expect(error).to_be_hidden()
