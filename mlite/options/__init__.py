"""The options table (:mod:`.table`, rows typed in :mod:`.schema`) and what derives from it: command-line flags
(:mod:`.cli`) and verl launcher overrides in both directions (:mod:`.verl`, transforms in :mod:`.codecs`)."""

from .cli import add_flags, command_args, values_from_args
from .rollout import ROLLOUT as ROLLOUT
from .schema import ByMode, Codec, Key, NotExpressible, Option
from .table import EXPORT, NOT_OPTIONS, RUN, TRAINING

__all__ = [
    "EXPORT",
    "NOT_OPTIONS",
    "RUN",
    "TRAINING",
    "ByMode",
    "Codec",
    "Key",
    "NotExpressible",
    "Option",
    "add_flags",
    "command_args",
    "values_from_args",
]
