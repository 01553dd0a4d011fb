"""Moved: :class:`~mlite.options.training.TrainingOptions` and its vocabularies live in :mod:`mlite.options.training`
(the one training vocabulary, below ``memory/``); this name is kept for the modules that import it from here."""

from ..options.training import *  # noqa: F403
from ..options.training import __all__  # noqa: F401
