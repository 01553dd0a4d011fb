"""``python -m mlite.verl_engine.launch verl.trainer.sft_trainer [overrides]``: run a verl entry module with the lite
engine registered (as ``python -m verl_mlite.launch`` does for ``engine=mlite``).

With ``MLITE_VERL_CPU=1`` the CPU platform shim (:mod:`.platform`) is installed first. When the entry returns and
``MLITE_VERL_RUN_DIR`` names a run directory, rank 0 writes its ``result.json`` (completed, last logged step) so the
supervisor finalises the run as completed.
"""

from __future__ import annotations

import os
import runpy
import sys


def main() -> None:
    if len(sys.argv) < 2:
        print("usage: python -m mlite.verl_engine.launch MODULE [hydra overrides...]", file=sys.stderr)
        sys.exit(2)
    if os.environ.get("MLITE_VERL_CPU") == "1":
        from .platform import install

        install()
    from . import register

    register()
    module = sys.argv[1]
    sys.argv = [module, *sys.argv[2:]]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
    run_dir = os.environ.get("MLITE_VERL_RUN_DIR")
    if run_dir and os.environ.get("RANK", "0") == "0":
        from ..launch.rundir import RunDir
        from ..rundir import COMPLETED

        rd = RunDir(run_dir)
        recs = rd.read_metrics()
        rd.write_result(COMPLETED, recs[-1][0] if recs else 0)


if __name__ == "__main__":
    main()
