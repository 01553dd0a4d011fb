"""Launcher ``verl-lite-sft``: the local variant of ``verl-mlite-sft`` (same keys, ``engine=lite``).

The ``verl-mlite-sft`` launcher is built as for the cluster, then the keys of
:data:`mlite.options.table.ENGINE_SWITCH` are switched (``engine=mlite`` -> ``engine=lite``, verl_mlite's search
path -> the kit's) and the entry ``verl_mlite.launch`` becomes ``mlite.verl_engine.launch``: verl's SFT trainer runs
the same overrides on the kit's lite runtime (one node, GPUs or, with ``MLITE_VERL_CPU=1``, the CPU shim).
"""

from __future__ import annotations

from dataclasses import replace

from ..options.optimizers import check_verl_lite_engine
from ..options.table import ENGINE_SWITCH
from . import verl_sft
from .overrides import Override

TARGET = "verl-lite-sft"
FILENAME = "run_verl_lite_sft.sh"
ENTRY = "mlite.verl_engine.launch"


def switch(ov: Override, *, to_local: bool = True) -> Override:
    """One override with its ENGINE_SWITCH value swapped (cluster -> local, or back)."""
    for key, cluster, local in ENGINE_SWITCH[TARGET][1]:
        src, dst = (cluster, local) if to_local else (local, cluster)
        if ov.key == key and ov.value == src:
            return replace(ov, value=dst)
    return ov


def build_launcher(plan, spec, mp):
    check_verl_lite_engine(plan.options.optimizer, "--optimizer")
    cluster = ENGINE_SWITCH[TARGET][0]
    lc, notes = verl_sft.build_launcher(replace(plan, target=cluster), spec, mp)
    sections = [(title, [switch(o) for o in ovs]) for title, ovs in lc.sections]
    command = [ENTRY if w == "verl_mlite.launch" else w for w in lc.command]
    header = [
        f"Local variant of {verl_sft.FILENAME}: the same keys with engine=lite (the kit's lite runtime); "
        "set MLITE_VERL_CPU=1 to run on a CPU (gloo)."
    ] + [h for h in lc.header if "verl_mlite" not in h and "Megatron Lite (megatron.lite)" not in h]
    return replace(lc, filename=FILENAME, sections=sections, command=command, header=header), notes
