"""The model explorer view, driven in-process (no browser): figures follow mlite, bad input is one inline line.

The figures' oracle is :func:`mlite.models.from_hf_config` formatted here (``f"{n:,}"``); the browser test
(tests/browser/test_01_plan.py) checks the same through JupyterLab.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from conftest import REPO

from mlite.models import available_models, from_hf_config


def _exact(card_html: str) -> str:
    m = re.search(r'class="mlite-figure-exact"[^>]*>([^<]*)<', card_html)
    assert m, card_html
    return m.group(1)


@pytest.fixture
def explorer():
    from widgets.model_explorer import ModelExplorer

    return ModelExplorer("Qwen3-30B-A3B")


def test_figures_follow_the_dropdown(explorer):
    first = from_hf_config("Qwen3-30B-A3B")
    assert _exact(explorer._cards["total"].value) == f"{first.total:,}"
    assert _exact(explorer._cards["active"].value) == f"{first.active:,}"
    chart = explorer._chart.value
    assert chart[:8] == b"\x89PNG\r\n\x1a\n"
    seen = []
    explorer.observe(lambda ch: seen.append(ch["new"].name), "spec")

    explorer._select.value = "Qwen3.5-35B-A3B"
    spec = from_hf_config("Qwen3.5-35B-A3B")
    assert explorer.ref == "Qwen3.5-35B-A3B" and seen == ["Qwen3.5-35B-A3B"]
    for key, value in (
        ("total", spec.total),
        ("active", spec.active),
        ("mtp", spec.mtp),
        ("vision", spec.vision_params),
    ):
        assert _exact(explorer._cards[key].value) == f"{value:,}", key
    assert explorer._chart.value != chart and explorer._chart.value[:4] == b"\x89PNG"
    for component, n in spec.components.items():
        assert f"{component}</td>" in explorer._table.value and f"{n:,}" in explorer._table.value
    assert "gdn+moe" in explorer._layers.value and "data/models/Qwen3.5-35B-A3B.json" in explorer._source.value
    assert explorer.errors.message == ""


def test_dropdown_lists_data_models(explorer):
    assert list(explorer._select.options) == available_models()


@pytest.mark.parametrize(
    "content, needles",
    [
        (None, ["no such file"]),
        ('{"model_type": "qwen3", ', ["invalid JSON", "line 1"]),
        (json.dumps({"model_type": "qwen3", "hidden_size": 64}), ["num_attention_heads", "missing"]),
        (json.dumps({"model_type": "no_such_arch", "hidden_size": 64}), ["no_such_arch"]),
        ('{"model_type": "qwen3", "num_attention_heads": NaN}', ["field 'num_attention_heads' is NaN", "finite"]),
    ],
)
def test_bad_input_is_one_line_inline(explorer, tmp_path, content, needles):
    path = tmp_path / "config.json"
    if content is not None:
        path.write_text(content)
    before = explorer.spec
    explorer._path.value = str(path)
    msg = explorer.errors.message
    assert msg and "\n" not in msg and "Traceback" not in msg, msg
    for n in needles:
        assert n in msg, (n, msg)
    assert explorer.errors.details.outputs == ()  # bad input: no traceback area
    assert explorer._results.layout.display == "none" and explorer.spec is before
    explorer._select.value = "tiny-moe"  # any pick recovers
    assert explorer.errors.message == "" and explorer._results.layout.display is None
    assert _exact(explorer._cards["total"].value) == f"{from_hf_config('tiny-moe').total:,}"


def test_any_config_path_through_transformers(explorer, tmp_path):
    cfg = {"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 2, "vocab_size": 128, "n_positions": 64}
    path = tmp_path / "gpt2" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(cfg))
    explorer._path.value = str(path)
    assert explorer.errors.message == ""
    assert explorer._select.value is None and explorer.ref == str(path)
    assert _exact(explorer._cards["total"].value) == f"{from_hf_config(path).total:,}"
    assert "transformers" in explorer._source.value and str(path) in explorer._source.value


def test_a_bug_in_a_callback_shows_inline_with_its_traceback():
    from widgets._common import ErrorBanner

    banner = ErrorBanner()

    def broken():
        return {}["missing"]

    assert banner.run(broken) is None
    assert banner.message.startswith("unexpected error") and "KeyError" in banner.message
    assert banner.layout.display is None
    (out,) = banner.details.outputs
    assert out["name"] == "stderr" and "Traceback" in out["text"] and "broken" in out["text"]
    assert banner.run(lambda: 7) == 7 and banner.message == "" and banner.layout.display == "none"


def test_importing_the_view_loads_no_pyplot():
    code = (
        "import sys; from widgets.model_explorer import ModelExplorer; ModelExplorer('tiny-moe'); "
        "assert 'matplotlib.pyplot' not in sys.modules, 'pyplot imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO, timeout=120)
