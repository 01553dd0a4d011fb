"""The row types of the options table (:mod:`.table`): one :class:`Option` per dataclass field, with how it is
spelled on the command line, in a widget and in verl's Hydra keys for each launcher target.

A verl mapping is one of: :class:`Key` (one field <-> one Hydra key, with an optional value map such as
``bf16 <-> bfloat16``), :class:`Codec` (several fields or keys, a named pair of functions in :mod:`.codecs`),
:class:`ByMode` (different keys for SFT and GRPO launchers), or :class:`NotExpressible` (the target has no key:
the table says why and what the target runs instead). The same row drives both directions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

KEEP = "keep"
"""``NotExpressible.runs``: what the target runs is not decided by this option (an estimator assumption, or the
target sizes it itself); the exported plan keeps the value, a launcher read back gives the default."""

DEFAULT = "default"
"""``NotExpressible.runs``: the target always runs the option's default."""


@dataclass(frozen=True)
class Key:
    """One option field <-> one Hydra key."""

    key: str
    """Key template: ``{engine}`` (mlite engine), ``{optim}`` (optimizer group), ``{megatron}`` (verl's Megatron
    engine), ``{actor}`` (``actor_rollout_ref.actor``) are filled in per target."""
    add: bool = False
    """Written ``+key=...`` (the key is not in the packaged config)."""
    values: tuple[tuple[object, object], ...] = ()
    """Value map ``(mlite value, verl value)``, e.g. ``(("bf16", "bfloat16"),)``; identity when empty."""
    knob: str | None = None
    """Launcher knob (bash variable) holding the value; the override then reads ``${KNOB}``."""
    write: str = "changed"
    """``always``; ``changed`` (only when the value differs from :attr:`verl_default`); ``launcher`` (the
    launcher's batch knobs write it, :mod:`mlite.export.grpo` / :mod:`mlite.export.verl_sft`; read here)."""
    verl_default: object = None
    """The value verl uses when the key is absent (what a reader returns then); None: the option's default."""
    requires: str | None = None
    """A bool option that must be on for the key to apply (e.g. bf16 moments need PAO)."""
    aliases: tuple[str, ...] = ()
    """Other key templates read as the same value (first found wins after :attr:`key`)."""


@dataclass(frozen=True)
class Codec:
    """Several fields and/or keys: a named ``(write, read)`` pair in :mod:`.codecs`."""

    name: str
    """Name in :data:`mlite.options.codecs.CODECS`."""
    keys: tuple[str, ...]
    """Key templates it writes or reads (documentation, and the keys an import consumes)."""
    knob: str | None = None
    """Launcher knob the codec's main value goes through, if any."""


@dataclass(frozen=True)
class NotExpressible:
    """The target has no key for this option."""

    reason: str
    """Why, in one sentence (it becomes the exporter's note when the value is not what the target runs)."""
    runs: object = KEEP
    """What the target runs: :data:`KEEP`, :data:`DEFAULT`, or a value (verl's Megatron backend: ``dist_opt``)."""
    folds: tuple[tuple[str, object], ...] = ()
    """``(field, value)`` set instead when this option is on (grad offload -> ``param_offload=True``)."""


@dataclass(frozen=True)
class Via:
    """``mlite run --trainer verl-sft``: the field reaches verl another way than one Hydra key."""

    how: str
    """How (one sentence)."""


@dataclass(frozen=True)
class ByMode:
    """Different mappings for SFT and GRPO launchers (data and batch keys)."""

    sft: object
    """Mapping in an SFT launcher."""
    grpo: object
    """Mapping in a GRPO launcher."""


@dataclass(frozen=True)
class Option:
    """One training or run option: the dataclass field and every other spelling of it."""

    field: str
    """Field name in the owning dataclass (:class:`~mlite.options.TrainingOptions` or
    :class:`~mlite.launch.RunConfig`)."""
    type: type
    """``bool``, ``int``, ``float``, ``str`` or ``tuple`` (a comma-separated list on the command line)."""
    default: object
    """Default (equal to the dataclass default; a test checks)."""
    flag: str | None
    """Command-line flag; None: not on the command line. Rows may share a flag (``--moment-dtype`` sets both
    moment dtypes); a shared flag sets every row that names it."""
    help: str
    """Help text of the flag (and the widget's tooltip)."""
    label: str | None = None
    """Widget label (None: the option has no control)."""
    choices: Sequence = ()
    """Allowed values (argparse choices; the widget's options): a tuple, or the live names of a registry
    (:attr:`mlite.options.registry.Registry.names`: an entry registered later is a choice too)."""
    choice_labels: tuple[str, ...] = ()
    """A few words per choice, in :attr:`choices` order, shown beside it by a widget (``1: weights to host``);
    empty: the bare values."""
    cli: str = "value"
    """``value`` (``--flag V``), ``switch`` (``--flag`` sets True), ``negate`` (``--flag`` sets False), ``gpu`` (GiB
    or a GPU name, see :data:`mlite.memory.GPU_MEMORY_GIB`)."""
    group: str | None = None
    """Argparse group title; ``mesh``: the flag is added by :func:`mlite.cli.mesh.add_mesh_flags`, not here."""
    required: bool = False
    """The flag must be given (always printed)."""
    metavar: str | None = None
    """Argparse metavar."""
    path: tuple[str, ...] = ()
    """RUN rows: the nested RunConfig fields the flag sets (``("training.use_precision_aware_optimizer",)``; the
    moment dtype sets two); empty: a field of RunConfig itself."""
    mlite: object = None
    """Mapping for verl's mlite engine targets (``verl-mlite-sft``, ``verl-mlite-grpo``); None: not a launcher
    option (run options)."""
    verl_sft: object = None
    """RUN rows: what ``mlite run --trainer verl-sft`` does with the field: a :class:`Key` (the Hydra key it is
    written as), a :class:`Via` (it reaches verl another way) or :class:`NotExpressible` (verl's SFT trainer does not
    run it: why; a value other than the default is refused before anything starts)."""
    megatron: object = None
    """Mapping for verl's Megatron backend target (``verl-megatron-grpo``; a Megatron SFT launcher when read)."""

    @property
    def dest(self) -> str:
        """The argparse destination of :attr:`flag` (``--micro-batch`` -> ``micro_batch``)."""
        return (self.flag or self.field).lstrip("-").replace("-", "_")


def verl_key_row(group: str, field: str, type_: type, default, key: str, help: str, flag: str | None, **kw) -> Option:
    """An option that is one verl Hydra key for every target (the RL rows of :mod:`mlite.options.rl_fsdp` and
    :mod:`mlite.options.rl_critic`): its help starts with the key; ``aliases`` are older spellings of the key."""
    m = Key(key, aliases=kw.pop("aliases", ()))
    return Option(
        field=field, type=type_, default=default, flag=flag, help=f"{key}: {help}", mlite=m, megatron=m, group=group,
        **kw,
    )  # fmt: skip
