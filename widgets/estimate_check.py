"""``estimate_check()``: predicted vs measured memory from the committed GPU results (a chart and a table)."""

from __future__ import annotations

import ipywidgets as W

from mlite.memory.validation import BOUNDS, load_gpu_memory

from ._common import ErrorBanner, figure_png, html_table

GIB = 1024**3


def _chart(df) -> bytes:
    return figure_png(lambda fig: _draw(fig, df), size=(9.5, 4.2))


def _draw(fig, df) -> None:
    for ax, kind in zip(fig.subplots(1, 2), ("static", "peak")):
        m, p = df[f"measured_{kind}_bytes"] / GIB, df[f"predicted_{kind}_bytes"] / GIB
        hi = float(max(m.max(), p.max())) * 1.1
        ax.fill_between([0, hi], [0, hi * (1 - BOUNDS[kind])], [0, hi * (1 + BOUNDS[kind])], color="#dbe9f6",
                        label=f"±{BOUNDS[kind]:.0%}")
        ax.plot([0, hi], [0, hi], color="#555", lw=1, label="predicted = measured")
        ax.scatter(m, p, color="#d62728", zorder=3)
        for x, y, name in zip(m, p, df["config"]):
            ax.annotate(name.split("_")[0], (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
        ax.set(xlim=(0, hi), ylim=(0, hi), xlabel="measured GiB", ylabel="predicted GiB",
               title=f"{kind} memory" + (" (after the optimizer step)" if kind == "static" else " (max allocated)"))
        ax.legend(loc="upper left", fontsize=8)
    fig.suptitle(f"lite runtime on {df['gpu'].iloc[0]}, torch {df['torch_version'].iloc[0]}: predicted vs measured",
                 fontsize=10)


def estimate_check(path=None) -> W.VBox:
    """The chart and the per-configuration table (errors shown inline instead of a traceback)."""
    banner = ErrorBanner()
    box = W.VBox([banner])
    box.add_class("mlite-estimate-check")
    df = banner.run(load_gpu_memory, path)
    if df is None:
        return box
    rows = [[r.config, f"{r.measured_static_bytes / GIB:.2f}", f"{r.static_error:+.1%}",
             f"{r.measured_peak_bytes / GIB:.2f}", f"{r.peak_error:+.1%}"] for r in df.itertuples()]
    table = W.HTML(html_table(["configuration", "static GiB", "error", "peak GiB", "error"], rows))
    worst = (f"worst error: static {df['static_error'].abs().max():.1%} (bound {BOUNDS['static']:.0%}), "
             f"peak {df['peak_error'].abs().max():.1%} (bound {BOUNDS['peak']:.0%}); reproduce with: "
             f"<code>{df['command'].iloc[0]}</code>")
    box.children = [banner, W.Image(value=_chart(df), format="png"), W.HTML(worst), table]
    return box
