"""mlite/verl_engine/packing.py: the engine's micro-batches equal verl's path (``prepare_micro_batches`` + per
micro-batch packing) tensor for tensor, and the runtime's loss and gradient norm on them are bitwise the same.

Oracle: verl 0.9.1's own ``prepare_micro_batches`` on a batch from verl's own collator (``SFTTensorCollator``,
no padding), the path the engine took before."""

from __future__ import annotations

import pytest
import torch
from verl.utils import tensordict_utils as tu
from verl.utils.dataset.dataset_utils import DatasetPadMode, SFTTensorCollator

from mlite.verl_engine.packing import micro_batches, verl_micro_batches


def _batch(lens, budget, seed=0, dynamic=True, vocab=1000):
    g = torch.Generator().manual_seed(seed)
    items = []
    for n in lens:
        prompt = int(torch.randint(0, n, (1,), generator=g))
        items.append(
            {
                "input_ids": torch.randint(0, vocab, (n,), generator=g),
                "loss_mask": (torch.arange(n) >= prompt).long(),
                "position_ids": torch.arange(n),
            }
        )
    data = SFTTensorCollator(DatasetPadMode.NO_PADDING)(items)
    meta = {"use_dynamic_bsz": dynamic, "max_token_len_per_gpu": budget, "micro_batch_size_per_gpu": 2}
    return tu.get_tensordict(tensor_dict=data, non_tensor_dict=meta)


def _lens(seed, count, hi):
    return torch.randint(2, hi, (count,), generator=torch.Generator().manual_seed(seed)).tolist()


CASES = {
    "many short": (_lens(1, 300, 60), 2048),
    "few long": (_lens(2, 12, 900), 1024),
    "one a micro-batch": ([500, 500, 500, 500], 600),
    "one micro-batch": (_lens(3, 10, 20), 4096),
}


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_micro_batches_equal_verls_path(case):
    lens, budget = CASES[case]
    data = _batch(lens, budget)
    fast, ref = micro_batches(data, None), verl_micro_batches(data, None)
    assert len(fast) == len(ref) > 0
    for a, b in zip(fast, ref, strict=True):
        for name in ("input_ids", "labels", "seq_lens"):
            x, y = getattr(a, name), getattr(b, name)
            assert x.dtype == y.dtype and torch.equal(x, y), (case, name)
        assert a.loss_mask is None and b.loss_mask is None
    assert sum(int(m.num_tokens) for m in fast) == sum(lens)
    if case == "many short":
        assert len(fast) > 2 and max(m.num_tokens for m in fast) <= budget


def test_fixed_micro_batch_size_takes_verls_path():
    data = _batch(_lens(4, 8, 30), 4096, dynamic=False)
    fast, ref = micro_batches(data, None), verl_micro_batches(data, None)
    assert len(fast) == len(ref) == 4
    assert all(torch.equal(a.labels, b.labels) for a, b in zip(fast, ref))


def test_loss_and_grad_norm_are_bitwise_the_same_as_on_verls_micro_batches():
    from mlite.runtime import MegatronLiteConfig, OptimizerConfig, RuntimeConfig, create_runtime

    rt = create_runtime(
        RuntimeConfig(hf_path="tiny-dense", device="cpu", param_dtype="fp32", seed=0,
                      backend_cfg=MegatronLiteConfig(optimizer=OptimizerConfig(lr=1e-3)))
    )  # fmt: skip
    h = rt.build_model()
    data = _batch(_lens(5, 16, 24), 96, vocab=h.spec.vocab_size)
    figures = []
    for mbs in (micro_batches(data, None), verl_micro_batches(data, None)):
        rt.zero_grad(h)
        out = rt.forward_backward(h, mbs)
        figures.append((out["loss"], out["num_tokens"], out["num_microbatches"], rt.grad_norm(h)[0]))
    assert figures[0] == figures[1]
    assert figures[0][2] > 1
