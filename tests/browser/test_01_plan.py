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


def test_rl_section_bars_follow_the_rollout_knobs(page):
    """The RL section: one bar per phase with the bytes of the ``mlite rl-memory`` command line the view prints (its
    model, mesh, training options and rollout knobs: whatever the cells above left it with, a launcher included);
    the phases that do not fit are red; changing rollout.tensor_model_parallel_size moves bytes between the engine's
    weights and its KV cache inside vLLM's fixed share."""
    import re

    from mlite.cli.rl_memory import estimate_command

    open_notebook(page, "01_plan.ipynb")
    run_all_cells(page)
    view = page.locator(".mlite-rl")
    expect(view).to_be_visible()

    def oracle(tp):
        line = view.locator(".mlite-rl-command").inner_text().strip()
        return estimate_command(re.sub(r"--rollout-tp \d+", f"--rollout-tp {tp}", line))

    tp0 = int(view.locator(".mlite-rl-tensor_model_parallel_size select").input_value())
    est = oracle(tp0)
    bars = view.locator(".mlite-rl-chart g.mlite-rl-bar")
    expect(bars).to_have_count(len(est.phases))
    for name, ph in est.phases.items():
        bar = view.locator(f'.mlite-rl-chart g.mlite-rl-bar[data-phase="{name}"]')
        expect(bar).to_have_attribute("data-bytes", str(round(ph.gpu_total)))
        expect(bar).to_have_attribute("data-fits", str(est.phase_fits(name)).lower())
    failing = [n for n in est.phases if not est.phase_fits(n)]
    expect(view.locator(".mlite-rl-chart g.mlite-rl-oom")).to_have_count(len(failing))
    expect(view.locator(".mlite-rl-fits .mlite-figure-value")).to_have_text("fits" if est.fits else "does NOT fit")
    expect(view.locator(".mlite-rl-peak .mlite-figure-value")).to_have_text(est.peak_phase)
    expect(view.locator(".mlite-rl-kv .mlite-figure-value")).to_have_text(f"{est.kv_cache()['tokens']:,} tokens")
    hosts = view.locator(".mlite-rl-chart g.mlite-rl-host-bar")
    expect(hosts).to_have_count(len(est.phases))

    other = 8 if tp0 != 8 else 4
    view.locator(".mlite-rl-tensor_model_parallel_size select").select_option(str(other))
    after = oracle(other)
    before_w, after_w = (x.phases["rollout"].gpu["engine_weights"] for x in (est, after))
    assert round(after_w) != round(before_w)
    rollout = view.locator('.mlite-rl-chart g.mlite-rl-bar[data-phase="rollout"]')
    expect(rollout.locator("rect.mlite-rl-seg-engine_weights")).to_have_attribute("data-bytes", str(round(after_w)))
    expect(rollout.locator("rect.mlite-rl-seg-kv_cache")).to_have_attribute(
        "data-bytes", str(round(after.phases["rollout"].gpu["kv_cache"]))
    )
    expect(rollout).to_have_attribute("data-bytes", str(round(after.phases["rollout"].gpu_total)))
    expect(view.locator(".mlite-rl-kv .mlite-figure-value")).to_have_text(f"{after.kv_cache()['tokens']:,} tokens")
    expect(view.locator(".mlite-rl-command")).to_contain_text(f"--rollout-tp {other}")
    expect(view.locator(".mlite-error")).to_be_hidden()
    cell = page.locator(".jp-CodeCell").filter(has=view)
    cell.scroll_into_view_if_needed()
    shot(page, "01_plan_rl", cell)
