"""The export view, driven in-process: the button writes the files the exporter writes and shows them in tabs;
an invalid mesh is one inline line."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlite.export import ExportPlan, render
from mlite.memory import TrainingOptions
from mlite.mesh import ParallelConfig


@pytest.fixture
def view(tmp_path):
    from widgets.export_view import ExportView

    return ExportView("Qwen3-30B-A3B", out=str(tmp_path))


def test_write_button_writes_and_shows_the_files(view, tmp_path):
    opts = TrainingOptions(optimizer="fsdp2", offload_fraction=1.0, recompute="full")
    view.set_plan(parallel=ParallelConfig(pp=2, cp=2, ep=8), options=opts, nodes=4, target="verl-megatron-grpo")
    view._write.click()
    assert view.errors.message == ""
    res = view.result
    expected = render(
        ExportPlan(
            model="Qwen3-30B-A3B",
            target="verl-megatron-grpo",
            options=opts,
            nodes=4,
            parallel=ParallelConfig(pp=2, cp=2, ep=8),
        )
    )
    assert list(res.files) == list(expected.files)
    for i, (name, text) in enumerate(res.files.items()):
        assert view._tabs.get_title(i) == name
        on_disk = next(p for p in res.paths if p.endswith(name))
        assert Path(on_disk).read_text() == text
        assert "mlite-export-file" in view._tabs.children[i].value
    assert res.files[res.launcher] == expected.files[expected.launcher]
    assert "dp=8" in view._summary.value and "sbatch job_megatron_grpo.sbatch" in view._summary.value


def test_invalid_mesh_is_one_inline_line(view):
    view.set_plan(parallel=ParallelConfig(pp=3), nodes=4)
    view._write.click()
    assert "not divisible by TP*CP*PP" in view.errors.message
    assert view.result is None and not view._tabs.children
    view.set_plan(parallel=ParallelConfig(pp=2))
    view._write.click()
    assert view.errors.message == "" and view.result is not None


def test_bad_model_is_one_inline_line(view):
    view.model = "NoSuchModel"
    view._write.click()
    assert "NoSuchModel" in view.errors.message


def test_tab_titles_are_whole_file_names(view):
    """The tabs carry the whole file names, and the view's style lets each tab be as wide as its name (JupyterLab's
    tab bar cuts a title at 144 px by default: "run_verl_mlite_grpo.s", issue 30)."""
    import re

    from widgets.export_view import TAB_STYLE

    view.set_plan(parallel=ParallelConfig(ep=8), nodes=1, target="verl-mlite-grpo")
    view._write.click()
    names = list(view.result.files)
    assert "run_verl_mlite_grpo.sh" in names
    assert [view._tabs.get_title(i) for i in range(len(names))] == names
    assert view._tab_style in view.children and view._tab_style.value == TAB_STYLE
    assert view.children.index(view._tab_style) < view.children.index(view._tabs)
    (rule,) = re.findall(r"\{([^}]*)\}", TAB_STYLE)
    assert "flex: 0 0 auto" in rule and "max-width: none" in rule
    for bar in ("lm-TabBar", "p-TabBar"):  # JupyterLab 4's lumino classes and the older phosphor ones
        assert f".mlite-export-tabs > .{bar} .{bar}-tab" in TAB_STYLE
    assert "mlite-export-tabs" in view._tabs._dom_classes
