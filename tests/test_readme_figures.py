"""The GPU figures the README quotes in prose are the committed CSVs' values (bench/results/*.csv), rounded as the
README writes them: a re-measured CSV whose README was not updated fails here. (The Megatron-Core table is checked
by tests/test_mcore_oracle.py, the RL table by tests/test_rl_memory.py.)"""

from __future__ import annotations

import csv

import pytest
from conftest import REPO

RESULTS = REPO / "bench" / "results"
GIB = 2**30


def _rows(name: str, key: str) -> dict[str, dict]:
    with (RESULTS / name).open(newline="") as f:
        return {r[key]: r for r in csv.DictReader(f)}


@pytest.fixture(scope="module")
def readme() -> str:
    return " ".join((REPO / "README.md").read_text(encoding="utf-8").split())  # line breaks as spaces


def _quoted(readme: str, *texts: str) -> None:
    missing = [t for t in texts if t not in readme]
    assert not missing, f"README does not quote the CSV's figures: {missing}"


def test_memory_figures(readme):
    rows = _rows("gpu_memory.csv", "config")
    err = lambda r, k: int(r[f"predicted_{k}_bytes"]) / int(r[f"measured_{k}_bytes"]) - 1
    static = max(abs(err(r, "static")) for r in rows.values())
    peak = max(abs(err(r, "peak")) for r in rows.values())
    d = rows["dense1b_distopt_pao_bf16grads_s4096"]
    peaks = [err(r, "peak") for r in rows.values()]
    assert max(peaks) < 0, "a peak prediction is above its measurement: the README's one-sided bias no longer holds"
    _quoted(
        readme,
        f"`bench/results/gpu_memory.csv`, {len(rows)} configurations",
        f"within **{100 * static:.1f} %** of `memory_allocated()`",
        f"within **{100 * peak:.1f} %** of `max_memory_allocated()`",
        f"each peak prediction is {-100 * max(peaks):.1f}–{-100 * min(peaks):.1f} % under the measurement",
        f"static {int(d['measured_static_bytes']) / GIB:.2f} GiB (estimate {100 * err(d, 'static'):.1f} %)".replace(
            "-", "−"
        ),
        f"peak {int(d['measured_peak_bytes']) / GIB:.2f} GiB (estimate {100 * err(d, 'peak'):.1f} %)".replace("-", "−"),
    )


def test_speed_figures(readme):
    v = {k: float(r["value"]) for k, r in _rows("gpu_speed.csv", "measurement").items()}
    lines = {ln for ln in (REPO / "README.md").read_text(encoding="utf-8").splitlines() if ln.startswith("  | ")}
    for key, row in (
        ("ratio dense mb1", "| 1.12 B dense | 1 |"),
        ("ratio dense mb4", "| 1.12 B dense | 4 |"),
        ("ratio moe mb1", "| 0.70 B MoE, 32 experts top-4 | 1 |"),
        ("ratio moe mb4", "| 0.70 B MoE | 4 |"),
    ):
        line = next(ln for ln in lines if row in ln)
        assert f"**{v[key]:.2f}**" in line, (key, v[key], line)
    _quoted(
        readme,
        f"(**{v['optimizer/torch_fused dense']:.2f}×**)",
        f"dense PAO 14.5 ms (**{v['optimizer/torch_fused dense pao']:.2f}×**)",
        f"(**{v['optimizer/torch_fused moe']:.2f}×**)",
        f"Dense MFU at 4 micro-batches **{100 * v['mfu dense mb4']:.1f} %**",
        f"(HF {100 * v['mfu dense mb4 transformers']:.1f} %; goal 35 %",
        f"MFU {100 * v['mfu dense mb4 compile']:.1f} %: no gain",
        f"**{v['offload1.0/resident dense-small']:.2f}×** the resident step (goal ≤ 2.5×",
    )


def test_verl_sft_figures(readme):
    v = {
        k.removeprefix("verl_sft dense1b "): float(r["value"])
        for k, r in _rows("gpu_verl_sft.csv", "measurement").items()
    }
    _quoted(
        readme,
        f"~{v['tokens/step'] / 1000:.1f} k tokens",
        f"**{v['tokens/s'] / 1000:.1f} k tokens/s**",
        f"({v['step time']:.2f} s a step; verl's own `train/mfu` {100 * v['mfu (verl)']:.0f} %)",
        f"{v['/ lite dense mb4']:.2f}× the plain lite runtime's",
        f"**{v['peak allocated'] / GIB:.1f} GiB** (reserved {v['peak reserved'] / GIB:.1f} GiB)",
        f"{v['peak/estimate']:.2f}× the kit's estimate of the run ({v['estimated peak'] / GIB:.1f} GiB)",
    )


def test_fla_figures(readme):
    rows = _rows("gpu_fla.csv", "measurement")
    v = {k: r["value"] for k, r in rows.items()}
    tl = "fla0.6.0_tilelang0.1.15 "
    fla_ref = {k.rsplit(" ", 1)[1]: float(x) for k, x in v.items() if k.startswith(tl + "fla vs_ref max_rel")}
    torch_ref = max(float(x) for k, x in v.items() if k.startswith("gdn torch vs fp32 max_rel"))
    worst = max(fla_ref, key=fla_ref.get)
    assert v["fla0.6.0 probe ok"] == "0" and "Hopper" in rows["fla0.6.0 probe ok"]["unit"]
    assert v["fla0.6.0 auto backend"] == "torch" and v[tl + "auto backend"] == "fla" and v[tl + "probe ok"] == "1"
    assert v["fla0.4.2 env"] == "failed" and rows["fla0.4.2 env"]["unit"] == "timed out"
    _quoted(
        readme,
        f"forward+backward in {float(v[tl + 'fla fwd+bwd']):.2f} ms against {float(v['gdn torch fwd+bwd']):.2f} ms",
        f"({float(v[tl + 'fla speedup over torch']):.1f}x)",
        f"{100 * fla_ref[worst]:.1f} % ({worst}) for fla and {100 * torch_ref:.2f} % for the PyTorch path",
        f"within {float(v[tl + 'train_fla max loss diff vs torch']):.4f} of the PyTorch path's losses",
        f"({float(v[tl + 'train_fla step time']):.3f} s vs {float(v['train_torch step time']):.3f} s a step)",
        "`fla0.4.2 env,failed,timed out`",
    )


def test_cli_runs_record(readme):
    """bench/results/gpu_cli_runs.txt: four rows, each ``NAME rc=0 T s`` and its ``completed: ... final loss X`` line."""
    lines = [ln for ln in (RESULTS / "gpu_cli_runs.txt").read_text(encoding="utf-8").splitlines() if ln[:1] != "#"]
    heads = [i for i, ln in enumerate(lines) if " rc=" in ln]
    rows = {lines[i].split()[0]: (lines[i].split()[1], lines[i + 1]) for i in heads}
    assert list(rows) == ["moe_fsdp2", "moe_distopt_pao_bf16g", "hybrid_torch", "hybrid_fla"]
    assert all(rc == "rc=0" and done.startswith("completed: 20 steps") for rc, done in rows.values()), rows
    loss = {k: done.split("final loss ")[1].split(",")[0] for k, (_, done) in rows.items()}
    assert "[mlite] gated deltanet: fla's chunk kernels (the probe passed)" in lines
    _quoted(
        readme, f"final loss {loss['hybrid_fla']} vs {loss['hybrid_torch']}) is in `bench/results/gpu_cli_runs.txt`"
    )


def test_registry_rows_record(readme):
    """bench/results/gpu_registry_rows.txt: the kernel's tie and bitwise checks passed on CUDA, and the tiny-moe rows
    after the backend registry end at the final loss of the earlier record (what the README says)."""
    text = (RESULTS / "gpu_registry_rows.txt").read_text(encoding="utf-8")
    lines = [ln for ln in text.splitlines() if ln[:1] != "#"]
    assert "fused_check --ties rc=0" in lines and "fused_check rc=0" in lines
    heads = [i for i, ln in enumerate(lines) if " rc=" in ln and not ln.startswith("fused_check")]
    rows = {lines[i].split()[0]: lines[i + 2] for i in heads}
    assert list(rows) == ["moe_fsdp2", "moe_distopt_pao_bf16g", "dense_fsdp2_offload1"]
    assert all(done.startswith("completed: 20 steps") for done in rows.values()), rows
    loss = {k: done.split("final loss ")[1].split(",")[0] for k, done in rows.items()}
    earlier = [ln for ln in (RESULTS / "gpu_cli_runs.txt").read_text(encoding="utf-8").splitlines() if ln[:1] != "#"]
    was = next(earlier[i + 1] for i, ln in enumerate(earlier) if ln.startswith("moe_fsdp2 rc="))
    assert loss["moe_fsdp2"] == loss["moe_distopt_pao_bf16g"] == was.split("final loss ")[1].split(",")[0]
    assert "# check.json all_equal: True" in text and '"remainder -0x8000": true' in text
    _quoted(readme, f"the same tiny-moe rows end at the same final loss ({loss['moe_fsdp2']},")
