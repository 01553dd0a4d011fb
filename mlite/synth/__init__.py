"""Synthetic training logs with known contents, for tests, the sample logs of ``data/logs/`` and the parse
benchmark. Nothing here is read by the analysis itself (:mod:`mlite.logs` never imports this package).

::

    from mlite.synth import GenSpec, generate
    truth = generate(GenSpec(format="verl", spikes=(30,), ending="oom"), "/tmp/synthetic_grpo.out")
    truth.records   # every (step, {metric: value}) exactly as printed
    truth.events    # the event kinds a correct reader must find

Modules: :mod:`.spec` (what to write and the truth), :mod:`.curves` (the noisy training curves),
:mod:`.metrics` (a plausible range per metric that is not a curve),
:mod:`.text` (the chatter and endings of a Slurm job), :mod:`.verl` and :mod:`.megatron` (one writer per
format), :mod:`.generate` (writing files, the benchmark log), :mod:`.tensorboard` (TensorBoard logdirs).
"""

from .generate import generate, write_bench_log
from .spec import FORMATS, GenSpec, Truth
from .tensorboard import write_tensorboard

__all__ = ["FORMATS", "GenSpec", "Truth", "generate", "write_bench_log", "write_tensorboard"]
