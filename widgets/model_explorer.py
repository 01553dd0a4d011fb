"""``ModelExplorer``: pick a model from ``data/models/`` or type a path to any ``config.json``; see total /
active / MTP / vision, where the count came from, a breakdown by component (table and bar chart) and the
layer kinds. Every figure comes from :func:`mlite.models.from_hf_config`; this module only lays them out.

Other views can follow the explorer's choice: ``explorer.observe(fn, "spec")`` (a :class:`ModelSpec`, the
last model read successfully) or ``traitlets.dlink((explorer, "ref"), (other, "model"))`` (the name or path).

CSS classes for tests: ``mlite-model-explorer`` (the view), ``mlite-model-select`` (dropdown),
``mlite-model-path`` (path box), ``mlite-model-load`` (button), ``mlite-model-total`` / ``-active`` / ``-mtp``
/ ``-vision`` (figure cards; the exact integer inside ``.mlite-figure-exact``), ``mlite-model-source``,
``mlite-model-components`` (table), ``mlite-model-layers``, ``mlite-model-chart`` (PNG image),
``mlite-error`` (one-line error).
"""

from __future__ import annotations

from pathlib import Path

import ipywidgets as W
import traitlets

from mlite.models import COMPONENTS, available_models, from_hf_config, resolve_config_path
from mlite.paths import data_dir

from ._common import ErrorBanner, esc, figure_png, fmt_count, fmt_exact, html_table

DEFAULT_MODEL = "Qwen3-30B-A3B"
"""Shown first when it is in ``data/models/``."""

_FIGURES = (
    ("total", "total", "every language-model parameter in the checkpoint, MTP included, vision excluded"),
    ("active", "active", "parameters touched per token (main model), embeddings and lm_head included"),
    ("mtp", "MTP", "multi-token-prediction layers (inside total)"),
    ("vision", "vision", "vision tower, not in total (— when the config has none or it is not counted)"),
)


def _card(label: str, value: int | None, tip: str) -> str:
    return (
        f'<div title="{esc(tip)}" style="padding:4px 14px 4px 0;min-width:150px">'
        f'<div class="mlite-figure-label" style="color:#666;font-size:90%">{esc(label)}</div>'
        f'<div class="mlite-figure-value" style="font-size:150%;font-weight:600">{esc(fmt_count(value))}</div>'
        f'<div class="mlite-figure-exact" style="font-family:monospace;color:#444">{esc(fmt_exact(value))}</div>'
        "</div>"
    )


def _shown_path(path: Path) -> str:
    """``data/models/X.json`` for the shipped configs, the full path for anything else."""
    try:
        return str(path.resolve().relative_to(data_dir().resolve().parent))
    except ValueError:
        return str(path.resolve())


def _draw_components(spec):
    comps = [(c, spec.components[c]) for c in COMPONENTS if spec.components.get(c)]
    total = spec.total

    def draw(fig):
        ax = fig.add_subplot(1, 1, 1)
        names = [c for c, _ in comps][::-1]
        values = [n / 1e9 if total >= 1e9 else n / 1e6 for _, n in comps][::-1]
        unit = "B" if total >= 1e9 else "M"
        bars = ax.barh(names, values, color="#4C72B0")
        for bar, (_, n) in zip(bars, comps[::-1]):
            ax.text(
                bar.get_width(), bar.get_y() + bar.get_height() / 2, f" {100 * n / total:.1f}%", va="center", fontsize=8
            )
        ax.set_xlabel(f"parameters ({unit})")
        ax.set_title(f"{spec.name}: {fmt_count(total)} parameters by component", fontsize=10)
        ax.set_xlim(0, max(values) * 1.18 if values else 1)
        ax.tick_params(labelsize=8)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)

    return figure_png(draw, size=(6.2, 0.32 * len(comps) + 1.1))


class ModelExplorer(W.VBox):
    """Pick a model (dropdown of ``data/models/``) or a ``config.json`` path; see its parameter accounting."""

    spec = traitlets.Any(None, allow_none=True)
    """The :class:`mlite.models.ModelSpec` shown (the last model read successfully)."""
    ref = traitlets.Unicode("")
    """What was read: a name in ``data/models/`` or a path."""

    def __init__(self, model: str | None = None, **kwargs):
        super().__init__(**kwargs)
        self.add_class("mlite-model-explorer")
        names = available_models()
        self._busy = False
        self._select = W.Dropdown(options=names, value=None, description="Model", layout=W.Layout(width="340px"))
        self._select.add_class("mlite-model-select")
        self._path = W.Text(
            value="",
            placeholder="or a path to any config.json (Enter to load)",
            continuous_update=False,
            layout=W.Layout(width="420px"),
        )
        self._path.add_class("mlite-model-path")
        self._load = W.Button(description="Load path", tooltip="read the config.json typed on the left")
        self._load.add_class("mlite-model-load")
        self.errors = ErrorBanner()
        """Inline error line (bad input) and traceback area (bugs)."""
        self._cards = {key: W.HTML() for key, _, _ in _FIGURES}
        for key, w in self._cards.items():
            w.add_class(f"mlite-model-{key}")
        self._source = W.HTML()
        self._source.add_class("mlite-model-source")
        self._table = W.HTML()
        self._table.add_class("mlite-model-components")
        self._layers = W.HTML()
        self._layers.add_class("mlite-model-layers")
        self._chart = W.Image(format="png", layout=W.Layout(width="560px"))
        self._chart.add_class("mlite-model-chart")
        self._results = W.VBox(
            [
                W.HBox(list(self._cards.values())),
                self._source,
                W.HBox([self._table, self._chart], layout=W.Layout(align_items="flex-start", grid_gap="24px")),
                self._layers,
            ]
        )
        self._results.add_class("mlite-model-results")
        self.children = (W.HBox([self._select, self._path, self._load]), self.errors, self._results)

        self._select.observe(self.errors.guard(self._on_select), names="value")
        self._path.observe(self.errors.guard(self._on_path), names="value")
        self._load.on_click(self.errors.guard(lambda _b: self.load(self._path.value)))

        first = model if model is not None else (DEFAULT_MODEL if DEFAULT_MODEL in names else next(iter(names), None))
        if first is not None:
            self.errors.run(self.load, first)

    # ------------------------------------------------------------------ actions
    def load(self, ref: str | Path) -> None:
        """Read ``ref`` (a name in ``data/models/`` or a path) and show it; bad input raises ``MliteError``."""
        ref = str(ref).strip()
        if not ref:
            return
        try:
            path = resolve_config_path(ref)
            spec = from_hf_config(path)
        except Exception:
            self._results.layout.display = "none"
            self._busy = True
            try:  # nothing is shown now: any pick in the dropdown loads again
                self._select.value = None
            finally:
                self._busy = False
            raise
        self._render(spec, path)
        self._busy = True
        try:  # show the choice in the controls without re-triggering a load
            is_name = ref in self._select.options
            self._select.value = ref if is_name else None
            if is_name:
                self._path.value = ""
        finally:
            self._busy = False
        self.ref = ref
        self.spec = spec

    def _on_select(self, change) -> None:
        if not self._busy and change["new"]:
            self.load(change["new"])

    def _on_path(self, change) -> None:
        if not self._busy and change["new"].strip():
            self.load(change["new"])

    # ------------------------------------------------------------------ rendering
    def _render(self, spec, path: Path) -> None:
        values = {"total": spec.total, "active": spec.active, "mtp": spec.mtp, "vision": spec.vision_params}
        for key, label, tip in _FIGURES:
            self._cards[key].value = _card(label, values[key], tip)

        how = {
            "native": "native reader (the kit's own inventory)",
            "transformers-meta": "transformers model built on the meta device (no native reader for this type)",
        }
        notes = "".join(f"<li>{esc(n)}</li>" for n in spec.notes)
        self._source.value = (
            f"<div><b>{esc(spec.name)}</b> · model_type <code>{esc(spec.model_type)}</code>, "
            f"read as <code>{esc(spec.architecture)}</code> · source: <b>{esc(how.get(spec.source, spec.source))}</b>"
            f"<br><span style='color:#666'>config: <code>{esc(_shown_path(path))}</code></span>"
            + (f"<ul style='margin:2px 0'>{notes}</ul>" if notes else "")
            + "</div>"
        )

        total = spec.total
        rows = [[c, fmt_exact(n), f"{100 * n / total:.2f}%"] for c, n in spec.components.items()]
        rows.append(["total", fmt_exact(total), "100.00%"])
        self._table.value = html_table(["component", "parameters", "% of total"], rows, align_right=(1, 2))

        kinds: dict[str, list[int]] = {}
        for layer in spec.layers:
            kinds.setdefault(layer.kind, []).append(layer.params)
        krows = [
            [
                k,
                len(v),
                fmt_exact(v[0]) if len(set(v)) == 1 else f"{fmt_exact(min(v))} – {fmt_exact(max(v))}",
                fmt_exact(sum(v)),
            ]
            for k, v in kinds.items()
        ]
        head = (
            f"<b>{spec.num_layers}</b> main layers ({spec.num_moe_layers} MoE), "
            f"<b>{spec.num_mtp_layers}</b> MTP; attention: {esc(', '.join(spec.attention_kinds))}; "
            f"TP splits: {esc(', '.join(spec.split_components('tp')) or '—')}; "
            f"EP splits: {esc(', '.join(spec.split_components('expert')) or '—')}"
        )
        self._layers.value = f"<div>{head}</div>" + html_table(
            ["layer kind", "layers", "params per layer", "params"], krows, align_right=(1, 2, 3)
        )
        self._chart.value = _draw_components(spec)
        self._results.layout.display = None
