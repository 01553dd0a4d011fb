"""bench/widget_latency.py's handler timings cover exactly the controls the browser test changes (so the report's
two columns are the same changes), one time per change asked for."""

from __future__ import annotations

import importlib.util
import re

from conftest import REPO


def _bench():
    spec = importlib.util.spec_from_file_location("widget_latency", REPO / "bench" / "widget_latency.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_handlers_cover_the_browser_controls():
    text = (REPO / "tests" / "browser" / "test_widget_latency.py").read_text()
    controls = set(re.findall(r'_(?:toggle_select|slider)\(\s*page,\s*nb,\s*"([^"]+)"', text))
    assert len(controls) >= 8, controls
    times = _bench().handlers(2)
    assert set(times) == controls
    assert all(len(v) == 2 and all(x > 0 for x in v) for v in times.values()), times
