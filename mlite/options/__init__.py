"""The one training vocabulary and what derives from it: :class:`TrainingOptions` (:mod:`.training`), the rules
every layer calls (:mod:`.rules`), the optimizer registries (:mod:`.optimizers`, on :mod:`.registry`), the options
table (:mod:`.table`, rows typed in :mod:`.schema`), command-line flags (:mod:`.cli`) and verl launcher overrides in
both directions (:mod:`.verl`, transforms in :mod:`.codecs`)."""

from .cli import add_flags, command_args, values_from_args
from .optimizers import ALGORITHMS, BACKENDS, Algorithm, Backend
from .rollout import ROLLOUT as ROLLOUT
from .schema import ByMode, Codec, Key, NotExpressible, Option
from .table import EXPORT, NOT_OPTIONS, RUN, TRAINING
from .training import TrainingOptions

__all__ = [
    "ALGORITHMS",
    "BACKENDS",
    "EXPORT",
    "NOT_OPTIONS",
    "RUN",
    "TRAINING",
    "Algorithm",
    "Backend",
    "ByMode",
    "Codec",
    "Key",
    "NotExpressible",
    "Option",
    "TrainingOptions",
    "add_flags",
    "command_args",
    "values_from_args",
]
