"""The memory picture: one stacked bar per pipeline stage (params / grads / optimizer / activations / Engram n-gram
tables / other)
against the device capacity and the usable line, a host-RAM bar beside it, and the small HTML cards and tables the
memory view shows. Pure presentation of a :class:`mlite.memory.MemoryEstimate`.
"""

from __future__ import annotations

import math

from mlite.memory import GIB

from ._common import esc

SEGMENTS = (  # (key, label, colour): hues far apart (the three optimizer parts red, orange, gold), none grey
    ("params", "params", "#4C72B0"),
    ("grads", "grads", "#55A868"),
    ("master", "optimizer: master", "#C44E52"),
    ("exp_avg", "optimizer: exp_avg", "#F28E2B"),
    ("exp_avg_sq", "optimizer: exp_avg_sq", "#EDC948"),
    ("activations", "activations", "#B07AA1"),
    ("ngram_tables", "Engram n-gram tables (never offloaded)", "#17BECF"),
    ("other", "other (transients, framework, padding)", "#5F4B3A"),
)
HOST_COLOR = "#BDBDBD"
MIN_PLOT_WIDTH = 420
"""Pixels of the bars' area at the least (one pipeline stage included): the chart stays readable."""


def gib(x: float, digits: int = 2) -> str:
    return f"{x / GIB:.{digits}f} GiB"


def _segments(r) -> list[tuple[str, str, str, float]]:
    values = {
        "params": r.params,
        "grads": r.grads,
        "master": r.master,
        "exp_avg": r.exp_avg,
        "exp_avg_sq": r.exp_avg_sq,
        "activations": r.activation_total,
        "ngram_tables": sum(r.ngram.values()),
        "other": sum(r.other.values()) + r.transient_peak,
    }
    return [(k, label, color, values[k]) for k, label, color in SEGMENTS]


def _nice_step(top: float) -> float:
    raw = top / 6
    mag = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1
    return next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)


def memory_svg(est) -> str:
    """Stacked GPU bar and host bar per pipeline rank, with the device capacity and the usable line."""
    ranks = est.ranks
    cap, usable = est.gpu_mem, est.usable
    top = max([cap] + [r.total for r in ranks] + [r.host_total for r in ranks]) * 1.08 / GIB
    n = len(ranks)
    bar, hbar, group = (64, 28, 130) if n <= 2 else (44, 20, 90) if n <= 8 else (22, 10, 44) if n <= 24 else (10, 5, 20)
    if n * group < MIN_PLOT_WIDTH:  # few stages: wider groups and bars (at most 96 px a bar)
        scale = MIN_PLOT_WIDTH / (n * group)
        group = -(-MIN_PLOT_WIDTH // n)
        bar, hbar = min(round(bar * scale), 96), min(round(hbar * scale), 40)
    left, right, top_pad, plot_h, bottom = 58, 110, 16, 250, 34
    width = left + n * group + right
    height = top_pad + plot_h + bottom
    y = lambda v: top_pad + plot_h * (1 - v / top)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" style="font-family:sans-serif">']
    step = _nice_step(top)
    t = 0.0
    while t <= top:
        out.append(
            f'<line x1="{left}" x2="{left + n * group}" y1="{y(t):.1f}" y2="{y(t):.1f}" stroke="#eee"/>'
            f'<text x="{left - 6}" y="{y(t) + 3:.1f}" font-size="10" text-anchor="end">{t:g}</text>'
        )
        t += step
    out.append(
        f'<text x="12" y="{top_pad + plot_h / 2}" font-size="11" transform="rotate(-90 12 '
        f'{top_pad + plot_h / 2})" text-anchor="middle">GiB</text>'
    )
    worst = est.worst.pp_rank
    for i, r in enumerate(ranks):
        x = left + i * group + (group - bar - hbar - 4) / 2
        acc = 0.0
        segs = []
        for key, label, color, v in _segments(r):
            if v <= 0:
                continue
            h = v / GIB
            segs.append(
                f'<rect class="mlite-memory-seg-{key}" x="{x:.1f}" y="{y(acc + h):.1f}" width="{bar}" '
                f'height="{max(plot_h * h / top, 0.5):.1f}" fill="{color}" data-bytes="{round(v)}">'
                f"<title>pp {r.pp_rank} · {esc(label)}: {gib(v)}</title></rect>"
            )
            acc += h
        out.append(
            f'<g class="mlite-memory-bar" data-pp="{r.pp_rank}" data-total="{round(r.total)}">{"".join(segs)}'
            f'<text x="{x + bar / 2:.1f}" y="{y(acc) - 4:.1f}" font-size="10" text-anchor="middle" '
            f'font-weight="{700 if r.pp_rank == worst else 400}">{r.total / GIB:.1f}</text></g>'
        )
        hx, acc = x + bar + 4, 0.0
        for k, v in r.host.items():
            h = v / GIB
            out.append(
                f'<rect class="mlite-memory-host-seg" x="{hx:.1f}" y="{y(acc + h):.1f}" width="{hbar}" '
                f'height="{max(plot_h * h / top, 0.5):.1f}" fill="{HOST_COLOR}" stroke="#fff" '
                f'stroke-width="0.5"><title>pp {r.pp_rank} · host: {esc(k)} {gib(v)}</title></rect>'
            )
            acc += h
        label = f"pp {r.pp_rank}" + (" ▲" if r.pp_rank == worst and n > 1 else "")
        out.append(
            f'<text x="{x + (bar + hbar + 4) / 2:.1f}" y="{top_pad + plot_h + 14}" font-size="10" '
            f'text-anchor="middle">{esc(label)}</text>'
        )
        if n <= 8:
            out.append(
                f'<text x="{hx + hbar / 2:.1f}" y="{top_pad + plot_h + 26}" font-size="8.5" fill="#777" '
                'text-anchor="middle">host</text>'
            )
    x1 = left + n * group
    for v, label, dash, color in (
        (cap, f"capacity {cap / GIB:g} GiB", "", "#b00020"),
        (usable, f"usable {usable / GIB:.1f} GiB", "5 3", "#b00020"),
    ):
        out.append(
            f'<line x1="{left}" x2="{x1}" y1="{y(v / GIB):.1f}" y2="{y(v / GIB):.1f}" stroke="{color}" '
            f'stroke-width="1.5"' + (f' stroke-dasharray="{dash}"' if dash else "") + "/>"
            f'<text x="{x1 + 4}" y="{y(v / GIB) + (-2 if v == cap else 10):.1f}" font-size="10" '
            f'fill="{color}">{esc(label)}</text>'
        )
    out.append(f'<line x1="{left}" x2="{left}" y1="{top_pad}" y2="{top_pad + plot_h}" stroke="#999"/></svg>')
    legend = "".join(
        f'<span style="margin-right:12px;white-space:nowrap"><span style="display:inline-block;width:10px;'
        f'height:10px;background:{color};vertical-align:middle"></span> {esc(label)}</span>'
        for _, label, color in (*SEGMENTS, ("host", "host RAM (per GPU process)", HOST_COLOR))
    )
    return (
        f'<div style="line-height:1.4">{"".join(out)}<div style="font-size:85%;max-width:{max(width, 420)}px">'
        f"{legend}</div></div>"
    )


def _card(label: str, value: str, sub: str, css: str, color: str = "#222", tip: str = "") -> str:
    return (
        f'<div class="{css}" title="{esc(tip)}" style="padding:4px 16px 4px 0;min-width:150px">'
        f'<div class="mlite-figure-label" style="color:#666;font-size:90%">{esc(label)}</div>'
        f'<div class="mlite-figure-value" style="font-size:150%;font-weight:600;color:{color}">{esc(value)}</div>'
        f'<div class="mlite-figure-exact" style="font-family:monospace;color:#444">{esc(sub)}</div></div>'
    )


def _small_table(title: str, items: dict) -> str:
    if not items:
        return ""
    rows = "".join(
        f"<tr><td style='padding:0 10px 0 0'>{esc(k)}</td><td style='text-align:right'>{gib(v)}</td></tr>"
        for k, v in items.items()
    )
    return f"<div style='margin-right:28px'><b>{esc(title)}</b><table style='font-size:92%'>{rows}</table></div>"
