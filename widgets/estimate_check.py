"""``estimate_check()``: predicted vs measured memory from the committed GPU results (a chart and a table per set).

Two measured sets: the kit's lite runtime (``bench/results/gpu_memory.csv``, ``activation_model="lite"``) and
Megatron-Core itself (``bench/results/mcore_memory.csv``, ``activation_model="megatron"``: the local spec with
unfused attention, and the same spec with PyTorch SDPA flash core attention standing in for Transformer Engine).
"""

from __future__ import annotations

import ipywidgets as W

from mlite.memory.validation import BOUNDS, load_gpu_memory
from mlite.paths import results_dir
from mlite.units import GIB

from ._common import ErrorBanner, figure_png, html_table

SETS = (("lite runtime", "gpu_memory.csv", "#d62728"), ("Megatron-Core", "mcore_memory.csv", "#1f77b4"))
"""(label, file under bench/results, colour) of each measured set."""


def _chart(sets) -> bytes:
    return figure_png(lambda fig: _draw(fig, sets), size=(9.5, 4.2))


def _draw(fig, sets) -> None:
    for ax, kind in zip(fig.subplots(1, 2), ("static", "peak")):
        hi = (
            max(
                float(max(df[f"measured_{kind}_bytes"].max(), df[f"predicted_{kind}_bytes"].max())) for _, df, _ in sets
            )
            / GIB
            * 1.1
        )
        ax.fill_between(
            [0, hi],
            [0, hi * (1 - BOUNDS[kind])],
            [0, hi * (1 + BOUNDS[kind])],
            color="#dbe9f6",
            label=f"±{BOUNDS[kind]:.0%}",
        )
        ax.plot([0, hi], [0, hi], color="#555", lw=1, label="predicted = measured")
        for label, df, colour in sets:
            m, p = df[f"measured_{kind}_bytes"] / GIB, df[f"predicted_{kind}_bytes"] / GIB
            flash = df["attention"].eq("flash") if "attention" in df else m.eq(-1)
            ax.scatter(m[~flash], p[~flash], color=colour, zorder=3, s=18, label=label)
            if flash.any():
                ax.scatter(
                    m[flash], p[flash], color=colour, marker="^", zorder=3, s=22, label=f"{label}, SDPA flash attention"
                )
        ax.set(
            xlim=(0, hi),
            ylim=(0, hi),
            xlabel="measured GiB",
            ylabel="predicted GiB",
            title=f"{kind} memory" + (" (after the optimizer step)" if kind == "static" else " (max allocated)"),
        )
        ax.legend(loc="upper left", fontsize=7)
    gpu = sets[0][1]["gpu"].iloc[0]
    fig.suptitle(f"{' and '.join(s[0] for s in sets)} on {gpu}: predicted vs measured", fontsize=10)


def _table(label: str, df) -> W.HTML:
    """One set's rows; the Megatron-Core set also says what each row's attention was checked against."""
    checked = "validated_against" in df
    rows = [
        [
            r.config,
            *([r.validated_against] if checked else []),
            f"{r.measured_static_bytes / GIB:.2f}",
            f"{r.static_error:+.1%}",
            f"{r.measured_peak_bytes / GIB:.2f}",
            f"{r.peak_error:+.1%}",
        ]
        for r in df.itertuples()
    ]
    header = ["configuration", *(["checked against"] if checked else []), "static GiB", "error", "peak GiB", "error"]
    n = len(header)
    return W.HTML(f"<b>{label}</b>" + html_table(header, rows, align_right=tuple(range(n - 4, n))))


def _worst(label: str, df) -> str:
    what = ""
    if "validated_against" in df:
        what = " (" + "; ".join(sorted(set(df["validated_against"]))) + ")"
    return (
        f"{label}{what}: worst error static {df['static_error'].abs().max():.1%} (bound {BOUNDS['static']:.0%}), "
        f"peak {df['peak_error'].abs().max():.1%} (bound {BOUNDS['peak']:.0%}); reproduce with: "
        f"<code>{df['command'].iloc[0]}</code>"
    )


def estimate_check(path=None, mcore_path=None) -> W.VBox:
    """The chart and the per-configuration tables of both sets (errors shown inline instead of a traceback).

    ``path`` replaces the lite-runtime file, ``mcore_path`` the Megatron-Core file."""
    banner = ErrorBanner()
    box = W.VBox([banner])
    box.add_class("mlite-estimate-check")
    sets = []
    for (label, name, colour), p in zip(SETS, (path, mcore_path)):
        df = banner.run(load_gpu_memory, p or results_dir() / name)
        if df is None:
            return box
        sets.append((label, df, colour))
    worst = "<br>".join(_worst(label, df) for label, df, _ in sets)
    box.children = [
        banner,
        W.Image(value=_chart(sets), format="png"),
        W.HTML(worst),
        *(_table(label, df) for label, df, _ in sets),
    ]
    return box
