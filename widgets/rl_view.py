"""``RLView``: GPU and host memory of one colocated verl RL step, phase by phase, for the memory view's actor.

The actor is the memory view's: the planner's mesh and the memory view's training options (its ``seq_len`` set to
P + R, what the actor trains on). The knobs are verl's (``actor_rollout_ref.rollout.*``, ``data.*``): one control
per labelled row of :data:`mlite.options.rollout.ROLLOUT` (its label, choices and type make the control), feeding
:class:`mlite.memory.rl_options.RolloutOptions`; every figure comes from :func:`mlite.memory.rl.rl_estimate`, one bar
per phase of the estimate (:data:`mlite.memory.rl_phases.PHASE_REGISTRY`, the entry's line as the bar's tooltip).
Output: one stacked bar per phase (GPU bytes of one GPU, by part) against the device capacity and the usable line,
a phase that does not fit in red; host RAM per node for each phase beside it (with the ``--host-mem`` line when
given); cards for the peak phase, the verdict, the KV capacity and the host peak; the engine's errors and warnings;
the ``mlite rl-memory`` command line (from the tables: mesh axes, training options, rollout rows).

CSS classes for tests: ``mlite-rl`` (the view), ``mlite-rl-<field>`` (controls named after the RolloutOptions
fields: name, tensor_model_parallel_size, data_parallel_size, gpu_memory_utilization, free_cache_engine,
sleep_level, prompt_length, response_length, n, train_batch_size, max_model_len, ref, ref_param_offload, host_mem_gib), ``mlite-rl-chart``
(SVG; bars ``g.mlite-rl-bar[data-phase][data-bytes][data-fits]``, failing ones also ``.mlite-rl-oom``; host bars
``g.mlite-rl-host-bar[data-phase][data-bytes]``), ``mlite-rl-peak``, ``mlite-rl-fits``, ``mlite-rl-kv``,
``mlite-rl-host``, ``mlite-rl-metrics`` (the predicted verl memory metrics: rows
``tr.mlite-rl-metric[data-metric][data-bytes]``, the one a log's peak is ``.mlite-rl-log-shows``),
``mlite-rl-verl-version`` (the verl release they assume), ``mlite-rl-messages``, ``mlite-rl-offload-actor`` (the fix button while the step does not fit
with the actor resident), ``mlite-rl-command``, ``mlite-rl-invalid``, ``mlite-error``.
"""

from __future__ import annotations

import shlex
from dataclasses import replace

import ipywidgets as W
import traitlets

from mlite.memory import GIB
from mlite.memory.rl import rl_estimate
from mlite.memory.rl_critic import CriticOptions
from mlite.memory.rl_metrics import verl_release
from mlite.memory.rl_options import RolloutOptions
from mlite.memory.rl_phases import PHASE_REGISTRY
from mlite.mesh.axes import AXES
from mlite.options import TRAINING, command_args
from mlite.options.rl_critic import CRITIC_ROWS
from mlite.options.rollout import DEFAULT_VERL_VERSION, MEM_FRACTION_STATIC, ROLLOUT, VERL_VERSIONS

from ._common import ErrorBanner, esc
from .memory_chart import _card, _nice_step, gib

PART_COLORS = {
    "engine_weights": "#4C72B0",
    "kv_cache": "#64B5CD",
    "engine_activations": "#8DA0CB",
    "engine_overhead": "#B0B7C6",
    "cuda_graphs": "#C9CDD6",
    "engine_share": "#4C72B0",
    "actor_params": "#55A868",
    "actor_resident": "#8CC084",
    "actor_training_peak": "#2E7D4F",
    "forward_activations": "#8172B3",
    "ref_params": "#DD8452",
    "sync_bucket": "#CCB974",
    "gathered_tensor": "#E0D39A",
    "framework": "#937860",
    "gather_copies": "#EFE6BF",
    "sibling_contexts": "#A05195",
    "engine_sleep_residue": "#C9CDD6",
    "critic_params": "#C44E52",
    "critic_resident": "#E39A9C",
    "critic_forward_activations": "#A8383B",
    "critic_training_peak": "#8C2D30",
}
OOM = "#b00020"
HOST_COLOR = "#9E9E9E"


def _phase_help(name: str) -> str:
    """The phase's line from the registry (empty for a phase no longer registered)."""
    entry = PHASE_REGISTRY.get(name)
    return entry.help if entry else ""


def rl_svg(est) -> str:
    """A stacked bar per phase (one GPU) with capacity and usable lines, and host RAM per node per phase."""
    phases = list(est.phases.values())
    cap = est.training.gpu_memory_gib * GIB
    top = max([cap] + [p.gpu_total for p in phases]) * 1.08 / GIB
    left, group, bar, top_pad, plot_h, bottom = 58, 96, 52, 16, 250, 40
    width = left + len(phases) * group + 100
    y = lambda v: top_pad + plot_h * (1 - v / top)
    out = [
        (
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{top_pad + plot_h + bottom}" '
            'style="font-family:sans-serif">'
        )
    ]
    step, t = _nice_step(top), 0.0
    while t <= top:
        out.append(
            f'<line x1="{left}" x2="{left + len(phases) * group}" y1="{y(t):.1f}" y2="{y(t):.1f}" '
            f'stroke="#eee"/><text x="{left - 6}" y="{y(t) + 3:.1f}" font-size="10" '
            f'text-anchor="end">{t:g}</text>'
        )
        t += step
    out.append(
        f'<text x="12" y="{top_pad + plot_h / 2}" font-size="11" transform="rotate(-90 12 '
        f'{top_pad + plot_h / 2})" text-anchor="middle">GiB per GPU</text>'
    )
    for i, p in enumerate(phases):
        fits = est.phase_fits(p.name)
        x = left + i * group + (group - bar) / 2
        acc, segs = 0.0, []
        for k, v in p.gpu.items():
            h = v / GIB
            segs.append(
                f'<rect class="mlite-rl-seg-{k}" x="{x:.1f}" y="{y(acc + h):.1f}" width="{bar}" '
                f'height="{max(plot_h * h / top, 0.5):.1f}" fill="{PART_COLORS.get(k, "#999")}" '
                f'data-bytes="{round(v)}"><title>{esc(p.name)} · {esc(k)}: {gib(v)}</title></rect>'
            )
            acc += h
        outline = (
            ""
            if fits
            else (
                f'<rect x="{x - 1.5:.1f}" y="{y(acc) - 1.5:.1f}" width="{bar + 3}" '
                f'height="{plot_h * acc / top + 3:.1f}" fill="none" stroke="{OOM}" '
                'stroke-width="2.5"/>'
            )
        )
        color = "#222" if fits else OOM
        css = "mlite-rl-bar" + ("" if fits else " mlite-rl-oom")
        out.append(
            f'<g class="{css}" data-phase="{p.name}" data-bytes="{round(p.gpu_total)}" '
            f'data-fits="{str(fits).lower()}">{"".join(segs)}{outline}'
            f'<text x="{x + bar / 2:.1f}" y="{y(acc) - 5:.1f}" font-size="10" text-anchor="middle" '
            f'fill="{color}" font-weight="{400 if fits else 700}">{acc:.1f}</text>'
            f'<text x="{x + bar / 2:.1f}" y="{top_pad + plot_h + 14}" font-size="10" text-anchor="middle" '
            f'fill="{color}">{esc(p.name)}<title>{esc(_phase_help(p.name))}</title></text></g>'
        )
    x1 = left + len(phases) * group
    for v, label, dash in (
        (cap, f"capacity {cap / GIB:g} GiB", ""),
        (est.usable, f"usable {est.usable / GIB:.1f}", "5 3"),
    ):
        out.append(
            f'<line x1="{left}" x2="{x1}" y1="{y(v / GIB):.1f}" y2="{y(v / GIB):.1f}" stroke="{OOM}" '
            'stroke-width="1.5"' + (f' stroke-dasharray="{dash}"' if dash else "") + "/>"
            f'<text x="{x1 + 4}" y="{y(v / GIB) + (-2 if v == cap else 10):.1f}" font-size="10" '
            f'fill="{OOM}">{esc(label)}</text>'
        )
    out.append(f'<line x1="{left}" x2="{left}" y1="{top_pad}" y2="{top_pad + plot_h}" stroke="#999"/></svg>')
    return "".join(out) + _host_svg(est)


def _host_svg(est) -> str:
    phases = list(est.phases.values())
    per_node = est.gpus_per_node
    limit = est.rollout.host_mem_gib
    values = [p.host_total * per_node / GIB for p in phases]
    top = max(values + ([limit] if limit else []) + [1.0]) * 1.12
    left, group, bar, top_pad, plot_h, bottom = 50, 56, 30, 16, 250, 40
    width = left + len(phases) * group + 70
    y = lambda v: top_pad + plot_h * (1 - v / top)
    out = [
        (
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{top_pad + plot_h + bottom}" '
            'style="font-family:sans-serif;margin-left:12px">'
        )
    ]
    step, t = _nice_step(top), 0.0
    while t <= top:
        out.append(f'<text x="{left - 6}" y="{y(t) + 3:.1f}" font-size="10" text-anchor="end">{t:g}</text>')
        t += step
    out.append(
        f'<text x="12" y="{top_pad + plot_h / 2}" font-size="11" transform="rotate(-90 12 '
        f'{top_pad + plot_h / 2})" text-anchor="middle">host GiB per node ({per_node} GPUs)</text>'
    )
    for i, (p, v) in enumerate(zip(phases, values)):
        x = left + i * group + (group - bar) / 2
        over = bool(limit) and v > limit
        fill = OOM if over else HOST_COLOR
        out.append(
            f'<g class="mlite-rl-host-bar" data-phase="{p.name}" data-bytes="{round(p.host_total * per_node)}">'
            f'<rect x="{x:.1f}" y="{y(v):.1f}" width="{bar}" height="{max(plot_h * v / top, 0.5):.1f}" '
            f'fill="{fill}"><title>{esc(p.name)}: {v:.1f} GiB per node</title></rect>'
            f'<text x="{x + bar / 2:.1f}" y="{y(v) - 4:.1f}" font-size="9" text-anchor="middle">{v:.0f}</text>'
            f'<text x="{x + bar / 2:.1f}" y="{top_pad + plot_h + 12}" font-size="8" text-anchor="end" '
            f'transform="rotate(-35 {x + bar / 2:.1f} {top_pad + plot_h + 12})">{esc(p.name)}</text></g>'
        )
    if limit:
        x1 = left + len(phases) * group
        out.append(
            f'<line x1="{left}" x2="{x1}" y1="{y(limit):.1f}" y2="{y(limit):.1f}" stroke="{OOM}" '
            f'stroke-dasharray="5 3"/><text x="{x1 + 2}" y="{y(limit) + 3:.1f}" font-size="10" '
            f'fill="{OOM}">--host-mem</text>'
        )
    out.append(f'<line x1="{left}" x2="{left}" y1="{top_pad}" y2="{top_pad + plot_h}" stroke="#999"/></svg>')
    return "".join(out)


_DROPDOWN_SIZES = (1, 2, 4, 8, 16)
"""Sizes a parallel-size control offers (an integer row whose field ends in ``_parallel_size``)."""


def rollout_control(row, value):
    """The control of one rollout row (:data:`mlite.options.rollout.ROLLOUT`): its label, choices and type decide
    the widget; a row whose default is None shows None as 0 ("verl's choice" in a dropdown)."""
    st = {"description_width": "initial"}
    lay = W.Layout(width=f"{max(150, 7 * len(row.label) + 90)}px")
    if row.type is bool:
        return W.Checkbox(value=value, description=row.label, indent=False, layout=lay)
    if row.choices and row.type is str:
        return W.ToggleButtons(
            options=list(row.choices), value=value, description=row.label, style={"button_width": "90px", **st}
        )
    if row.choices or row.field.endswith("_parallel_size"):
        labels = row.choice_labels or ("",) * len(row.choices or _DROPDOWN_SIZES)
        options = [(f"{c}: {t}" if t else str(c), c) for c, t in zip(row.choices or _DROPDOWN_SIZES, labels)]
        if row.default is None:
            options = [("verl's choice", 0), *options]
        width = 7 * (len(row.label) + max(len(t) for t, _ in options)) + 70
        return W.Dropdown(
            options=options, value=value or 0, description=row.label, style=st, layout=W.Layout(width=f"{width}px")
        )
    if row.type is float and row.default is not None:  # a share of the device: (0, 1]
        return W.FloatSlider(
            value=value,
            min=0.05,
            max=0.98,
            step=0.01,
            description=row.label,
            style=st,
            readout_format=".2f",
            layout=W.Layout(width="460px"),
        )
    kind = W.BoundedFloatText if row.type is float else W.BoundedIntText
    low = 0 if row.default is None else 1
    return kind(value=value or 0, min=low, max=1 << 24, description=row.label, style=st, layout=lay)


def control_value(row, value):
    """A control's value as the row's field value (0 is None where the default is None)."""
    if row.default is None and not value:
        return None
    if row.type is float:
        return round(float(value), 4)
    return int(value) if row.type is int else value


def verl_version_options() -> list[tuple[str, str]]:
    """(label, ``verl_version``) of the releases :mod:`mlite.memory.rl_metrics` knows; the default release keeps
    its own spelling (so the command line leaves ``--verl-version`` out)."""
    default = verl_release(DEFAULT_VERL_VERSION).text
    return [(v, DEFAULT_VERL_VERSION if v == default else v) for v in VERL_VERSIONS]


def metrics_html(est) -> str:
    """The predicted verl memory metrics of ``est`` (``predicted_metrics`` of its ``to_dict``): GiB, bytes and what
    each covers, the one a log's memory peak is marked."""
    d = est.to_dict()
    a = d["predicted_metrics_assumed"]
    rows = []
    for name, b in d["predicted_metrics"].items():
        shows = name == a["log_shows"]
        cls = "mlite-rl-metric" + (" mlite-rl-log-shows" if shows else "")
        key = a["logged_keys"][name]  # as a log of this verl release spells it
        rows.append(
            f'<tr class="{cls}" data-metric="{esc(name)}" data-bytes="{b}"><td><code>{esc(key)}</code>'
            f"{' <b>(a log&#x27;s memory peak)</b>' if shows else ''}</td><td style='text-align:right'>"
            f"{gib(b, 1)}</td><td style='font-size:85%'>{esc(a['covers'][name])}</td></tr>"
        )
    return (
        f"<div style='font-size:90%'>verl {esc(a['verl_version'])} logs, engine placement "
        f"<b>{esc(a['placement'])}</b> ({esc(a['placement_source'])}):</div>"
        f"<table style='border-collapse:collapse'>{''.join(rows)}</table>"
    )


class RLView(W.VBox):
    """RL step memory by phase for the memory view's actor; the rollout knobs under verl's names."""

    estimate = traitlets.Any(None, allow_none=True)
    """The :class:`mlite.memory.rl.RLEstimate` shown (None while the mesh is invalid or the input is bad)."""

    def __init__(self, memory, critic: CriticOptions | None = None, **rollout):
        super().__init__()
        self.add_class("mlite-rl")
        self.memory = memory
        self.errors = ErrorBanner()
        self._base = RolloutOptions(**rollout)
        self._rows = {r.field: r for r in ROLLOUT if r.label}  # the rows with a control, in table order
        c = self.controls = {f: rollout_control(r, getattr(self._base, f)) for f, r in self._rows.items()}
        for name, w in c.items():
            w.add_class(f"mlite-rl-{name}")
        self.verl_version = W.Dropdown(
            options=verl_version_options(),
            value=self._version_value(self._base.verl_version),
            description="verl release (perf/* metrics)",
            style={"description_width": "initial"},
        )
        """The verl release the predicted metrics assume (``RolloutOptions.verl_version``; ``--verl-version``)."""
        self.verl_version.add_class("mlite-rl-verl-version")
        self._critic = critic or CriticOptions(adv_estimator="gae", tp=1)
        self.ppo_critic = W.Checkbox(
            value=critic is not None and critic.active,
            description="PPO critic (algorithm.adv_estimator=gae)",
            indent=False,
        )
        """Adds verl's critic (:mod:`mlite.memory.rl_critic`, options as given): the critic_values / critic_update
        rows and its idle state in the others."""
        self.ppo_critic.add_class("mlite-rl-critic")
        self.metrics = W.HTML()
        self.metrics.add_class("mlite-rl-metrics")
        self.chart = W.HTML()
        self.chart.add_class("mlite-rl-chart")
        self.cards = W.HTML()
        self.messages = W.HTML()
        self.messages.add_class("mlite-rl-messages")
        self.cmd = W.HTML()
        self.cmd.add_class("mlite-rl-command")
        self.invalid = W.HTML()
        self.invalid.add_class("mlite-rl-invalid")
        self.offload_actor = W.Button(
            description="offload the actor while the engine generates (param_offload, optimizer_offload)",
            layout=W.Layout(width="auto", display="none"),
        )
        """Shown while the step does not fit with the actor resident: sets the memory view's two offload switches
        (verl's colocated Megatron examples offload the actor for the rollout)."""
        self.offload_actor.add_class("mlite-rl-offload-actor")
        self.offload_actor.on_click(
            self.errors.guard(lambda _b: self.memory.set(param_offload=True, optimizer_offload=True))
        )
        controls = W.HBox(
            [*c.values(), self.verl_version, self.ppo_critic],
            layout=W.Layout(flex_flow="row wrap", align_items="center", grid_gap="4px 12px"),
        )
        self.children = [
            controls,
            self.errors,
            self.invalid,
            self.cards,
            self.chart,
            self.metrics,
            self.messages,
            self.offload_actor,
            self.cmd,
        ]
        for w in [*c.values(), self.verl_version, self.ppo_critic]:
            w.observe(self.errors.guard(lambda _c: self.refresh()), names="value")
        memory.observe(self.errors.guard(lambda _c: self.refresh()), names="estimate")
        self.errors.run(self.refresh)

    # ------------------------------------------------------------------ state
    def rollout_options(self) -> RolloutOptions:
        """RolloutOptions of the controls (fields without a control as given to the constructor)."""
        values = {f: control_value(r, self.controls[f].value) for f, r in self._rows.items()}
        return replace(self._base, **values, verl_version=self.verl_version.value)

    def critic_options(self) -> CriticOptions | None:
        """The critic shown (None with the checkbox off: GRPO)."""
        return replace(self._critic, adv_estimator="gae", enable=None) if self.ppo_critic.value else None

    @staticmethod
    def _version_value(version: str) -> str:
        """The dropdown value of a ``verl_version`` (its release's entry)."""
        text = verl_release(version).text
        return next(v for label, v in verl_version_options() if label == text)

    def training_options(self):
        """The memory view's TrainingOptions with ``seq_len`` = P + R."""
        r = self.rollout_options()
        return replace(self.memory.options(), seq_len=r.seq_tokens)

    def set(self, **values) -> None:
        """Set controls by field name (``gpu_memory_utilization=0.7``, ``verl_version="0.6"``); each change
        re-estimates."""
        for k, v in values.items():
            if k == "verl_version":
                self.verl_version.value = self._version_value(v)
            else:
                self.controls[k].value = v

    def command(self) -> str:
        """The ``mlite rl-memory`` command line of what is shown, from the tables: the mesh axes
        (:data:`mlite.mesh.axes.AXES`), the training options (:data:`mlite.options.TRAINING`; ``--seq-len`` left
        out, rl-memory's default is P + R as here) and the rollout rows (:data:`mlite.options.rollout.ROLLOUT`; an
        sglang rollout's memory share as ``--mem-fraction-static``)."""
        planner, plan = self.memory.planner, self.memory.planner.plan
        if plan is None:
            return ""
        p = plan.parallel
        words = ["mlite", "rl-memory", planner.model_ref or planner.spec.name, "--ngpu", str(plan.ngpu)]
        for axis in AXES:
            v = getattr(p, axis.name)
            if v not in (None, 1):
                words += [axis.flag, str(v)]
        if p.pp_layout:
            words += ["--pp-layout", p.pp_layout]
        words += command_args(self.training_options(), TRAINING, exclude=("seq_len",))
        r = self.rollout_options()
        share = MEM_FRACTION_STATIC if r.name == "sglang" else None
        rows = [share if share and row.field == share.field else row for row in ROLLOUT]
        words += command_args(r, rows)
        c = self.critic_options()
        if c is not None:
            words += command_args(c, CRITIC_ROWS)
        return shlex.join(words)

    # ------------------------------------------------------------------ compute + render
    def refresh(self) -> None:
        plan = self.memory.planner.plan
        if plan is None or not plan.valid:
            self.estimate = None
            self.invalid.value = "<i>the planner's mesh is invalid: fix it above to see the RL phases</i>"
            self.chart.value = self.cards.value = self.messages.value = self.cmd.value = self.metrics.value = ""
            self.offload_actor.layout.display = "none"
            return
        self.invalid.value = ""
        self.estimate = None
        est = rl_estimate(
            self.memory.planner.spec,
            plan,
            self.training_options(),
            self.rollout_options(),
            critic=self.critic_options(),
        )
        self.estimate = est
        self._render(est)

    def _render(self, est) -> None:
        d = est.to_dict()
        kv = d["kv_cache"]
        fits = d["fits"]
        peak = est.phases[d["peak_phase"]]
        self.cards.value = (
            '<div style="display:flex;flex-wrap:wrap">'
            + _card(
                "peak phase",
                d["peak_phase"],
                f"{round(peak.gpu_total):,} B",
                "mlite-rl-peak",
                "#222" if est.phase_fits(peak.name) else OOM,
            )
            + _card(
                "verdict",
                "fits" if fits else "does NOT fit",
                f"usable {gib(est.usable, 1)} per GPU",
                "mlite-rl-fits",
                "#1b5e20" if fits else OOM,
            )
            + _card(
                "KV cache per GPU",
                f"{kv['tokens']:,} tokens",
                f"{kv['max_concurrent_seqs']:,} seqs of {est.rollout.seq_tokens} · {kv['bytes_per_token']:,} B/tok",
                "mlite-rl-kv",
            )
            + _card(
                "host RAM per node",
                gib(d["host_per_node"], 1),
                f"{d['host_per_node']:,} B",
                "mlite-rl-host",
                OOM if any("--host-mem" in e for e in d["errors"]) else "#222",
            )
            + "</div>"
        )
        present = dict.fromkeys(k for p in est.phases.values() for k in p.gpu)
        legend = "".join(
            f'<span style="margin-right:12px;white-space:nowrap"><span style="display:inline-block;'
            f'width:10px;height:10px;background:{PART_COLORS.get(k, "#999")};vertical-align:middle">'
            f"</span> {esc(k)}</span>"
            for k in present
        )
        self.chart.value = (
            f'<div style="display:flex;flex-wrap:wrap;align-items:flex-start">{rl_svg(est)}</div>'
            f'<div style="font-size:85%;max-width:900px">{legend}; a phase that does not fit is '
            f'<span style="color:{OOM};font-weight:700">red</span></div>'
        )
        self.metrics.value = metrics_html(est)
        items = [f'<li style="color:{OOM}"><b>error</b>: {esc(e)}</li>' for e in d["errors"]]
        items += [f"<li>{esc(w)}</li>" for w in d["warnings"]]
        self.messages.value = f"<ul style='margin:2px 0'>{''.join(items)}</ul>" if items else ""
        o = est.training
        resident = not (o.param_offload and o.optimizer_offload)
        self.offload_actor.layout.display = None if d["errors"] and resident else "none"
        self.cmd.value = f"<code>{esc(self.command())}</code>"
