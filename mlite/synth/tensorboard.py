"""Synthetic TensorBoard logdirs: the records of a generated verl run written the way verl's
``trainer.logger=[tensorboard]`` writes them (one ``add_scalar(key, value, step)`` per metric, float32
``simple_value``), with TensorBoard's own event-file writer; a restart writes a second event file into the same
logdir, as a resumed job does."""

from __future__ import annotations

import math
import random
import time
from pathlib import Path

from .spec import GenSpec, Truth, step_sequence
from .verl import verl_values


def write_tensorboard(spec: GenSpec, logdir) -> Truth:
    """Write the run ``spec`` describes (its ``kind``, ``steps``, ``spikes``, ``nan_from``, ``restart``,
    ``drift_from``) as event files under ``logdir``; the truth holds the values as float32 rounds them."""
    import numpy as np
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    logdir = Path(logdir)
    logdir.mkdir(parents=True, exist_ok=True)
    rng = random.Random(spec.seed)
    truth = Truth(path=logdir)
    writer = EventFileWriter(str(logdir), filename_suffix=".0")
    prev = None
    wall = 1.7e9
    for step in step_sequence(spec):
        if prev is not None and step < prev:
            writer.close()
            time.sleep(1.1)  # event file names carry the creation second: the resumed file sorts after
            writer = EventFileWriter(str(logdir), filename_suffix=".1")
            truth.events.add("restart")
        prev = step
        values = verl_values(rng, step, spec)
        exact = {}
        for key, v in values.items():
            wall += 0.01
            summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=key, simple_value=v)])
            writer.add_event(event_pb2.Event(wall_time=wall, step=step, summary=summary))
            exact[key] = float(np.float32(v))
        truth.records.append((step, exact))
    writer.close()
    if any(math.isnan(v) for _, r in truth.records for v in r.values()):
        truth.events.add("nan")
    if spec.spikes:
        truth.events.add("spike")
    if spec.drift_from is not None:
        truth.events.add("change_point")
    return truth
