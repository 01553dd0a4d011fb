"""One module per log format (its line grammar, its sniff and its :class:`~.registry.LogFormat` entry) and the
registry they are entered in, in the order of :data:`mlite.logs.FORMATS`. A new format: a module here with its
``FORMAT`` entry, and one line below."""

from . import megatron, mlite_run, nemo_rl, pipe, registry, tensorboard, verl_console, verl_jsonl

for _module in (verl_console, verl_jsonl, megatron, mlite_run, tensorboard, pipe, nemo_rl):
    registry.register(_module.FORMAT)
