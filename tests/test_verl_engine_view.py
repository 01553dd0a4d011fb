"""The run view's trainer switch (``lite`` | ``verl SFT``) sets ``RunConfig.trainer``."""

from __future__ import annotations

import pytest


def test_trainer_switch_sets_the_run_config(tmp_path):
    from widgets.run_view import TRAINER_OPTIONS, RunView

    assert [label for label, _ in TRAINER_OPTIONS] == ["lite", "verl SFT"]
    v = RunView()
    assert v.config().trainer == "lite"
    v._trainer.value = "verl-sft"
    cfg = v.config()
    assert cfg.trainer == "verl-sft"
    from mlite.launch.verl_sft import command

    assert "engine=lite" in command(tmp_path, cfg)
    v._launcher.value = "ray"  # verl SFT runs under torchrun: the form refuses the pair with one line
    with pytest.raises(Exception, match="launcher: --trainer verl-sft runs under torchrun"):
        v.config()
