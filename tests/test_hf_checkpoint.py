"""Weights of a cut-to-size model from a local Hugging Face checkpoint that transformers' save_pretrained wrote.

Oracle: transformers itself. The test saves a transformers model, cuts its config (chosen layers, fewer experts),
builds the transformers model of the cut config and fills it module by module from the original model (layer
``j`` = original layer ``source_layers[j]``, experts ``0..E-1``): the lite model loaded from the files on disk must
give the same logits.
"""

from __future__ import annotations

import json
import re
import warnings

import pytest
import torch

from mlite.errors import MliteError
from mlite.models import from_hf_config, load_config
from mlite.models.shrink import shrink_config
from mlite.runtime.batch import PackedBatch
from mlite.runtime.hf_checkpoint import load_hf_checkpoint
from mlite.runtime.models import build_lite_model


def _hf(cfg: dict, seed: int = 0):
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    cfg = {k: v for k, v in cfg.items() if k != "architectures"}
    mt = cfg.pop("model_type")
    torch.manual_seed(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = AutoModelForCausalLM.from_config(AutoConfig.for_model(mt, **cfg), dtype=torch.float32)
    with torch.no_grad():  # every weight off its init (norm scales included), so no term can hide
        g = torch.Generator().manual_seed(seed + 1)
        for n, p in m.named_parameters():
            if not n.endswith("A_log"):
                p.add_(0.05 * torch.randn(p.shape, generator=g))
    return m.eval()


def _expert_sliced(state: dict, n: int) -> dict:
    out = {}
    for k, v in state.items():
        if k.endswith(("experts.gate_up_proj", "experts.down_proj", "mlp.gate.weight")) and v.shape[0] > n:
            v = v[:n]
        out[k] = v
    return out


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    out = {}
    for name in ("tiny-dense", "tiny-moe", "tiny-hybrid", "tiny-mixtral"):
        d = tmp_path_factory.mktemp(name)
        model = _hf(load_config(name)[1])
        model.save_pretrained(d)
        out[name] = (d, model)
    return out


@pytest.mark.parametrize(
    ("name", "layers", "experts"),
    [
        ("tiny-dense", 4, None),
        ("tiny-dense", 2, None),
        ("tiny-moe", 2, 4),
        ("tiny-hybrid", 2, 4),
        ("tiny-mixtral", 3, 2),
    ],
)
def test_cut_model_logits_equal_transformers(saved, name, layers, experts):
    directory, orig = saved[name]
    raw = load_config(name)[1]
    cut = shrink_config(name, layers=layers, experts=experts)
    spec = from_hf_config(cut.config, name=f"{name}-cut")
    lite = build_lite_model(spec, seed=123)
    wanted = {k: tuple(v.shape) for k, v in lite.hf_state_dict().items()}
    lite.load_hf_state_dict(
        load_hf_checkpoint(directory, wanted, config=raw, source_layers=cut.source_layers, num_experts=cut.num_experts)
    )
    ref = _hf(cut.config, seed=7)
    n = cut.num_experts or 0
    with torch.no_grad():
        for j, i in enumerate(cut.source_layers):
            ref.model.layers[j].load_state_dict(_expert_sliced(orig.model.layers[i].state_dict(), n))
        for attr in ("embed_tokens", "norm"):
            getattr(ref.model, attr).load_state_dict(getattr(orig.model, attr).state_dict())
        ref.lm_head.load_state_dict(orig.lm_head.state_dict())
    g = torch.Generator().manual_seed(3)
    seqs = [torch.randint(0, spec.vocab_size, (k,), generator=g) for k in (19, 40)]
    with torch.no_grad():
        got = lite.forward_batch(PackedBatch.from_sequences([s.tolist() for s in seqs]))
        want = torch.cat([ref(input_ids=s[None]).logits[0] for s in seqs])
    torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)


def test_mismatched_checkpoint_is_refused_before_reading(saved, tmp_path):
    directory, _ = saved["tiny-moe"]
    other = dict(load_config("tiny-moe")[1], hidden_size=128)
    with pytest.raises(MliteError, match="hidden_size is 64 there, 128 in the config"):
        load_hf_checkpoint(directory, {}, config=other)
    with pytest.raises(MliteError, match=r"no config\.json"):
        load_hf_checkpoint(tmp_path, {}, config=other)
    with pytest.raises(MliteError, match="no such directory"):
        load_hf_checkpoint(tmp_path / "nope", {}, config=other)
    (tmp_path / "config.json").write_text(json.dumps(load_config("tiny-moe")[1]))
    with pytest.raises(MliteError, match=r"no \*\.safetensors"):
        load_hf_checkpoint(tmp_path, {}, config=load_config("tiny-moe")[1])


def test_missing_tensor_names_it(saved):
    directory, _ = saved["tiny-dense"]
    with pytest.raises(
        MliteError, match=re.escape("'model.layers.0.mlp.experts.gate_up_proj' is not in the checkpoint")
    ):
        load_hf_checkpoint(
            directory, {"model.layers.0.mlp.experts.gate_up_proj": (4, 8, 8)}, config=load_config("tiny-dense")[1]
        )
