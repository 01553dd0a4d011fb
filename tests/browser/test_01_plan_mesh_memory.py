"""01_plan.ipynb's Mesh and Memory sections in a real JupyterLab (headless Chromium).

Oracles come from the test process: :func:`mlite.mesh.resolve` / :func:`mlite.mesh.enumerate_meshes` for the
planner (the error messages, the nearest values, the coordinates and groups of a rank, the ranking) and
:func:`mlite.memory.estimate` / :func:`mlite.memory.mesh_table` for the memory view (the exact GPU bytes rendered
for the slider's value, the best-ranked mesh that fits), :func:`mlite.time.predict` for its time chart. The notebook's defaults (Qwen3-30B-A3B, 16 GPUs, EP 8, H100)
are read back from the page, not assumed.
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from mlite.memory import TrainingOptions, estimate
from mlite.mesh import ParallelConfig, enumerate_meshes, resolve
from mlite.models import from_hf_config
from mlite.time import predict
from mlite.time.hardware import hardware_for_gpu
from mlite.time.table import mesh_table
from mlite.time.view import summary, time_rows

from .conftest import open_notebook, run_all_cells, shot

pytestmark = pytest.mark.browser

FIELDS = ("tp", "pp", "vpp", "cp", "ep", "etp")


def _mesh_of(planner) -> dict[str, int]:
    """The planner's controls as the page shows them."""
    out = {f: int(planner.locator(f".mlite-planner-{f} select").input_value()) for f in FIELDS}
    out["ngpu"] = int(planner.locator(".mlite-planner-ngpu input").input_value())
    out["seq_len"] = int(planner.locator(".mlite-planner-seq_len input").first.input_value())
    return out


def _expect_mesh(planner, cfg: ParallelConfig) -> None:
    for f in FIELDS:
        want = cfg.etp_size if f == "etp" else getattr(cfg, f)
        expect(planner.locator(f".mlite-planner-{f} select")).to_have_value(str(want))


def _plan_of(page):
    planner = page.locator(".mlite-planner")
    m = _mesh_of(planner)
    model = page.locator(".mlite-model-explorer .mlite-model-select select").input_value()
    spec = from_hf_config(model)
    cfg = ParallelConfig(**{f: m[f] for f in FIELDS})
    return planner, spec, cfg, m


def test_mesh_planner_errors_inline_picture_and_table(page):
    open_notebook(page, "01_plan.ipynb")
    run_all_cells(page)
    planner, spec, cfg, m = _plan_of(page)
    ngpu = m["ngpu"]
    expect(planner.locator(".mlite-mesh-summary .mlite-mesh-valid")).to_be_visible()
    expect(planner.locator(".mlite-mesh-error")).to_have_count(0)

    # an invalid TP: each error of the oracle appears inline, with its nearest values as buttons
    bad = next(
        t
        for t in (int(o) for o in planner.locator(".mlite-planner-tp option").all_text_contents())
        if not resolve(
            spec, ngpu, ParallelConfig(tp=t, pp=cfg.pp, vpp=cfg.vpp, cp=cfg.cp, ep=cfg.ep, etp=cfg.etp)
        ).valid
    )
    oracle = resolve(spec, ngpu, ParallelConfig(tp=bad, pp=cfg.pp, vpp=cfg.vpp, cp=cfg.cp, ep=cfg.ep, etp=cfg.etp))
    planner.locator(".mlite-planner-tp select").select_option(str(bad))
    errors = planner.locator(".mlite-mesh-error")
    expect(errors).to_have_count(len(oracle.errors))
    for i, f in enumerate(oracle.errors):
        expect(errors.nth(i)).to_contain_text(f.rule)
        expect(errors.nth(i)).to_contain_text(f.message)
    expect(planner.locator(".mlite-mesh-summary .mlite-mesh-invalid")).to_be_visible()
    tp_fix = next(f for f in oracle.errors if f.field == "tp" and f.nearest)
    fix = planner.locator(".mlite-mesh-nearest", has_text=re.compile(rf"^tp = {tp_fix.nearest[-1]}$"))
    shot(page, "01_plan_mesh_invalid", planner)
    fix.click()
    expect(errors).to_have_count(0)  # fixed: the errors are gone
    expect(planner.locator(".mlite-planner-tp select")).to_have_value(str(tp_fix.nearest[-1]))
    expect(planner.locator(".mlite-mesh-summary .mlite-mesh-valid")).to_be_visible()

    # the picture, for a mesh with every kind of group: a cell per rank with its pipeline rank (oracle: mlite's
    # rank formula decoded here), TP groups outlined, a cell's tooltip has its coordinates, a click lists its groups
    pic = ParallelConfig(tp=2, pp=2, cp=2, ep=4)
    plan = resolve(spec, ngpu, pic, seq_len=m["seq_len"])
    assert plan.valid, [f.message for f in plan.errors]  # the notebook's default model and GPU count allow it
    for f in ("pp", "cp", "ep", "tp"):
        planner.locator(f".mlite-planner-{f} select").select_option(str(getattr(pic, f)))
    _expect_mesh(planner, pic)
    dp = ngpu // (pic.tp * pic.cp * pic.pp)
    summary = planner.locator(".mlite-mesh-summary")
    expect(summary).to_contain_text(f"TP·CP·DP·PP = {pic.tp}·{pic.cp}·{dp}·{pic.pp} = {ngpu}")  # the kernel caught up
    expect(summary.locator(".mlite-mesh-valid")).to_be_visible()
    rank = ngpu - 3
    cell = planner.locator(f'.mlite-gpu-grid-svg g.mlite-gpu-cell[data-rank="{rank}"]')
    tp_, rest = rank % pic.tp, rank // pic.tp
    cp_, rest = rest % pic.cp, rest // pic.cp
    dp_, pp_ = rest % dp, rest // dp
    edp = ngpu // (pic.ep * pic.pp)
    etp_, ep_, edp_ = 0, rank % pic.ep, (rank // pic.ep) % edp
    tip = cell.locator("title")
    expect(tip).to_contain_text(f"dense: tp {tp_} · cp {cp_} · dp {dp_} · pp {pp_}")  # unique to this mesh
    expect(tip).to_contain_text(f"expert: etp {etp_} · ep {ep_} · edp {edp_} · pp {pp_}")
    cells = planner.locator(".mlite-gpu-grid-svg g.mlite-gpu-cell")
    expect(cells).to_have_count(ngpu)
    drawn = dict(cells.evaluate_all("els => els.map(e => [+e.dataset.rank, +e.dataset.pp])"))
    assert drawn == {r: r // (pic.tp * pic.cp * dp) for r in range(ngpu)}
    expect(planner.locator(".mlite-gpu-grid-svg rect.mlite-gpu-outline-tp")).to_have_count(ngpu // pic.tp)
    cell.hover()
    cell.click()
    groups = planner.locator(".mlite-gpu-groups")
    expect(groups).to_contain_text(f"rank {rank}")
    for kind in ("tp", "cp", "dp", "pp", "ep", "edp"):
        g = plan.groups(rank)[kind]
        expect(groups).to_contain_text("[" + ", ".join(map(str, g[:8])) + ("]" if len(g) <= 8 else ""))
    expect(planner.locator(".mlite-gpu-focus input")).to_have_value(str(rank))
    shot(page, "01_plan_mesh_planner", planner)

    # the table: every valid mesh; a header click sorts, a second one reverses; a row click applies the mesh
    meshes = enumerate_meshes(spec, ngpu, seq_len=m["seq_len"])
    table = planner.locator(".mlite-mesh-table")
    expect(table).to_contain_text(f"{len(meshes)} meshes")
    header = table.locator('th[data-pick="sort:cp"]')
    header.click()
    expect(header).to_contain_text("▲")
    header.click()
    expect(header).to_contain_text("▼")
    first = table.locator("tr.mlite-mesh-row").first
    top_cp = max(x.plan.parallel.cp for x in meshes)
    expect(first).to_have_attribute("data-key", re.compile(rf"^\d+-\d+-\d+-{top_cp}-"))
    key = first.get_attribute("data-key")
    target = next(
        x.plan.parallel
        for x in meshes
        if "-".join(
            map(
                str,
                (
                    x.plan.parallel.tp,
                    x.plan.parallel.pp,
                    x.plan.parallel.vpp,
                    x.plan.parallel.cp,
                    x.plan.parallel.ep,
                    x.plan.parallel.etp_size,
                ),
            )
        )
        == key
    )
    first.click()
    _expect_mesh(planner, target)
    expect(table.locator("tr.mlite-row-current")).to_have_attribute("data-key", key)
    expect(planner.locator(".mlite-mesh-error")).to_have_count(0)
    expect(planner.locator(".mlite-error")).to_be_hidden()


def test_memory_offload_slider_moves_memory_to_the_host(page):
    open_notebook(page, "01_plan.ipynb")
    run_all_cells(page)
    planner, spec, cfg, m = _plan_of(page)
    view = page.locator(".mlite-memory")
    gpu = view.locator(".mlite-memory-gpu select").input_value()
    gib = float(view.locator(".mlite-memory-gpu_memory_gib input").input_value())
    plan = resolve(spec, m["ngpu"], cfg, seq_len=m["seq_len"])
    # the RL cell offloads the actor for the rollout (param_offload, optimizer_offload): the view's switches as shown
    switches = {
        k: view.locator(f".mlite-memory-{k} input").is_checked() for k in ("param_offload", "optimizer_offload")
    }
    assert switches == {"param_offload": True, "optimizer_offload": True}
    opts = lambda f: TrainingOptions(offload_fraction=f, gpu_memory_gib=gib, seq_len=m["seq_len"], **switches)
    before = estimate(spec, plan, opts(0.0)).to_dict()
    total = view.locator(".mlite-memory-gpu-total .mlite-figure-exact")
    expect(total).to_have_text(f"{before['per_gpu']['total']:,} B")
    expect(view.locator(".mlite-memory-gpu-total .mlite-figure-value")).to_have_text(
        f"{before['per_gpu']['total'] / 2**30:.2f} GiB"
    )
    expect(view.locator(".mlite-memory-fits .mlite-figure-value")).to_have_text("fits" if before["fits"] else "OOM")
    assert gpu

    # move the slider with the keyboard: the GPU figure falls, the host figure rises, both as the oracle says
    handle = view.locator(".mlite-memory-offload_fraction .noUi-handle")
    handle.focus()
    for _ in range(10):
        handle.press("ArrowRight")
    readout = view.locator(".mlite-memory-offload_fraction .widget-readout")
    expect(readout).not_to_have_text("0.00")
    f = float(readout.text_content())
    after = estimate(spec, plan, opts(f)).to_dict()
    assert after["per_gpu"]["total"] < before["per_gpu"]["total"]
    expect(total).to_have_text(f"{after['per_gpu']['total']:,} B")
    expect(view.locator(".mlite-memory-host .mlite-figure-value")).to_have_text(
        f"{after['host']['per_gpu'] / 2**30:.2f} GiB"
    )
    bar = view.locator(".mlite-memory-chart g.mlite-memory-bar").first
    assert int(bar.get_attribute("data-total")) < before["per_gpu"]["total"]

    # beside the memory bars, the predicted step on the hardware shown (the GPU type's profile): a bar per part
    hw = view.locator(".mlite-memory-hardware select").input_value()
    assert hw == hardware_for_gpu(gpu.split(" (")[0])  # the option's label: "H100 (80 GiB)"
    t = predict(spec, plan, opts(f), hw)
    expect(view.locator(".mlite-memory-time .mlite-time-summary")).to_have_text(f"predicted step: {summary(t)}")
    bars = view.locator(".mlite-memory-time g.mlite-time-bar")
    expect(bars).to_have_count(len(time_rows(t)))
    assert [bars.nth(i).get_attribute("data-part") for i in range(bars.count())] == [r["part"] for r in time_rows(t)]
    assert float(view.locator('.mlite-memory-time g.mlite-time-bar[data-part="offload"]').get_attribute(
        "data-seconds"
    )) == t.parts["offload"]  # fmt: skip

    # the whole-mesh table follows (debounced): OOM cells red, the fitting meshes fastest first on the hardware;
    # the best-ranked mesh that fits applies to the planner
    rows = mesh_table(spec, m["ngpu"], opts(f), hardware=hw)
    n_fit = sum(bool(r.fits) for r in rows)
    table = view.locator(".mlite-memory-table")
    expect(page.locator(".mlite-memory")).to_contain_text(f"{n_fit} of {len(rows)} fit")
    header = table.locator('th[data-pick="sort:total"]')
    header.click()
    header.click()
    expect(header).to_contain_text("▼")
    if n_fit < len(rows):
        expect(table.locator("tr.mlite-mesh-row").first.locator("td.mlite-oom").first).to_be_visible()
    shot(page, "01_plan_memory", view)
    best = next(r for r in rows if r.fits)
    view.locator(".mlite-memory-apply-cheapest").click()
    _expect_mesh(planner, best.plan.parallel)
    expect(view.locator(".mlite-memory-fits .mlite-figure-value")).to_have_text("fits")
    expect(view.locator(".mlite-error")).to_be_hidden()
