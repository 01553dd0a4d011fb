"""One legend for a figure of panels, below them and outside every axes (the curve plot and the difference plot
share it; with ten runs a legend inside a panel covers the curves)."""

from __future__ import annotations

import math

LEGEND_FONT = 7
"""Font size of the figure legend (points)."""


def figure_legend(fig, axes) -> None:
    """One legend for the whole figure, below the panels and outside every axes, each label once (with ten runs a
    legend inside a panel covers the curves); the figure grows by the legend's rows, then the panels are laid out
    above it."""
    handles: dict = {}
    for ax in axes:
        for h, label in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(label, h)
    if not handles:
        fig.tight_layout()
        return
    char_pt = 0.62 * LEGEND_FONT  # a character's width, about
    longest = max(len(label) for label in handles) * char_pt + 36  # + the line sample and the gaps
    ncol = max(1, min(len(handles), int(fig.get_figwidth() * 72 // longest)))
    rows = math.ceil(len(handles) / ncol)
    extra = rows * LEGEND_FONT * 1.9 / 72 + 0.12  # inches
    fig.set_figheight(fig.get_figheight() + extra)
    fig.tight_layout(rect=(0, extra / fig.get_figheight(), 1, 1))
    fig.legend(
        list(handles.values()),
        list(handles),
        loc="lower center",
        bbox_to_anchor=(0.5, 0.0),
        ncol=ncol,
        fontsize=LEGEND_FONT,
        frameon=False,
    )
