"""Every notebook in ``notebooks/`` runs headless top to bottom, and is committed with its outputs stripped.

Execution: nbclient, kernel ``python3`` (the venv's, see ``make kernel``), working directory ``notebooks/``, the
notebook read from disk and never written back. Besides cell errors, a run fails when a widget's inline error
banner (``widgets._common.ErrorBanner``, CSS class ``mlite-error``) shows a message at the end: widget views
catch errors to show them inline, so nbclient alone would not notice.
"""

from __future__ import annotations

import html
import re

import nbformat
import pytest
from conftest import REPO

NOTEBOOKS = REPO / "notebooks"
NOTEBOOK_FILES = sorted(p.name for p in NOTEBOOKS.glob("*.ipynb"))
CELL_TIMEOUT_S = 240
"""Per-cell limit; the whole notebook is bounded by the pytest timeout below."""
NOTEBOOK_TIMEOUT_S = 420


def test_there_are_notebooks():
    assert "01_plan.ipynb" in NOTEBOOK_FILES, NOTEBOOK_FILES


def _error_banners(nb) -> list[str]:
    """Messages shown by ``mlite-error`` widgets in the widget state nbclient stored."""
    state = nb.metadata.get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {}).get("state", {})
    shown = []
    for model in state.values():
        s = model.get("state", {})
        if "mlite-error" in s.get("_dom_classes", ()) and s.get("value"):
            shown.append(html.unescape(re.sub(r"<[^>]+>", "", s["value"])).strip())
    return shown


@pytest.mark.slow
@pytest.mark.timeout(NOTEBOOK_TIMEOUT_S)
@pytest.mark.parametrize("name", NOTEBOOK_FILES)
def test_notebook_executes(name):
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    client = NotebookClient(
        nb,
        kernel_name="python3",
        timeout=CELL_TIMEOUT_S,
        allow_errors=False,
        store_widget_state=True,
        resources={"metadata": {"path": str(NOTEBOOKS)}},
    )
    try:
        client.execute()
    except CellExecutionError as e:
        pytest.fail(f"{name}: a cell raised\n{e}", pytrace=False)
    errors = [
        (i, o)
        for i, c in enumerate(nb.cells)
        if c.cell_type == "code"
        for o in c.get("outputs", [])
        if o.get("output_type") == "error"
    ]
    assert not errors, f"{name}: error outputs in cells {[i for i, _ in errors]}"
    banners = _error_banners(nb)
    assert not banners, f"{name}: widgets show errors inline after running: {banners}"


@pytest.mark.parametrize("name", NOTEBOOK_FILES)
def test_notebook_is_stripped(name):
    """Committed notebooks carry no outputs, execution counts or saved widget state (``make strip``)."""
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    dirty = [
        i
        for i, c in enumerate(nb.cells)
        if c.cell_type == "code" and (c.get("outputs") or c.get("execution_count") is not None)
    ]
    assert not dirty, f"{name}: cells {dirty} have outputs or execution counts; run `make strip`"
    assert "widgets" not in nb.metadata, f"{name}: saved widget state in metadata; run `make strip`"
    assert nb.metadata.get("kernelspec", {}).get("name") == "python3", f"{name}: kernelspec name is not 'python3'"
