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
    return ExportPlan(model="tiny-dense", target=target, nodes=1, gpus_per_node=2,
                      options=TrainingOptions(optimizer=optimizer, use_precision_aware_optimizer=True,
                                              offload_fraction=1.0))


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
    with pytest.raises(MliteError, match="dist_opt is not implemented by the lite engine"):
        render(_plan("verl-lite-sft", optimizer="dist_opt"))
