"""The mesh planner view and the GPU picture, driven in-process (no browser).

Oracles: :func:`mlite.mesh.resolve` / :func:`mlite.mesh.enumerate_meshes` called here (the findings, their
nearest values, the valid meshes), the divisors of the GPU count computed here, mlite's rank formula decoded here
(rank = ((pp*DP + dp)*CP + cp)*TP + tp), and ``mlite mesh --json`` run as a subprocess for the command line the
view prints. The browser test (tests/browser/test_01_plan_mesh_memory.py) checks the same through JupyterLab.
"""

from __future__ import annotations

import html
import re
import subprocess
import sys

import pytest
from conftest import REPO, run_cli

from mlite.mesh import ParallelConfig, enumerate_meshes, resolve
from mlite.models import from_hf_config

FIELDS = ("tp", "pp", "vpp", "cp", "ep", "etp")


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _lines(planner, level: str) -> list[str]:
    """Plain text of the rendered finding lines of ``level``."""
    out = []
    for row in planner._findings.children:
        line = row.children[0]
        if f"mlite-mesh-{level}" in line._dom_classes:
            out.append(html.unescape(re.sub(r"<[^>]+>", "", line.value)))
    return out


def _buttons(planner) -> dict[str, object]:
    return {b.description: b for row in planner._findings.children for b in row.children[1:]}


def _planner(model="Qwen3-30B-A3B", **kw):
    from widgets.planner import MeshPlanner

    return MeshPlanner(model, **kw)


def test_controls_offer_the_divisors_the_model_can_use():
    spec = from_hf_config("Qwen3-30B-A3B")  # 32 heads, 48 layers, 128 experts
    p = _planner(ngpu=16, ep=8)
    c = p.controls
    assert list(c["tp"].options) == [d for d in _divisors(16) if d <= spec.num_attention_heads]
    assert list(c["pp"].options) == [d for d in _divisors(16) if d <= spec.num_layers]
    assert list(c["cp"].options) == _divisors(16)
    assert list(c["ep"].options) == [d for d in _divisors(16) if d <= spec.num_experts]
    assert p.plan.valid and p.errors.message == ""

    dense = _planner("Llama-3.1-8B", ngpu=48)
    assert list(dense.controls["ep"].options) == [1] and list(dense.controls["etp"].options) == [1]
    assert list(dense.controls["tp"].options) == [d for d in _divisors(48) if d <= 32]

    # another GPU count: the options follow; the value in use stays listed (and is reported invalid)
    p.apply(tp=16)
    p.apply(ngpu=24)
    assert set(c["tp"].options) == {d for d in _divisors(24) if d <= 32} | {16}
    assert c["tp"].value == 16 and not p.plan.valid
    assert p.plan.ngpu == 24
    assert "No picture: ngpu 24 is not divisible by TP*CP*PP" in p.grid._note.value
    assert p.grid._picture.layout.display == "none"


@pytest.mark.parametrize(
    "model, ngpu, bad, seq_len",
    [
        ("Qwen3-30B-A3B", 16, dict(tp=8), 4096),  # heads (KV heads 4)
        ("Qwen3-30B-A3B", 24, dict(ep=16), 4096),  # world (ETP*EP*PP)
        ("Qwen3-30B-A3B", 16, dict(pp=16, vpp=2), 4096),  # layers
        ("Qwen3-30B-A3B", 8, dict(vpp=2), 4096),  # vpp
        ("Qwen3-30B-A3B", 16, dict(cp=16), 4112),  # seq_len
        ("Llama-3.1-8B", 8, dict(ep=2, etp=2), 4096),  # experts on a dense model
        ("DeepSeek-V4-Flash", 16, dict(tp=2), 4096),  # deepseek_v4
        ("Qwen3.5-35B-A3B", 64, dict(tp=32), 4096),  # gdn_heads
    ],
)
def test_each_error_inline_with_its_nearest_values(model, ngpu, bad, seq_len):
    p = _planner(model, ngpu=ngpu, seq_len=seq_len)
    assert p.plan.valid, p.plan.errors
    p.apply(**bad)
    spec = from_hf_config(model)
    oracle = resolve(spec, ngpu, ParallelConfig(**bad), seq_len=seq_len)
    assert not oracle.valid
    shown = _lines(p, "error")
    assert len(shown) == len(oracle.errors)
    for f, line in zip(oracle.errors, shown):
        assert f"[{f.rule}]" in line and f.message in line, (f, line)
    assert "invalid" in p._summary.value and p.errors.message == ""  # a mesh state, not an error banner
    buttons = _buttons(p)
    for f in oracle.errors:
        assert _fix_label(spec, f) in buttons or not f.nearest, (f, list(buttons))
    # apply the first fix offered: that rule's error (for that field) is gone, as the oracle says
    first = next(f for f in oracle.errors if f.nearest)
    buttons[_fix_label(spec, first)].click()
    after = resolve(spec, p.plan.ngpu, p.parallel(), seq_len=p.seq_len)
    assert [f.message for f in after.findings] == [f.message for f in p.plan.findings]
    assert not [f for f in after.errors if f.rule == first.rule and f.field == first.field]
    assert len(_lines(p, "error")) == len(after.errors)


def _fix_label(spec, f) -> str:
    """The button a finding gets: its nearest value, or both sizes to 1 where the rule names two."""
    if f.rule == "deepseek_v4":
        return "tp = etp = 1"
    if f.rule == "experts" and not spec.num_experts:
        return "ep = etp = 1"
    return f"{f.field} = {f.nearest[0]}"


def test_uneven_layout_button_and_clear():
    p = _planner("DeepSeek-V3", ngpu=64)  # 61 layers + 1 MTP
    p.apply(pp=8)
    assert "layers" in {f.rule for f in p.plan.errors}
    buttons = _buttons(p)
    buttons["uneven layout"].click()
    assert p.plan.valid and p.plan.layout_source == "pp_layout"
    assert p.controls["pp_layout"].value == p.plan.layout
    p.apply(pp=4)  # the layout no longer has PP*VPP stages
    assert [f.field for f in p.plan.errors] == ["pp_layout"]
    _buttons(p)["clear pp_layout"].click()
    assert p.controls["pp_layout"].value == ""
    assert [(f.rule, f.field) for f in p.plan.errors] == [("layers", "pp")]  # 61 layers: uneven again
    assert "uneven layout" in _buttons(p)


def _decode(rank, tp, cp, dp):
    """mlite's dense order, decoded here: rank = ((pp*DP + dp)*CP + cp)*TP + tp."""
    return dict(tp=rank % tp, cp=(rank // tp) % cp, dp=(rank // (tp * cp)) % dp, pp=rank // (tp * cp * dp))


@pytest.mark.parametrize(
    "ngpu, gpn, mesh",
    [
        (16, 8, dict(tp=2, pp=2, cp=2, ep=4)),
        (32, 4, dict(tp=4, pp=4, ep=2, etp=2)),
        (24, 8, dict(tp=2, cp=3, ep=8)),
    ],
)
def test_picture_has_a_cell_per_rank_with_its_coordinates(ngpu, gpn, mesh):
    p = _planner(ngpu=ngpu, gpus_per_node=gpn, seq_len=4104, **mesh)
    assert p.plan.valid, [f.message for f in p.plan.errors]
    svg = p.grid._svg.value
    cells = re.findall(
        r'<g class="mlite-gpu-cell" data-rank="(\d+)" data-pp="(\d+)".*?<title>(.*?)</title>', svg, flags=re.S
    )
    assert [int(r) for r, _, _ in cells] == list(range(ngpu))
    tp, cp, pp = mesh.get("tp", 1), mesh.get("cp", 1), mesh.get("pp", 1)
    dp = ngpu // (tp * cp * pp)
    ep, etp = mesh.get("ep", 1), mesh.get("etp", 1)
    edp = ngpu // (etp * ep * pp)
    for r, pp_rank, tip in cells:
        r = int(r)
        d = _decode(r, tp, cp, dp)
        assert int(pp_rank) == d["pp"]
        tip = html.unescape(tip)
        assert f"rank {r} · node {r // gpn}, GPU {r % gpn}" in tip
        assert f"dense: tp {d['tp']} · cp {d['cp']} · dp {d['dp']} · pp {d['pp']}" in tip
        e = dict(etp=r % etp, ep=(r // etp) % ep, edp=(r // (etp * ep)) % edp)
        assert f"expert: etp {e['etp']} · ep {e['ep']} · edp {e['edp']} · pp {d['pp']}" in tip
    # outlines: each TP group is contiguous inside a node: one box per group
    assert svg.count('class="mlite-gpu-outline-tp"') == ngpu // tp
    # a TP group that spans nodes is drawn as one box per node it touches
    wide = _planner(ngpu=16, gpus_per_node=4, tp=8, ep=8)
    assert wide.grid._svg.value.count('class="mlite-gpu-outline-tp"') == 16 // 4


def test_clicked_rank_lists_the_groups_the_cli_prints():
    p = _planner(ngpu=16, tp=2, pp=2, cp=2, ep=4)
    p.grid.bridge.pick("rank:13")
    assert p.grid.focus == 13 and 'data-rank="13"' in p.grid._svg.value
    text = html.unescape(re.sub(r"<[^>]+>", " ", p.grid._groups.value))
    res = run_cli(
        "mesh",
        "Qwen3-30B-A3B",
        "--ngpu",
        "16",
        "--tp",
        "2",
        "--pp",
        "2",
        "--cp",
        "2",
        "--ep",
        "4",
        "--rank",
        "13",
        "--json",
    )
    assert res.rc == 0, res.err
    for kind, ranks in res.json()["groups"].items():
        assert re.search(rf"\b{kind}\s+\[{', '.join(map(str, ranks))}\]", text), (kind, ranks, text)
    # outline toggles redraw: with only ep on, no tp boxes
    p.grid.set_kinds(("ep",))
    assert "mlite-gpu-outline-tp" not in p.grid._svg.value and "mlite-gpu-outline-ep" in p.grid._svg.value


def test_table_lists_every_valid_mesh_sorts_and_applies_a_row():
    spec = from_hf_config("Qwen3-30B-A3B")
    p = _planner(ngpu=16, ep=8)
    meshes = enumerate_meshes(spec, 16)
    t = p.table
    assert [r["key"] for r in t.rows] == [
        "-".join(
            map(
                str,
                (
                    m.plan.parallel.tp,
                    m.plan.parallel.pp,
                    m.plan.parallel.vpp,
                    m.plan.parallel.cp,
                    m.plan.parallel.ep,
                    m.plan.parallel.etp_size,
                ),
            )
        )
        for m in meshes
    ]
    shown = re.findall(r'<tr class="mlite-mesh-row[^"]*" data-key="([^"]+)"', t._html.value)
    assert shown == [r["key"] for r in t.rows[:25]]
    t.bridge.pick("sort:dp")
    t.bridge.pick("sort:dp")  # again: descending
    assert t.sort_key == ("dp", True)
    dps = [r["dp"] for r in t.sorted_rows()]
    assert dps == sorted((m.plan.dp for m in meshes), reverse=True)
    shown = re.findall(r'data-key="([^"]+)"', t._html.value)
    assert shown[:25] == [r["key"] for r in t.sorted_rows()[:25]] and "&#9660;" in t._html.value
    row = t.sorted_rows()[7]
    t.bridge.pick(f"row:{row['key']}")
    assert p.parallel().tp == row["tp"] and p.parallel().cp == row["cp"] and p.plan.valid
    assert f'class="mlite-mesh-row mlite-row-current" data-key="{row["key"]}"' in t._html.value


def test_an_uneven_row_applies_its_layout():
    p = _planner("DeepSeek-V3", ngpu=16)
    row = next(r for r in p.table.rows if r["stages"] == "uneven")
    p.table.bridge.pick(f"row:{row['key']}")
    assert p.plan.valid and p.controls["pp_layout"].value == row["layout"]


def test_follows_the_explorer_and_prints_the_cli_command():
    from widgets.model_explorer import ModelExplorer

    explorer = ModelExplorer("Qwen3-30B-A3B")
    p = _planner(explorer, ngpu=16, tp=2, ep=8, seq_len=8192)
    assert p.spec is explorer.spec
    cmd = p.command()
    assert cmd.startswith("mlite mesh Qwen3-30B-A3B --ngpu 16") and cmd in p._command.value
    res = run_cli(*cmd.split()[1:], "--json")
    doc = res.json()
    assert (
        res.rc == 0 and doc["valid"] and (doc["tp"], doc["ep"], doc["dp"], doc["edp"]) == (2, 8, p.plan.dp, p.plan.edp)
    )
    n = len(p.table.rows)
    explorer._select.value = "Llama-3.1-8B"
    assert p.spec.name == "Llama-3.1-8B" and p.model_ref == "Llama-3.1-8B"
    assert len(p.table.rows) == len(enumerate_meshes(p.spec, 16, seq_len=8192)) != n
    # a dense model has no expert axes: EP 8 falls back to 1 (the only size offered), TP 2 is kept
    assert p.plan.valid, p.plan.errors
    assert (p.controls["ep"].value, p.controls["etp"].value, p.controls["tp"].value) == (1, 1, 2)
    assert list(p.controls["ep"].options) == [1]
    p.apply(ep=2)  # chosen for this model: kept and reported, with its fix
    assert [f.rule for f in p.plan.errors] == ["experts"]
    _buttons(p)["ep = etp = 1"].click()
    assert p.plan.valid
    explorer._select.value = "Qwen3-30B-A3B"  # back to a MoE model: EP 1 is a size it offers, kept
    assert p.controls["ep"].value == 1 and p.plan.valid and 8 in p.controls["ep"].options


def test_views_import_no_pyplot():
    code = (
        "import sys; from widgets.planner import MeshPlanner; from widgets.memory_view import MemoryView; "
        "MemoryView(MeshPlanner('tiny-moe', ngpu=8)); "
        "assert 'matplotlib.pyplot' not in sys.modules, 'pyplot imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO, timeout=120)
