"""``LauncherView``: start from a verl launcher: pick one of the copied verl examples or paste a script, read it with
:func:`mlite.export.import_launcher`, and hand its mesh and training options to the planner and the memory view.

Everything shown comes from :class:`mlite.export.ImportedLauncher` (the mesh, Megatron-Core's verdict with the
inherited sizes said, the warnings); this module only lays it out and sets the other views' controls.

CSS classes for tests: ``mlite-launcher`` (the view), ``mlite-launcher-pick`` (file dropdown), ``mlite-launcher-text``
(paste area), ``mlite-launcher-env`` (NAME=VALUE lines), ``mlite-launcher-read`` (button), ``mlite-launcher-summary``,
``mlite-launcher-notes``; ``mlite-error`` for what could not be read (one line, as the CLI's exit 2 says it).
"""

from __future__ import annotations

from pathlib import Path

import ipywidgets as W
import traitlets

from mlite.errors import MliteError
from mlite.mesh.axes import sizes_text

from ._common import ErrorBanner, esc

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "tests" / "data" / "launchers"
"""Launchers offered in the dropdown (verl's examples, copied with provenance, and the kit's own fixtures)."""
PASTED = "(pasted text)"
MEMORY_FIELDS = (
    "optimizer",
    "use_distributed_optimizer",
    "use_precision_aware_optimizer",
    "main_grads_dtype",
    "store_param_remainders",
    "offload_fraction",
    "param_offload",
    "optimizer_offload",
    "micro_batch_size",
    "num_microbatches",
    "recompute",
    "sequence_parallel",
    "attention",
)
"""TrainingOptions fields the memory view has a control of the same name for (moments: ``moment_dtype``)."""


def example_launchers() -> list[str]:
    """Launcher files under tests/data/launchers, relative paths, sorted."""
    return sorted(str(p.relative_to(EXAMPLES)) for p in EXAMPLES.rglob("*") if p.suffix in (".sh", ".txt"))


class LauncherView(W.VBox):
    """Read a verl launcher; its mesh goes to ``planner``, its options to ``memory`` (both optional)."""

    imported = traitlets.Any(None, allow_none=True)
    """The last :class:`mlite.export.ImportedLauncher` read (None before, or after a refusal)."""

    def __init__(self, planner=None, memory=None, *, explorer=None, launcher: str | None = None, **kwargs):
        super().__init__(**kwargs)
        self.add_class("mlite-launcher")
        self.planner, self.memory, self.explorer = planner, memory, explorer
        self.errors = ErrorBanner()
        files = example_launchers()
        self.pick = W.Dropdown(
            options=[PASTED, *files],
            value=launcher if launcher in files else PASTED,
            description="launcher",
            layout=W.Layout(width="760px"),
        )
        self.pick.add_class("mlite-launcher-pick")
        self.text = W.Textarea(
            placeholder="or paste a launcher script / a resolved verl command line here",
            layout=W.Layout(width="760px", height="110px"),
        )
        self.text.add_class("mlite-launcher-text")
        self.env = W.Textarea(
            placeholder="NAME=VALUE per line (what --env gives on the command line)",
            layout=W.Layout(width="760px", height="48px"),
        )
        self.env.add_class("mlite-launcher-env")
        self.read = W.Button(description="read launcher", button_style="primary")
        self.read.add_class("mlite-launcher-read")
        self.read.on_click(self.errors.guard(lambda _b: self.load()))
        self._summary = W.HTML()
        self._summary.add_class("mlite-launcher-summary")
        self._notes = W.HTML()
        self._notes.add_class("mlite-launcher-notes")
        self.children = (self.pick, self.text, self.env, self.read, self.errors, self._summary, self._notes)
        if launcher:
            self.errors.run(self.load)

    def _env(self) -> dict:
        env = {}
        for line in self.env.value.splitlines():
            if not line.strip():
                continue
            name, eq, value = line.strip().partition("=")
            if not eq or not name.isidentifier():
                raise MliteError(f"environment line {line.strip()!r}: expected NAME=VALUE")
            env[name] = value
        return env

    def load(self, launcher: str | None = None, *, text: str | None = None):
        """Read ``launcher`` (a name from the dropdown or a path), ``text``, or what the controls say; then set the
        planner's mesh and the memory view's options. Raises MliteError (shown in the banner) when it cannot."""
        from mlite.export import import_launcher

        if launcher is not None and launcher in self.pick.options:
            self.pick.value = launcher
        env = self._env()
        if text is not None or (launcher is None and self.pick.value == PASTED):
            body = self.text.value if text is None else text
            if not body.strip():
                raise MliteError("paste a launcher script, or pick a file")
            imp = import_launcher("<pasted>", env=env, text=body)
        else:
            path = Path(launcher) if launcher and launcher not in self.pick.options else EXAMPLES / self.pick.value
            imp = import_launcher(path, env=env)
        self.imported = None
        doc = imp.to_dict()
        self._render(imp, doc)
        self._apply(imp, doc)
        self.imported = imp
        return imp

    def _apply(self, imp, doc) -> None:
        ref = doc["model_config"]
        if self.planner is not None:
            if ref and self.explorer is not None:
                self.explorer.load(ref)
            elif ref:
                from mlite.models import from_hf_config

                self.planner.spec = from_hf_config(ref)
                self.planner.model_ref = ref
            self.planner.assume(imp.inherited, train_mtp=imp.train_mtp, values=imp.planner_values())
        if self.memory is not None:
            o = imp.training_options()
            values = {k: getattr(o, k) for k in MEMORY_FIELDS if k in self.memory.controls}
            values["moment_dtype"] = o.exp_avg_dtype
            self.memory.set(**values)

    def _render(self, imp, doc) -> None:
        verdict = (
            "<b style='color:#1e7e34'>&#10003; valid</b>"
            if doc["valid"]
            else "<b style='color:#b00020'>&#10007; invalid</b> (Megatron-Core would stop at start-up)"
        )
        model = (
            esc(doc["model_config"])
            if doc["model_config"]
            else f"{esc(doc['model_path'] or '?')} <i>(no config in data/models/: the planner keeps its model)</i>"
        )
        mesh = sizes_text(doc, derived=True)
        self._summary.value = (
            f"<div style='line-height:1.5'>{verdict} &nbsp; <code>{esc(doc['entry'])}</code> → {esc(doc['target'])}, "
            f"{doc['nnodes']} × {doc['gpus_per_node']} = <b>{doc['ngpu']} GPUs</b>, model {model}"
            f"<br><span style='font-family:monospace'>{esc(mesh)}</span></div>"
        )
        rows = (
            [("error", e) for e in doc["errors"]]
            + [("info", i) for i in doc["info"]]
            + [("warning", w) for w in doc["warnings"]]
        )
        colors = {"error": "#b00020", "info": "#555", "warning": "#9a6700"}
        self._notes.value = "".join(
            f"<div style='color:{colors[k]};line-height:1.35'>{k}: {esc(m)}</div>" for k, m in rows
        )
