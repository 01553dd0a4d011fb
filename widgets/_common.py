"""Shared view helpers for the ipywidgets views: number formatting, an inline error banner, guarded callbacks,
HTML tables, and matplotlib figures rendered headless into PNG bytes.

Why the guard: JupyterLab swallows exceptions raised inside widget callbacks (they land in the browser's log
console, not in the notebook). Every callback of a view runs through :meth:`ErrorBanner.guard`:

* :class:`mlite.errors.MliteError` (bad user input) shows its one line in the banner, no traceback;
* any other exception is a bug: the banner says so in one line and the traceback goes to the banner's
  ``details`` Output widget, inline under the view, instead of vanishing.

Views use ``add_class("mlite-...")`` on their widgets so the real-browser tests find them by CSS class.
This module imports ipywidgets (it is a view module); matplotlib is imported lazily in :func:`figure_png`.
"""

from __future__ import annotations

import functools
import html
import traceback

import ipywidgets as W

from mlite.errors import MliteError


def fmt_count(n: int | None) -> str:
    """A parameter count for humans: ``30.53 B``, ``452.24 K``; ``—`` for None."""
    if n is None:
        return "—"
    for unit, div in (("T", 10**12), ("B", 10**9), ("M", 10**6), ("K", 10**3)):
        if abs(n) >= div:
            return f"{n / div:.2f} {unit}"
    return str(n)


def fmt_exact(n: int | None) -> str:
    """The exact integer with thousands separators (``30,532,122,624``); ``—`` for None."""
    return "—" if n is None else f"{n:,}"


def esc(text) -> str:
    """HTML-escape anything for an ``HTML`` widget's value."""
    return html.escape(str(text))


def html_table(
    header: list[str], rows: list[list], *, css: str = "mlite-table", align_right: tuple[int, ...] = ()
) -> str:
    """A small HTML table (cells escaped); ``align_right`` lists the numeric column indexes."""

    def cell(tag: str, i: int, v) -> str:
        align = "right" if i in align_right else "left"
        style = f' style="text-align:{align};padding:1px 10px 1px 0"'
        return f"<{tag}{style}>{esc(v)}</{tag}>"

    head = "".join(cell("th", i, h) for i, h in enumerate(header))
    body = "".join("<tr>" + "".join(cell("td", i, v) for i, v in enumerate(r)) + "</tr>" for r in rows)
    return f'<table class="{css}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def figure_png(draw, *, size=(6.0, 3.0), dpi: int = 100) -> bytes:
    """Render ``draw(fig)`` with the non-interactive Agg canvas into PNG bytes (no pyplot, no GUI backend)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from mlite.logs.plots.plot import figure_png as png_bytes

    fig = Figure(figsize=size, dpi=dpi)
    FigureCanvasAgg(fig)
    draw(fig)
    return png_bytes(fig, bbox_inches="tight")


class ErrorBanner(W.VBox):
    """One line of red text under a view for bad input, plus a details Output for unexpected tracebacks.

    Hidden while there is nothing to say. ``banner.guard(fn)`` wraps a callback; ``banner.run(fn, ...)`` calls
    one; both return None (and show the error) when ``fn`` raised.
    """

    def __init__(self, **kwargs):
        self._line = W.HTML(value="")
        self._line.add_class("mlite-error")
        self.details = W.Output()
        """Receives the traceback of unexpected exceptions (bugs), inline in the notebook."""
        self.details.add_class("mlite-error-details")
        super().__init__(children=(self._line, self.details), **kwargs)
        self.add_class("mlite-error-banner")
        self.clear()

    @property
    def message(self) -> str:
        """The line currently shown (plain text), empty when none."""
        return self._message

    def show(self, message: str) -> None:
        """Show one line (bad input)."""
        self._message = " ".join(str(message).split())
        self._line.value = f'<span style="color:#b00020;font-weight:600">&#9888; {esc(self._message)}</span>'
        self.layout.display = None

    def clear(self) -> None:
        """Hide the banner and forget any details."""
        self._message = ""
        self._line.value = ""
        self.details.outputs = ()  # not clear_output(): outside a kernel that writes escape codes to stdout
        self.layout.display = "none"

    def run(self, fn, *args, **kwargs):
        """Call ``fn``; clear the banner on success, show the error on failure (returns None then)."""
        try:
            result = fn(*args, **kwargs)
        except MliteError as e:
            self.details.outputs = ()
            self.show(e.message)
            return None
        except Exception as e:  # noqa: BLE001 - a bug, not bad input: say so, keep the traceback visible inline
            self.details.outputs = ()
            self.show(f"unexpected error (a bug in mlite-lab; details below): {type(e).__name__}: {e}")
            self.details.append_stderr("".join(traceback.format_exception(e)))
            return None
        self.clear()
        return result

    def guard(self, fn):
        """Decorator form of :meth:`run` for traitlets/ipywidgets callbacks."""

        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            return self.run(fn, *args, **kwargs)

        return wrapped
