"""Single-node debug runs of the lite runtime, started as separate processes and watched through files.

``start(RunConfig(...)) -> RunHandle`` (:mod:`.start`); the workers (:mod:`.worker`) run under torchrun
(:mod:`.torchrun`, default) or as Ray actors (:mod:`.ray_launcher`); one run directory per run (:mod:`.rundir`) in the
schema of :mod:`mlite.rundir`, which :mod:`mlite.logs` reads; :mod:`.handle` polls it; :mod:`.memory_check` sets
measured memory against the estimator's figure (the run view's presenter, curves included, is
``widgets/run_monitor.py``). Importing this package imports neither torch nor any UI library.
"""

from .config import DEBUG_MODELS, RunConfig, runs_root
from .handle import RunHandle
from .start import start

__all__ = ["DEBUG_MODELS", "RunConfig", "RunHandle", "runs_root", "start"]
