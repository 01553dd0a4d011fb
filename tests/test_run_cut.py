"""``mlite run --layers/--experts/--vocab/--hf-checkpoint``: real configs cut to size, weights from a local checkpoint.

Oracle for the checkpoint run: transformers. The test saves a transformers model with ``save_pretrained``, runs
``mlite run --layers 2 --hf-checkpoint DIR`` on it (2 processes), and computes the first step's loss with the
transformers model of the cut config filled from the saved one (layer ``j`` = original layer ``source_layers[j]``)
on the batches the two workers read: the run's ``train/loss`` must equal it.
"""

from __future__ import annotations

import json
import warnings

import pytest
import torch

from mlite.cli import main
from mlite.errors import MliteError
from mlite.launch import RunConfig
from mlite.launch.validate import validate_run
from mlite.models import load_config
from mlite.models.shrink import shrink_config


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
    with torch.no_grad():  # every weight off its init, so no term can hide
        g = torch.Generator().manual_seed(seed + 1)
        for n, p in m.named_parameters():
            if not n.endswith("A_log"):
                p.add_(0.05 * torch.randn(p.shape, generator=g))
    return m.eval()


@pytest.fixture(scope="module")
def hybrid_checkpoint(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny-hybrid-hf")
    model = _hf(load_config("tiny-hybrid")[1])
    model.save_pretrained(d)
    return d, model


def _run(argv: list[str], capsys) -> tuple[int, str, str]:
    rc = main(["run", *argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


# ------------------------------------------------------------------ refused at the edge: exit 2, nothing created
@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--model", "Qwen3-8B", "--layers", "37"], "--layers 37: Qwen3-8B has 36 layers; give 1 to 36"),
        (["--model", "Qwen3-8B", "--layers", "2", "--experts", "4"], "Qwen3-8B has no routed experts"),
        (["--model", "Qwen3-30B-A3B", "--layers", "2", "--experts", "129"], "has 128 routed experts"),
        (["--model", "DeepSeek-V3", "--layers", "2", "--experts", "8"], "DeepSeek-V3 is a deepseek_v3 model"),
        (["--model", "GLM-5", "--layers", "2"], "GLM-5 is a glm_moe_dsa model"),
        (["--model", "DeepSeek-V4-Flash", "--layers", "2"], "DeepSeek-V4-Flash is a deepseek_v4 model"),
    ],
)
def test_bad_cut_exits_2_before_anything(tmp_path, capsys, argv, message):
    out = tmp_path / "run"
    rc, _, err = _run([*argv, "--steps", "3", "--nproc", "2", "--device", "cpu", "--out", str(out)], capsys)
    assert rc == 2
    assert message in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_checkpoint_refusals(tmp_path, hybrid_checkpoint):
    directory, _ = hybrid_checkpoint
    base = dict(model="tiny-hybrid", steps=1, nproc=1, out=str(tmp_path / "r"))
    with pytest.raises(MliteError, match="drop it with --hf-checkpoint"):
        validate_run(RunConfig(**base, vocab=512, hf_checkpoint=str(directory)))
    other = tmp_path / "other"  # the same files, a config.json of another width
    other.mkdir()
    (other / "config.json").write_text(json.dumps(dict(load_config("tiny-hybrid")[1], hidden_size=128)))
    (other / "model.safetensors").symlink_to(directory / "model.safetensors")
    with pytest.raises(MliteError, match="hidden_size is 128 there, 64 in the config"):
        validate_run(RunConfig(**base, layers=2, hf_checkpoint=str(other)))
    with pytest.raises(MliteError, match="not a directory"):
        validate_run(RunConfig(**base, hf_checkpoint=str(tmp_path / "nope")))
    assert not (tmp_path / "r").exists()


def test_relative_checkpoint_path_is_made_absolute(tmp_path, hybrid_checkpoint):
    directory, _ = hybrid_checkpoint
    cfg = validate_run(
        RunConfig(model="tiny-hybrid", steps=1, nproc=1, layers=2, hf_checkpoint=directory.name, out="r"),
        cwd=directory.parent,
    )
    assert cfg.hf_checkpoint == str(directory.resolve())
    assert cfg.cut_changes()[0].startswith("layers 4 -> 2")


# ------------------------------------------------------------------ the oracle: transformers' loss on the same batch
def _reference_loss(cut, orig, batches) -> float:
    ref = _hf(cut.config, seed=7)
    with torch.no_grad():
        for j, i in enumerate(cut.source_layers):
            ref.model.layers[j].load_state_dict(orig.model.layers[i].state_dict())
        for attr in ("embed_tokens", "norm"):
            getattr(ref.model, attr).load_state_dict(getattr(orig.model, attr).state_dict())
        ref.lm_head.load_state_dict(orig.lm_head.state_dict())
    total, count = 0.0, 0
    with torch.no_grad():
        for mb in batches:
            start = 0
            for n in mb.seq_lens.tolist():
                ids, labels = mb.input_ids[start : start + n], mb.labels[start : start + n].clone()
                if mb.loss_mask is not None:
                    labels[~mb.loss_mask[start : start + n]] = -100
                start += n
                keep = labels != -100
                if not keep.any():
                    continue
                logits = ref(input_ids=ids[None]).logits[0].double()
                total += torch.nn.functional.cross_entropy(logits[keep], labels[keep], reduction="sum").item()
                count += int(keep.sum())
    return total / count


def test_run_from_hf_checkpoint_first_loss_equals_transformers(tmp_path, capsys, hybrid_checkpoint):
    from mlite.runtime.data import sft_iterator

    directory, orig = hybrid_checkpoint
    out = tmp_path / "run"
    rc, stdout, _ = _run(
        [
            "--model",
            "tiny-hybrid",
            "--layers",
            "2",
            "--hf-checkpoint",
            str(directory),
            "--steps",
            "1",
            "--nproc",
            "2",
            "--device",
            "cpu",
            "--tokens-per-microbatch",
            "128",
            "--out",
            str(out),
        ],
        capsys,
    )
    assert rc == 0, (out / "train.log").read_text()
    cut = shrink_config("tiny-hybrid", layers=2)
    assert f"model cut: {cut.changes[0]}" in stdout
    log = (out / "train.log").read_text()
    assert f"[mlite] model cut: {cut.changes[0]}" in log and "Hugging Face checkpoint" in log
    got = json.loads((out / "metrics.jsonl").read_text().splitlines()[0])["data"]["train/loss"]
    batches = [
        next(sft_iterator(dataset="tiny_sft", tokens_per_microbatch=128, num_microbatches=1, rank=r, world=2, seed=0))[
            0
        ]
        for r in range(2)
    ]
    want = _reference_loss(cut, orig, batches)
    assert got == pytest.approx(want, rel=1e-5)
    # and the run without the checkpoint starts elsewhere (the weights were really loaded)
    assert abs(got - _reference_loss(cut, _hf(load_config("tiny-hybrid")[1], seed=5), batches)) > 1e-3


# ------------------------------------------------------------------ a real family cut to size trains (CI: the smallest)
@pytest.mark.slow
def test_real_family_cut_to_size_runs_2_steps(tmp_path, capsys):
    """Qwen3.5-35B-A3B (hidden 2048): the smallest real family the lite runtime builds; the 4096-wide dense ones
    (Llama-3.1-8B, Qwen3-8B) take minutes on two cores at two layers, Mixtral-8x7B's eight 14336-wide experts do
    not fit this machine's memory at two layers. Two steps (an update and the forward after it) of 4 experts: 23 s
    on two cores, most of it FSDP2's gloo traffic of the 109 M fp32 parameters (3 steps of 8 experts took 40 s)."""
    out = tmp_path / "run"
    rc, stdout, _ = _run(
        [
            "--model",
            "Qwen3.5-35B-A3B",
            "--layers",
            "2",
            "--experts",
            "4",
            "--vocab",
            "4096",
            "--steps",
            "2",
            "--nproc",
            "2",
            "--device",
            "cpu",
            "--tokens-per-microbatch",
            "64",
            "--out",
            str(out),
        ],
        capsys,
    )
    assert rc == 0, (out / "train.log").read_text()
    assert "model cut: layers 40 -> 2 (original layers 0, 3)" in stdout
    assert "routed experts 256 -> 4" in stdout and "vocab_size 248320 -> 4096" in stdout
    lines = (out / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 2


# ------------------------------------------------------------------ mlite run --from-plan (the plan mlite export wrote)
def _export(tmp_path, capsys, model: str, *flags: str):
    d = tmp_path / f"plan-{model}-{'_'.join(flags)}"
    assert main(["export", model, "--target", "verl-mlite-sft", "--nodes", "1", "--out", str(d), *flags]) == 0
    capsys.readouterr()
    return d / "plan.json"


def test_from_plan_runs_the_plans_mesh_and_optimizer_shrunk(tmp_path, capsys):
    plan = _export(
        tmp_path,
        capsys,
        "tiny-moe",
        "--tp",
        "2",
        "--ep",
        "2",
        "--pao",
        "--moment-dtype",
        "bf16",
        "--offload-fraction",
        "0.5",
        "--seq-len",
        "256",
    )
    out = tmp_path / "run"
    rc, stdout, _ = _run(
        ["--from-plan", str(plan), "--steps", "2", "--nproc", "2", "--device", "cpu", "--out", str(out)], capsys
    )
    assert rc == 0, (out / "train.log").read_text()
    cfg = json.loads((out / "config.json").read_text())
    assert (cfg["model"], cfg["tp"], cfg["cp"], cfg["ep"], cfg["nproc"]) == ("tiny-moe", 2, 1, 2, 2)
    assert (cfg["optimizer"], cfg["pao"], cfg["moment_dtype"], cfg["tokens_per_microbatch"]) == (
        "dist_opt",
        True,
        "bf16",
        256,
    )
    assert cfg["offload_fraction"] == 0.0  # the lite dist_opt keeps its state on the device: said, not hidden
    assert "offload_fraction 0.5 -> 0 (the lite runtime's dist_opt keeps its optimizer state on the device)" in stdout
    assert cfg["layers"] == 2
    assert "plan shrunk: data parallel 4 -> 1 (nproc 8 -> 2)" in stdout
    assert "model cut: layers 4 -> 2" in stdout
    log = (out / "train.log").read_text()
    assert "[mlite] plan shrunk: data parallel 4 -> 1" in log and "mesh: tp 2, cp 1, ep 2" in log
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 2


def test_from_plan_with_the_verl_trainer_is_refused_naming_both_flags(tmp_path, capsys):
    """The plan's run is cut (layers, experts, vocabulary), which verl's SFT trainer does not run: one line naming
    --from-plan and --trainer, not a refusal of a --layers or --optimizer the user never gave."""
    plan = _export(tmp_path, capsys, "tiny-moe", "--optimizer", "fsdp2")
    out = tmp_path / "run"
    argv = ["--from-plan", str(plan), "--trainer", "verl-sft", "--steps", "2", "--nproc", "2", "--device", "cpu"]
    rc, _, err = _run([*argv, "--out", str(out)], capsys)
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert "--from-plan with --trainer verl-sft" in err and "drop --trainer" in err
    assert not out.exists()


def test_plan_that_cannot_be_shrunk_exits_2(tmp_path, capsys):
    """(A mesh larger than --nproc is shrunk, not refused: tests/test_from_plan.py.)"""
    cases = [
        (_export(tmp_path, capsys, "tiny-deepseek-v3"), "2", "is a deepseek_v3 model, which the lite runtime does"),
    ]
    bad = tmp_path / "notaplan.json"
    bad.write_text(json.dumps({"model": "tiny-moe"}))
    cases.append((bad, "2", "is not an 'mlite export' plan (no mesh, options)"))
    for plan, nproc, message in cases:
        out = tmp_path / "run"
        rc, _, err = _run(
            ["--from-plan", str(plan), "--steps", "2", "--nproc", nproc, "--device", "cpu", "--out", str(out)], capsys
        )
        assert rc == 2 and message in err and len(err.strip().splitlines()) == 1, err
        assert not out.exists()
    rc, _, err = _run(["--steps", "2", "--nproc", "2", "--device", "cpu", "--out", str(tmp_path / "r")], capsys)
    assert rc == 2 and "give --model" in err
