"""The memory view, driven in-process (no browser), linked to a mesh planner.

Oracles: the bytes-per-parameter table of issue 7 (18 / 16 / 14 / 10 for a dense model on one GPU, written here),
:func:`mlite.memory.estimate` and :func:`mlite.memory.mesh_table` called here with the options the test set, and
``mlite memory --json`` run as a subprocess for the command line the view prints. The browser test
(tests/browser/test_01_plan_mesh_memory.py) moves the slider in JupyterLab.
"""

from __future__ import annotations

import asyncio
import html
import re

import pytest
from conftest import run_cli

from mlite.memory import GIB, TrainingOptions, estimate
from mlite.mesh import ParallelConfig, resolve
from mlite.models import from_hf_config
from mlite.time.table import mesh_table


def _views(model="Qwen3-30B-A3B", ngpu=16, mesh=None, **options):
    from widgets.memory_view import MemoryView
    from widgets.planner import MeshPlanner

    planner = MeshPlanner(model, ngpu=ngpu, **(mesh if mesh is not None else {"ep": 8}))
    return planner, MemoryView(planner, **options)


def _card(view, css: str, part: str = "value") -> str:
    m = re.search(rf'class="{css}".*?class="mlite-figure-{part}"[^>]*>([^<]*)<', view._cards.value, flags=re.S)
    assert m, (css, view._cards.value)
    return html.unescape(m.group(1))


def _oracle(model, ngpu, mesh, **options):
    spec = from_hf_config(model)
    o = TrainingOptions(**options)
    return estimate(spec, resolve(spec, ngpu, ParallelConfig(**mesh), seq_len=o.seq_len), o).to_dict()


@pytest.mark.parametrize(
    "options, want",
    [
        ({}, 18.0),
        (dict(use_precision_aware_optimizer=True), 16.0),
        (dict(use_precision_aware_optimizer=True, main_grads_dtype="bf16", store_param_remainders=False), 16.0),
        (dict(use_precision_aware_optimizer=True, main_grads_dtype="bf16"), 14.0),
        (dict(use_precision_aware_optimizer=True, main_grads_dtype="bf16", moment_dtype="bf16"), 10.0),
    ],
)
def test_bytes_per_param_through_the_controls(options, want):
    """Issue 7's table, set through the PAO toggle and the dtype pickers: a dense model on one GPU."""
    _, view = _views("Qwen3-8B", ngpu=1, mesh={})
    view.set(**options)
    assert _card(view, "mlite-memory-bpp") == f"{want:.2f}"
    assert view.estimate.bytes_per_param == pytest.approx(want)


def test_pao_off_resets_moments_and_keeps_bf16_grads():
    """PAO off: bf16 moments and remainders go (Megatron-Core rejects them without PAO); bf16 grads stay, as
    Megatron-Core's bf16 gradient buffer (grad_reduce_in_fp32=False), with the bytes ``mlite memory`` gives."""
    _, view = _views(
        "Qwen3-8B",
        ngpu=1,
        mesh={},
        use_precision_aware_optimizer=True,
        main_grads_dtype="bf16",
        exp_avg_dtype="bf16",
        exp_avg_sq_dtype="bf16",
    )
    c = view.controls
    assert c["main_grads_dtype"].value == "bf16" and not c["moment_dtype"].disabled
    c["use_precision_aware_optimizer"].value = False
    assert (c["main_grads_dtype"].value, c["moment_dtype"].value) == ("bf16", "fp32")
    assert not c["main_grads_dtype"].disabled and c["moment_dtype"].disabled and c["store_param_remainders"].disabled
    doc = _oracle("Qwen3-8B", 1, {}, main_grads_dtype="bf16")
    assert _card(view, "mlite-memory-gpu-total", "exact") == f"{doc['per_gpu']['total']:,} B"
    assert view.errors.message == ""
    c["main_grads_dtype"].value = "fp32"
    assert view.estimate.bytes_per_param == pytest.approx(18.0)
    c["optimizer"].value = "fsdp2"  # fsdp2: gradients in the param dtype, no distributed-optimizer switch
    assert c["main_grads_dtype"].disabled and c["use_distributed_optimizer"].disabled


def test_offload_slider_moves_memory_from_gpu_to_host():
    _planner, view = _views()
    mesh = dict(ep=8)
    seen = []
    for f in (0.0, 0.25, 0.5, 0.75, 1.0):
        view.controls["offload_fraction"].value = f
        doc = _oracle("Qwen3-30B-A3B", 16, mesh, offload_fraction=f)
        total, host = doc["per_gpu"]["total"], doc["host"]["per_gpu"]
        assert _card(view, "mlite-memory-gpu-total", "exact") == f"{total:,} B"
        assert _card(view, "mlite-memory-gpu-total") == f"{total / GIB:.2f} GiB"
        assert _card(view, "mlite-memory-host") == f"{host / GIB:.2f} GiB"
        assert _card(view, "mlite-memory-fits") == ("fits" if doc["fits"] else "OOM")
        bar = re.search(r'class="mlite-memory-bar" data-pp="0" data-total="(\d+)"', view._chart.value)
        assert int(bar.group(1)) == total
        seen.append((total, host))
    totals, hosts = zip(*seen)
    assert list(totals) == sorted(totals, reverse=True) and len(set(totals)) == 5
    assert list(hosts) == sorted(hosts) and hosts[0] == 0 < hosts[-1]


def test_why_shows_every_formula_with_the_values():
    _, view = _views(offload_fraction=0.5, recompute="selective")
    doc = _oracle("Qwen3-30B-A3B", 16, dict(ep=8), offload_fraction=0.5, recompute="selective")
    why = html.unescape(view._why.value)
    for f in doc["formulas"]:
        assert f["formula"] in why and f["values"] in why, f
    assert f"{doc['static']:,} / {doc['local_params']:,}" in why  # bytes_per_param, from the same numbers
    assert "offload_fraction=0.5" in why and "recompute=selective" in why
    for k, v in doc["activations_detail"].items():
        assert f"{k}</td><td style='text-align:right'>{v / GIB:.2f} GiB" in view._details.value


def test_stages_of_a_pipeline_each_get_a_bar():
    _, view = _views(mesh=dict(pp=4, ep=4))
    doc = _oracle("Qwen3-30B-A3B", 16, dict(pp=4, ep=4))
    bars = re.findall(r'class="mlite-memory-bar" data-pp="(\d+)" data-total="(\d+)"', view._chart.value)
    assert [int(p) for p, _ in bars] == [s["pp_rank"] for s in doc["stages"]]
    assert [int(t) for _, t in bars] == [s["total"] for s in doc["stages"]]
    assert f"(pp {doc['stage']}, the most loaded)" in view._cards.value


def test_table_marks_oom_and_applies_the_best_ranked_mesh_that_fits():
    planner, view = _views()
    spec = from_hf_config("Qwen3-30B-A3B")
    assert view.hardware() == "H100"  # the GPU type's profile
    rows = mesh_table(spec, 16, TrainingOptions(), hardware="H100")
    t = view.table
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
        for m in rows
    ]
    assert [r["fits"] for r in t.rows] == [bool(m.fits) for m in rows]
    oom = sum(not m.fits for m in rows)
    assert 0 < oom < len(rows)
    t._limit.value = 0  # all rows
    assert t._html.value.count('class="mlite-oom"') == 2 * oom  # the GPU GiB and the fits cells
    assert f"{len(rows) - oom} of {len(rows)} fit" in view._table_title.value
    assert not view.estimate.fits  # the notebook's default mesh needs offload on an H100
    best = next(m for m in rows if m.fits)
    least = min(rows, key=lambda m: m.extra["total_bytes"])
    assert least.fits and least is not best  # two different meshes, each named for what it is
    shown = view._cheapest_html.value
    assert "Best-ranked mesh that fits" in shown and "Cheapest" not in shown and "Least GPU memory" in shown
    view._cheapest_best.click()
    assert planner.parallel().tp == best.plan.parallel.tp and planner.parallel().pp == best.plan.parallel.pp
    assert planner.parallel().vpp == best.plan.parallel.vpp and planner.parallel().ep == best.plan.parallel.ep
    assert view.estimate.fits and view.estimate.worst.total == pytest.approx(best.extra["total_bytes"], abs=1)
    view._cheapest_least.click()
    assert view.estimate.worst.total == pytest.approx(least.extra["total_bytes"], abs=1)
    # a row click applies that mesh in the planner
    row = t.rows[-1]
    t.bridge.pick(f"row:{row['key']}")
    assert planner.plan.parallel.cp == row["cp"] and planner.plan.dp == row["dp"]


def test_invalid_planner_mesh_and_bad_options_show_inline():
    planner, view = _views()
    planner.apply(tp=8)  # 4 KV heads
    assert view.estimate is None and view._results.layout.display == "none"
    assert "num_key_value_heads" in view._invalid.value and view.errors.message == ""
    planner.apply(tp=2)
    assert view.estimate is not None and view._invalid.value == ""
    view.set(use_precision_aware_optimizer=True)
    view.controls["use_distributed_optimizer"].value = False
    msg = view.errors.message
    assert "distributed optimizer" in msg and "\n" not in msg and "Traceback" not in msg
    assert view._results.layout.display == "none"
    view.controls["use_distributed_optimizer"].value = True
    assert view.errors.message == "" and view._results.layout.display is None


def test_gpu_type_sets_the_capacity():
    _, view = _views()
    c = view.controls
    c["gpu"].value = "H200"
    assert c["gpu_memory_gib"].value == 141.0 and view.estimate.options.gpu_memory_gib == 141.0
    doc = _oracle("Qwen3-30B-A3B", 16, dict(ep=8), gpu_memory_gib=141.0)
    assert _card(view, "mlite-memory-fits") == ("fits" if doc["fits"] else "OOM")
    c["gpu_memory_gib"].value = 96.0
    assert c["gpu"].value == "custom" and view.estimate.gpu_mem == 96 * GIB


def test_seq_len_is_shared_with_the_planner():
    planner, view = _views()
    seq = planner.controls["seq_len"]
    assert seq in view.children[3].children  # the planner's own box, shown in both views
    seq.value = 8192
    assert planner.plan.seq_len == 8192 and view.estimate.options.seq_len == 8192
    doc = _oracle("Qwen3-30B-A3B", 16, dict(ep=8), seq_len=8192)
    assert _card(view, "mlite-memory-gpu-total", "exact") == f"{doc['per_gpu']['total']:,} B"


def test_command_line_gives_the_same_bytes():
    _, view = _views(
        use_precision_aware_optimizer=True, main_grads_dtype="bf16", offload_fraction=0.25, recompute="full", gpu="H200"
    )
    cmd = view.command()
    assert cmd.startswith("mlite memory Qwen3-30B-A3B --ngpu 16 --ep 8") and "--gpu-mem H200" in cmd
    res = run_cli(*cmd.split()[1:], "--json")
    assert res.rc in (0, 1), res.err
    assert _card(view, "mlite-memory-gpu-total", "exact") == f"{res.json()['per_gpu']['total']:,} B"


def test_table_is_recomputed_once_after_the_slider_stops(monkeypatch):
    """On the kernel's event loop the whole-mesh table waits until the controls are quiet (debounced)."""
    import widgets.memory_view as mv

    calls = []
    real = mv.mesh_table
    monkeypatch.setattr(mv, "mesh_table", lambda *a, **k: calls.append(k) or real(*a, **k))
    _, view = _views()
    assert len(calls) == 1  # built synchronously

    async def drag():
        for f in (0.05, 0.1, 0.15, 0.2, 0.25):
            view.controls["offload_fraction"].value = f
            assert _card(view, "mlite-memory-host") != "0.00 GiB"  # the picked mesh follows every move
        assert "updating" in view._table_title.value and len(calls) == 1
        while "updating" in view._table_title.value:
            await asyncio.sleep(0.05)

    asyncio.run(asyncio.wait_for(drag(), timeout=30))
    assert len(calls) == 2
    spec = from_hf_config("Qwen3-30B-A3B")
    rows = mesh_table(spec, 16, TrainingOptions(offload_fraction=0.25), hardware="H100")
    assert [r["fits"] for r in view.table.rows] == [bool(m.fits) for m in rows]
    assert [r["step_s"] for r in view.table.rows] == [(m.extra or {}).get("step_s", 0.0) for m in rows]


def _lab(color: str) -> tuple[float, float, float]:
    """CIELAB of an sRGB ``#rrggbb`` (D65), the oracle of how far apart two colours look."""
    lin = [(c / 255) for c in bytes.fromhex(color[1:])]
    r, g, b = [((c + 0.055) / 1.055) ** 2.4 if c > 0.04045 else c / 12.92 for c in lin]
    xyz = (
        (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047,
        0.2126 * r + 0.7152 * g + 0.0722 * b,
        (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883,
    )
    fx, fy, fz = [v ** (1 / 3) if v > 0.008856 else 7.787 * v + 16 / 116 for v in xyz]
    return 116 * fy - 16, 500 * (fx - fy), 200 * (fy - fz)


def test_memory_chart_colours_are_distinct_and_the_chart_readable():
    """Every part of the bar (the three optimizer parts included) and the host bar differ by a CIE76 distance of
    30 or more (issue 30: three similar reds), and one pipeline stage gets a chart of a readable width."""
    import itertools
    import re

    from widgets.memory_chart import HOST_COLOR, MIN_PLOT_WIDTH, SEGMENTS

    colours = {label: c for _, label, c in SEGMENTS} | {"host": HOST_COLOR}
    for (a, ca), (b, cb) in itertools.combinations(colours.items(), 2):
        d = sum((x - y) ** 2 for x, y in zip(_lab(ca), _lab(cb), strict=True)) ** 0.5
        assert d >= 30, (a, b, round(d, 1))
    _, view = _views("Qwen3-8B", ngpu=1, mesh={})
    svg = view._chart.value
    width = int(re.search(r'<svg[^>]* width="(\d+)"', svg).group(1))
    bars = [float(w) for w in re.findall(r'class="mlite-memory-seg-params"[^>]* width="([\d.]+)"', svg)]
    assert width >= MIN_PLOT_WIDTH + 58 and bars and min(bars) >= 80
    assert all(c in svg for c in colours.values())


def test_time_chart_beside_the_memory_bars_is_the_predicted_split():
    from mlite.time import predict
    from mlite.time.view import time_rows

    planner, view = _views()
    spec = from_hf_config("Qwen3-30B-A3B")
    t = predict(spec, planner.plan, view.options(), "H100")
    assert view.step_time.step_s == t.step_s and view.step_time.parts == t.parts
    shown = view._time.value
    bars = re.findall(r'class="mlite-time-bar" data-part="([a-z_]+)" data-seconds="([^"]+)"', shown)
    assert [(p, float(s)) for p, s in bars] == [(r["part"], r["seconds"]) for r in time_rows(t)]
    assert {p for p, _ in bars} == {k for k, v in t.parts.items() if v > 0} and "offload" not in dict(bars)
    assert f"{t.tokens_per_s_per_gpu:,.0f} tokens/s/GPU" in shown and f"MFU {100 * t.mfu:.1f} %" in shown
    assert t.assumptions and all(html.escape(a) in shown for a in t.assumptions)
    # the offload slider adds the offloaded update's bar
    view.controls["offload_fraction"].value = 0.5
    assert view.step_time.parts["offload"] > 0 and 'data-part="offload"' in view._time.value
    # an invalid mesh: no prediction
    planner.apply(tp=8)
    assert view.step_time is None


def test_hardware_follows_the_gpu_type_and_ranks_the_table():
    _, view = _views()
    c = view.controls
    assert c["hardware"].options == ("A100", "B200", "H100", "H200")
    c["gpu"].value = "H200"
    assert view.hardware() == "H200" and view.step_time.hardware.name == "H200"
    c["gpu"].value = "B300"  # no profile for it: the hardware stays
    assert view.hardware() == "H200"
    c["hardware"].value = "A100"
    spec = from_hf_config("Qwen3-30B-A3B")
    want = mesh_table(spec, 16, view.options(), hardware="A100")
    rows = view.table.rows
    assert [r["key"] for r in rows[:5]] == ["-".join(map(str, _mesh(m))) for m in want[:5]]
    fit = [r["tokens_per_s_per_gpu"] for r in rows if r["fits"]]
    assert fit and fit == sorted(fit, reverse=True) and all(r["step_s"] == 0.0 for r in rows if not r["fits"])
    assert "fastest predicted on A100" in view._table_title.value
    best = want[0]
    assert f"{best.extra['tokens_per_s_per_gpu']:,.0f} tokens/s/GPU predicted on A100" in view._cheapest_html.value
    view.table._limit.value = 0
    assert "tok/s/GPU" in view.table._html.value and f"{fit[0]:,.0f}" in view.table._html.value


def _mesh(m) -> tuple:
    p = m.plan.parallel
    return (p.tp, p.pp, p.vpp, p.cp, p.ep, p.etp_size)
