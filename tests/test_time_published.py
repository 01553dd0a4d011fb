"""The published multi-GPU runs (tests/data/step_times/published.json) the time model is checked against: every
record loads, names a model the catalog reads, resolves to a valid mesh under the rule ``mlite mesh`` applies, and
keeps its own arithmetic; a malformed record is one MliteError naming the run and the field."""

from __future__ import annotations

import copy
import json
import math
import re
from dataclasses import replace

import pytest

from mlite.errors import MliteError
from mlite.mesh import PipelineSplit
from mlite.models import from_hf_config
from mlite.time.knobs import KNOB_NAMES, Knobs
from mlite.time.published import DEFAULT_PATH, MEASURED_KEYS, PUBLISHED_DIR, load_published

RUNS = load_published()
SPECS = {r.id: r.spec() for r in RUNS}
NVIDIA_FRAMEWORKS = ("megatron-bridge", "nemo-automodel", "nemo")


def test_enough_runs_of_enough_kinds():
    assert len(RUNS) >= 14
    assert len({s.name for s in SPECS.values()}) >= 8
    assert sum(SPECS[r.id].is_moe for r in RUNS) >= 4
    assert sum(r.framework in NVIDIA_FRAMEWORKS and "NVIDIA-NeMo/" in r.source for r in RUNS) >= 6
    assert {r.hardware for r in RUNS} >= {"A100", "H100", "H200"}


@pytest.mark.parametrize("run", RUNS, ids=[r.id for r in RUNS])
def test_every_run_resolves_to_a_valid_mesh(run):
    plan = run.plan(SPECS[run.id])
    assert plan.valid, [f.message for f in plan.errors]
    assert plan.dp == run.dp and plan.dp * run.tp * run.cp * run.pp == run.ngpu
    assert len(plan.stages) == run.pp * run.vpp
    t = run.training()
    assert (t.seq_len, t.micro_batch_size, t.num_microbatches) == (
        run.seq_len,
        run.micro_batch_size,
        run.num_microbatches,
    )
    assert t.optimizer == run.optimizer and t.use_distributed_optimizer
    assert run.global_batch_size == run.num_microbatches * run.micro_batch_size * plan.dp


UNEVEN = [r for r in RUNS if r.pp_layout or r.split]


def test_uneven_meshes_hold_only_with_the_recipe_split():
    """The records that carry a layout or split keys need them: an even split of their layers is refused."""
    assert {r.id for r in UNEVEN} >= {
        "bridge-llama31-405b-h100-fp8-1024",
        "bridge-qwen3-235b-a22b-h100-fp8-256",
        "bridge-deepseek-v3-h100-1024",
    }
    for run in UNEVEN:
        bare = replace(run, pp_layout=None, split=PipelineSplit())
        plan = bare.plan(SPECS[run.id])
        assert not plan.valid, run.id
        assert any(f.field in ("pp", "vpp", "pp_layout") for f in plan.errors), [f.message for f in plan.errors]


def _numbers(text: str) -> list[float]:
    return [float(x) for x in re.findall(r"\d+(?:\.\d+)?", text.replace(",", ""))]


@pytest.mark.parametrize("run", RUNS, ids=[r.id for r in RUNS])
def test_measured_values_are_in_the_quote(run):
    """Every measured number appears in the quoted row or line (step times may be quoted in ms)."""
    assert run.measured and set(run.measured) <= set(MEASURED_KEYS)
    nums = _numbers(run.quote)
    for key, v in run.measured.items():
        scales = (1.0, 1000.0) if key == "step_s" else (1.0,)
        assert any(math.isclose(n, v * s, rel_tol=1e-9) for n in nums for s in scales), (key, v, run.quote)


def test_tokens_and_step_time_agree_where_both_are_published():
    both = [r for r in RUNS if {"step_s", "tokens_per_s_per_gpu"} <= set(r.measured)]
    assert len(both) >= 4
    for r in both:
        derived = r.tokens_per_step / (r.measured["step_s"] * r.ngpu)
        assert derived == pytest.approx(r.measured["tokens_per_s_per_gpu"], rel=0.02), r.id


def test_model_files_load_and_are_documented():
    readme = (PUBLISHED_DIR / "README.md").read_text()
    files = sorted((PUBLISHED_DIR / "models").glob("*.json"))
    assert files
    used = {r.model for r in RUNS}
    for f in files:
        assert from_hf_config(str(f)).name == f.stem
        assert f"models/{f.name}" in used, f"{f.name} is not used by any run"
        assert f.name in readme, f"README.md does not give the provenance of {f.name}"
    for r in RUNS:
        assert f"`{r.id}`" in readme, f"README.md has no row for {r.id}"


def _write(tmp_path, runs):
    p = tmp_path / "published.json"
    p.write_text(json.dumps({"runs": runs}))
    return p


RAW = json.loads(DEFAULT_PATH.read_text())["runs"]
BASE = next(r for r in RAW if r["id"] == "bridge-qwen3-235b-a22b-h100-fp8-256")


def _bad(**change):
    rec = copy.deepcopy(BASE)
    for k, v in change.items():
        if v is KeyError:
            del rec[k]
        else:
            rec[k] = v
    return rec


@pytest.mark.parametrize(
    ("record", "field"),
    [
        (_bad(seq_len=KeyError), "'seq_len'"),
        (_bad(tp=0), "'tp'"),
        (_bad(ep=2.5), "'ep'"),
        (_bad(etp="1"), "'etp'"),
        (_bad(ngpu=250), "'ngpu'"),
        (_bad(num_microbatches=511), "'num_microbatches'"),
        (_bad(global_batch_size=8000), "'num_microbatches'"),
        (_bad(hardware="H800"), "'hardware'"),
        (_bad(recompute="some"), "'recompute'"),
        (_bad(optimizer="zero3"), "'optimizer'"),
        (_bad(sequence_parallel="yes"), "'sequence_parallel'"),
        (_bad(measured={}), "'measured'"),
        (_bad(measured={"mfu": 0.3}), "'measured'"),
        (_bad(measured={"step_s": -1}), "'measured.step_s'"),
        (_bad(assumed="none"), "'assumed'"),
        (_bad(quote=""), "'quote'"),
        (_bad(tpp=2), "'tpp'"),
        (_bad(num_layers_in_first_pipeline_stage=0), "'num_layers_in_first_pipeline_stage'"),
        (_bad(account_for_loss_in_pipeline_split="true"), "'account_for_loss_in_pipeline_split'"),
        (_bad(knobs=KeyError), "'knobs'"),
        (_bad(knobs=[]), "'knobs'"),
        (_bad(knobs={**BASE["knobs"], "tp_comm_overlap": 1.5}), "tp_comm_overlap"),
        (_bad(knobs={**BASE["knobs"], "gemm_dtype": "bf16"}), "'gemm_dtype'"),
        (
            _bad(knobs_sources={k: v for k, v in BASE["knobs_sources"].items() if k != "ep_comm_overlap"}),
            "'ep_comm_overlap'",
        ),
        (_bad(knobs_sources={**BASE["knobs_sources"], "dispatch_dtype": "somewhere"}), "'dispatch_dtype'"),
        (_bad(knobs_sources={**BASE["knobs_sources"], "gemm_dtype": " "}), "'knobs_sources'"),
        (_bad(recompute_modules=["moe"]), "'recompute_modules'"),
        (_bad(recompute="selective", recompute_modules=["experts"]), "'recompute_modules'"),
        (_bad(recompute="selective", recompute_modules="moe"), "'recompute_modules'"),
    ],
    ids=lambda x: x if isinstance(x, str) else None,
)
def test_a_malformed_record_is_one_error_naming_the_run_and_field(tmp_path, record, field):
    p = _write(tmp_path, [RAW[0], record])
    with pytest.raises(MliteError) as e:
        load_published(p)
    msg = str(e.value)
    assert "\n" not in msg
    assert "'bridge-qwen3-235b-a22b-h100-fp8-256'" in msg and "run #1" in msg and field in msg


def test_a_bad_split_is_refused_by_the_mesh_rule(tmp_path):
    """Split keys that load but do not hold for the model make the plan invalid (Megatron-Core's rule)."""
    rec = _bad(account_for_loss_in_pipeline_split=False)
    (run,) = load_published(_write(tmp_path, [rec]))
    assert not run.plan(SPECS[run.id]).valid


def test_file_level_errors(tmp_path):
    dup = _write(tmp_path, [RAW[0], RAW[0]])
    with pytest.raises(MliteError, match="used twice"):
        load_published(dup)
    p = tmp_path / "x.json"
    p.write_text('{"rows": []}')
    with pytest.raises(MliteError, match="single key 'runs'"):
        load_published(p)
    p.write_text("{")
    with pytest.raises(MliteError, match="not JSON"):
        load_published(p)
    with pytest.raises(MliteError, match="cannot read"):
        load_published(tmp_path / "missing.json")


@pytest.mark.parametrize("run", RUNS, ids=[r.id for r in RUNS])
def test_every_record_gives_its_knobs_each_with_a_source(run):
    """Each knob the recipe sets has the recipe line (``repo path @ commit: line`` or the log / PR it comes from);
    every other knob is named in ``assumed`` with the default it keeps."""
    k = run.time_knobs()
    assert isinstance(k, Knobs)
    assert set(run.knobs) == set(run.knobs_sources) and set(run.knobs) <= set(KNOB_NAMES)
    for name, src in run.knobs_sources.items():
        assert " @ " in src or src.startswith(("https://", "/work/shared/reference/")), (name, src)
        assert ": " in src, (name, src)
    for name in KNOB_NAMES:
        if name in run.knobs:
            assert getattr(k, name) == run.knobs[name], name
        else:
            assert getattr(k, name) == getattr(Knobs(), name), name
            assert any(a.startswith("knob") and name in a for a in run.assumed), f"{name} neither set nor assumed"
    assert k.gemm_dtype == run.precision


def test_hidden_shares_are_marked_assumed():
    """A TP / EP overlap share strictly between 0 and 1 is an assumption (the recipes only switch overlap on)."""
    shares = [(r, n) for r in RUNS for n in ("tp_comm_overlap", "ep_comm_overlap") if 0 < r.knobs.get(n, 0) < 1]
    assert shares
    for run, name in shares:
        assert "share assumed" in run.knobs_sources[name], (run.id, name)


def test_the_records_exercise_every_knob():
    """Each knob (except fp8 dispatch, which none of these recipes turns on) takes a non-default value in some run."""
    default = Knobs()
    moved = {n for r in RUNS for n in KNOB_NAMES if getattr(r.time_knobs(), n) != getattr(default, n)}
    assert moved == set(KNOB_NAMES) - {"dispatch_dtype"}


def test_an_unknown_knob_is_refused_naming_run_and_knob(tmp_path):
    rec = _bad(
        knobs={**BASE["knobs"], "overlap_tp": True}, knobs_sources={**BASE["knobs_sources"], "overlap_tp": "x @ y: z"}
    )
    with pytest.raises(MliteError) as e:
        load_published(_write(tmp_path, [RAW[0], rec]))
    msg = str(e.value)
    assert "\n" not in msg
    assert "'bridge-qwen3-235b-a22b-h100-fp8-256'" in msg and "unknown knob 'overlap_tp'" in msg
    assert all(n in msg for n in KNOB_NAMES)


def test_a_recipes_moe_recompute_reruns_the_moe_layers_all_to_alls():
    from mlite.time import predict

    run = next(r for r in load_published() if r.id == "bridge-nemotron3-nano-h100-fp8-16")
    assert run.recompute_modules == ("moe", "layernorm", "core_attn", "moe_act")
    o = run.training()
    assert o.recompute == "selective" and o.recompute_modules == run.recompute_modules
    spec, plan, k = run.spec(), run.plan(), run.time_knobs()
    with_moe = predict(spec, plan, o, run.hardware, k)
    without = predict(spec, plan, replace(o, recompute_modules=()), run.hardware, k)
    # forward, backward and the recomputed forward of every MoE layer each dispatch and combine once
    assert with_moe.comm_total["ep_comm"] == pytest.approx(1.5 * without.comm_total["ep_comm"])
    assert with_moe.parts["recompute"] > without.parts["recompute"]
    assert all(not r.recompute_modules for r in load_published() if r.id != run.id)
