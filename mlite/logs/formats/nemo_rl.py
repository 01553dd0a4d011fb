"""NeMo-RL's console log (GRPO, and the SFT / DPO / distillation loops that print the same way): a header per step,
then blocks of one metric per line::

    ========================= Step 4/10 =========================
    ▶ Preparing batch...
    ...
    📊 Training Results:
      • Loss: 0.0000
      • Generation KL Error: 0.0003
      • Avg Reward: 0.0000
      • Mean Generation Length: 229.0537

    ⏱️  Timing:
      • Total step time: 970.66s
      • policy_training: 744.26s (76.7%)

    🔍 Performance Metrics:
      • Mean Total Tokens per Sample: 232.05
      • Throughputs (per GPU):
        - E2E (Samples/sec/gpu): 0.04

(``nemo_rl/algorithms/grpo.py`` and ``nemo_rl/algorithms/utils.py:print_performance_metrics``, NVIDIA-NeMo/RL @
7ea279abfbeb698b092856d0dab61e7cf39bc909.) A metric is named by its block and its label: ``train/`` +
lower_snake label (``train/loss``, ``train/generation_kl_error``, ``train/avg_reward``), ``timing/`` + NeMo-RL's
timer name (``timing/policy_training``, ``timing/prepare_for_generation/total``; ``Total step time`` ->
``timing/total_step_time``, its timer's name; the seconds, not the percentage), ``perf/`` +
label (``perf/e2e_tokens_sec_gpu``), ``val/`` + label for ``📊 Validation Results:`` and its timing. Values are
printed with ``:.4f`` (``nan`` / ``inf`` as Python prints them); a unit after the number (``s``, ``tokens``,
``steps``) is dropped.

The step is the header's ``N`` (NeMo-RL counts it within an epoch: after an ``Epoch E/M`` header the steps of the
earlier epochs in the file are added); a block before any header counts as step 1, 2, ... The console prints no
grad norm (NeMo-RL logs ``grad_norm`` to its loggers only) and no KL penalty: the KL role is the generation KL error
(the KL between the generation engine's and the policy's log-probs), the closest thing it prints. Failure lines and
tracebacks are found by the console scan run over the same file (:attr:`.registry.LineReader.console_events`).
"""

from __future__ import annotations

import re

from ..input.source import LogSource
from ..input.text import parse_value_prefix, strip_ansi
from . import verl_console
from .megatron import field_name
from .registry import Head, LineReader, LogFormat, Parsed

NAME = "nemo_rl"
"""The format's name."""

_STEP_RE = re.compile(r"^={5,} Step (\d+)/\d+ ={5,}$")
_EPOCH_RE = re.compile(r"^={5,} Epoch \d+/\d+ ={5,}$")
_BULLET_RE = re.compile(r"^[•-] (?P<label>[^:]+?):(?: (?P<value>\S.*))?$")
_SNIFF_RE = re.compile(r"^(?:={5,} Step \d+/\d+ ={5,}|📊 Training Results:)\s*$", re.MULTILINE)

SECTIONS = {
    "📊 Training Results:": "train",
    "⏱️  Timing:": "timing",
    "🔍 Performance Metrics:": "perf",
    "📊 Validation Results:": "val",
    "⏱️  Validation Timing:": "val",
}
"""A block's title line (stripped) -> the prefix of its metrics."""

_GROUP_TITLES = ("Throughputs",)
"""Bullets without a value that open a group of the same block (others, such as ``vLLM Logger Metrics:``, end it:
what follows them is not one value per label)."""


class BlockParser:
    """The state of one file's read: the current step and block. :meth:`parse` takes the lines in file order."""

    def __init__(self) -> None:
        self.step: int | None = None
        """The step of the last header (within its epoch), None before the first."""
        self.base = 0
        """Steps of the earlier epochs in this file."""
        self.last = 0
        """The last step given to a record."""
        self.blocks = 0
        """Training blocks seen (the step of a block before any header)."""
        self.section: str | None = None
        """The prefix of the open block's metrics, None outside a block."""

    def parse(self, line: str) -> Parsed | None:
        """One decoded line -> its record ``(step, [name], [value])``, or None (headers, titles, other output)."""
        text = strip_ansi(line).strip()
        if not text:
            return None
        if text[0] in "•-" and self.section is not None:
            return self._bullet(text)
        m = _STEP_RE.match(text)
        if m:
            self.step = self.base + int(m.group(1))
            self.section = None
            return None
        if _EPOCH_RE.match(text):
            self.base = self.last
            self.section = None
            return None
        section = SECTIONS.get(text)
        if section is not None:
            if section == "train" and self.step is None:
                self.blocks += 1
            self.section = section
        elif text.startswith("▶"):
            self.section = None
        return None

    def _bullet(self, text: str) -> Parsed | None:
        m = _BULLET_RE.match(text)
        if m is None:
            return None
        label, token = m.group("label"), m.group("value")
        if token is None:
            if not label.startswith(_GROUP_TITLES):
                self.section = None
            return None
        value = parse_value_prefix(token)
        if value is None:
            return None
        name = label if self.section == "timing" and " " not in label else field_name(label)
        step = self.step if self.step is not None else max(self.blocks, 1)
        self.last = step
        return step, [f"{self.section}/{name}"], [value]


def reader(source: LogSource) -> LineReader:
    """A fresh reader for ``source`` (the parser keeps the step and block of its file)."""
    return LineReader(parse=BlockParser().parse, console_events=True)


def has_record(text: str) -> bool:
    """True when ``text`` holds a step header or a training-results title at the start of a line."""
    return ("Step " in text or "Training Results:" in text) and bool(_SNIFF_RE.search(text))


def sniff(head: Head) -> bool:
    """A step header or a training-results block, and no verl line."""
    return has_record(head.text) and verl_console.first_line(head) is None


def shows_trainer(text: str) -> bool:
    """NeMo-RL's phase lines or its package path: a run that printed no block yet."""
    return "▶ Preparing batch..." in text or "nemo_rl/" in text


ROLES = {
    "loss": ("train/loss",),
    "val_loss": ("val/validation_loss", "val/loss"),
    "kl": ("train/generation_kl_error",),
    "reward": ("train/avg_reward", "train/avg_filtered_reward", "train/avg_total_reward"),
    "throughput": ("perf/e2e_tokens_sec_gpu",),
}
"""The metrics NeMo-RL prints per role (no grad norm, entropy or learning rate on the console)."""

FORMAT = LogFormat(
    name=NAME,
    label="NeMo-RL console",
    reader=reader,
    sniff=sniff,
    rank=25,
    roles=ROLES,
    markers=shows_trainer,
    no_metrics="no 'Training Results' block in the file: the run ended before its first step finished",
)
"""NeMo-RL's console log (``Step N/M`` headers and one metric a line)."""
