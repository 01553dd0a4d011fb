"""``mlite export --target verl-lite-sft``: the verl-mlite-sft launcher with only the ENGINE_SWITCH keys changed."""

from __future__ import annotations

import re

import pytest

from mlite.errors import MliteError
from mlite.export import ExportPlan, render
from mlite.memory import TrainingOptions
from mlite.options.table import ENGINE_SWITCH


def _overrides(text: str) -> list[str]:
    return re.findall(r'^\s+"(\+?[\w.@]+=.*)"$', text, flags=re.M)


def _plan(target: str, optimizer: str = "fsdp2") -> ExportPlan:
    return ExportPlan(
        model="tiny-dense",
        target=target,
        nodes=1,
        gpus_per_node=2,
        options=TrainingOptions(optimizer=optimizer, use_precision_aware_optimizer=True, offload_fraction=1.0),
    )


def test_local_variant_switches_only_the_table_keys():
    cluster = render(_plan("verl-mlite-sft"))
    local = render(_plan("verl-lite-sft"))
    a, b = _overrides(cluster.files[cluster.launcher]), _overrides(local.files[local.launcher])
    assert len(a) == len(b) > 20
    switched = {f"{k}={c}": f"{k}={lo}" for k, c, lo in ENGINE_SWITCH["verl-lite-sft"][1]}
    assert [switched.get(o, o) for o in a] == b
    assert "engine=lite" in b and "engine=mlite" not in b
    text = local.files[local.launcher]
    assert "mlite.verl_engine.launch" in text and "verl_mlite.launch" not in text
    assert local.launcher == "run_verl_lite_sft.sh"


def test_local_variant_refuses_dist_opt():
    with pytest.raises(MliteError, match=r"dist_opt is not run by verl's lite engine"):
        render(_plan("verl-lite-sft", optimizer="dist_opt"))


def test_local_variant_runs_on_cpu(tmp_path):
    """The exported launcher itself runs verl's SFT trainer locally (2 CPU ranks, the CPU shim, 3 steps)."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    from mlite.export import write
    from mlite.launch import RunConfig
    from mlite.launch.verl_sft import write_model_dir
    from mlite.logs import read_log
    from mlite.paths import dataset_file

    repo = Path(__file__).resolve().parents[1]
    res = write(_plan("verl-lite-sft"), tmp_path / "ex")
    model = write_model_dir(RunConfig(model="tiny-dense", device="cpu"), tmp_path)
    env = dict(
        os.environ,
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        PYTHONPATH=os.pathsep.join([str(repo), os.environ.get("PYTHONPATH", "")]),
        MLITE_VERL_CPU="1",
        CUDA_VISIBLE_DEVICES="",
        MODEL_PATH=str(model),
        TRAIN_FILES=str(dataset_file("tiny_sft")),
        VAL_FILES="null",
        TRAIN_BATCH_SIZE="8",
        LOG_DIR=str(tmp_path / "logs"),
        OMP_NUM_THREADS="1",
        MASTER_PORT="29517",
    )
    p = subprocess.run(
        [
            "bash",
            str(tmp_path / "ex" / res.launcher),
            "trainer.total_training_steps=3",
            "trainer.device=cpu",
            "trainer.resume_mode=disable",
            f"trainer.default_local_dir={tmp_path}/c",
            "data.num_workers=0",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=str(tmp_path),
        timeout=240,
    )
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    (jsonl,) = (tmp_path / "logs").glob("*.jsonl")
    steps = [json.loads(line)["step"] for line in jsonl.read_text().splitlines()]
    assert steps == [1, 2, 3]
    assert read_log(jsonl).num_steps == 3
