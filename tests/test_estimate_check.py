"""Notebook 01's "How good is the estimate": both measured sets, each row's error as its CSV gives it."""

from __future__ import annotations

import csv
import html
import re

from conftest import REPO

RESULTS = REPO / "bench" / "results"


def _csv(name: str) -> list[dict]:
    with (RESULTS / name).open(newline="") as f:
        return list(csv.DictReader(f))


def _cells(html_text: str) -> list[list[str]]:
    rows = re.findall(r"<tr>(.*?)</tr>", html_text)
    cells = [[html.unescape(c) for c in re.findall(r"<td[^>]*>(.*?)</td>", r)] for r in rows]
    return [c for c in cells if c]  # the header row has th cells only


def test_both_measured_sets_with_their_rows_and_errors():
    import ipywidgets as W

    from widgets.estimate_check import estimate_check

    box = estimate_check()
    banner, image, worst, lite, mcore = box.children
    assert banner.message == ""
    assert isinstance(image, W.Image) and image.value[:4] == b"\x89PNG"
    assert "lite runtime" in worst.value and "Megatron-Core" in worst.value
    assert "DotProductAttention" in worst.value and "SDPA" in worst.value and "TE absent" in worst.value
    for table, name, label in ((lite, "gpu_memory.csv", "lite runtime"), (mcore, "mcore_memory.csv", "Megatron-Core")):
        rows = _csv(name)
        cells = _cells(table.value)
        assert table.value.startswith(f"<b>{label}</b>")
        assert [c[0] for c in cells] == [r["config"] for r in rows]
        for c, r in zip(cells, rows, strict=True):
            err = int(r["predicted_static_bytes"]) / int(r["measured_static_bytes"]) - 1
            assert c[-3] == f"{err:+.1%}" and c[-4] == f"{int(r['measured_static_bytes']) / 2**30:.2f}"
            if name == "mcore_memory.csv":
                assert c[1] == r["validated_against"]
    assert len(_cells(mcore.value)) >= 12


def test_a_missing_set_is_one_line_in_the_banner(tmp_path):
    from widgets.estimate_check import estimate_check

    box = estimate_check(mcore_path=tmp_path / "nope.csv")
    assert "no GPU measurements" in box.children[0].message
