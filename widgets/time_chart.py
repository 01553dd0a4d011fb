"""The time picture of one plan: a horizontal bar per part of the predicted step (compute, exposed communication,
pipeline bubble, optimizer, offload; :func:`mlite.time.view.time_rows`), the step, tokens/s/GPU and MFU as text and
the prediction's assumptions under it. Pure presentation of a :class:`mlite.time.StepTime`.
"""

from __future__ import annotations

from mlite.time.view import summary, time_rows

from ._common import esc

COLORS = {
    "compute": "#4C72B0",
    "comm": "#C44E52",
    "bubble": "#EDC948",
    "host": "#8C8C8C",
    "optimizer": "#55A868",
    "offload": "#B07AA1",
}
"""Bar colour by :data:`mlite.time.view.KIND`."""


def time_svg(step_time) -> str:
    """The bars of ``step_time``'s parts (seconds, longest bar the step's largest part), its summary line and its
    assumptions (HTML)."""
    rows = time_rows(step_time)
    longest = max((r["seconds"] for r in rows), default=0.0) or 1.0
    left, bar_w, right, row_h, top = 78, 150, 84, 18, 6  # narrow: it stands beside the memory bars
    width, height = left + bar_w + right, top + row_h * len(rows) + 6
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" style="font-family:sans-serif">']
    for i, r in enumerate(rows):
        y = top + i * row_h
        w = max(bar_w * r["seconds"] / longest, 0.5)
        out.append(
            f'<g class="mlite-time-bar" data-part="{r["part"]}" data-seconds="{r["seconds"]!r}">'
            f'<text x="{left - 6}" y="{y + 12}" font-size="11" text-anchor="end">{esc(r["part"])}</text>'
            f'<rect x="{left}" y="{y + 2}" width="{w:.1f}" height="{row_h - 5}" fill="{COLORS[r["kind"]]}">'
            f"<title>{esc(r['part'])} ({r['kind']}): {r['seconds']:.4g} s, {100 * r['share']:.1f} % of the step"
            f"</title></rect>"
            f'<text x="{left + w + 4:.1f}" y="{y + 12}" font-size="10">{r["seconds"]:.3g} s · '
            f"{100 * r['share']:.0f} %</text></g>"
        )
    out.append("</svg>")
    notes = "".join(f"<li>{esc(a)}</li>" for a in step_time.assumptions)
    legend = " ".join(
        f'<span style="white-space:nowrap"><span style="display:inline-block;width:10px;height:10px;'
        f'background:{c};vertical-align:middle"></span> {esc(k)}</span>'
        for k, c in COLORS.items()
    )
    return (
        f'<div style="max-width:{width}px;line-height:1.35">'
        f'<div class="mlite-time-summary" style="font-weight:600;margin:16px 0 4px 0">predicted step: '
        f"{esc(summary(step_time))}</div>{''.join(out)}"
        f'<div style="font-size:85%">{legend}</div>'
        f'<details open style="font-size:85%;color:#555"><summary>assumptions (mlite time)'
        f"</summary><ul style='margin:2px 0;padding-left:18px'>{notes}</ul></details></div>"
    )
