"""The published verl runs of tests/data/rl (runs.json and runs_second_round.json) against the kit: every excerpt
parses with mlite's log reader, every run's settings read into the kit's options the way the kit reads them (config
dump or launcher), the provenance is there, and the README table is what the code computes. Oracles: the raw text of
each excerpt, read here with plain regular expressions, never with the kit."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from conftest import REPO

from mlite.errors import MliteError
from mlite.memory.estimate import GIB
from mlite.validation.rl_runs import (
    ASSEMBLED,
    REQUIRED,
    RUNS_FILES,
    comparison_rows,
    comparison_table,
    deep_merge,
    inner_script,
    launcher_text,
    load_runs,
    logged_memory,
    predict_run,
    unflatten,
)

RUNS = REPO / "tests" / "data" / "rl"
ALL = load_runs(RUNS)
SECOND = [r for r in ALL if r["_file"] == RUNS_FILES[1]]
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _raw(run) -> str:
    """The excerpt's text without ANSI colours and without an assembled excerpt's own ``# =====`` marker lines (they
    quote the search queries, not the run)."""
    text = _ANSI.sub("", (RUNS / run["log"]).read_text())
    return "\n".join(ln for ln in text.splitlines() if not ln.startswith("# ====="))


def _last_override(text: str, key: str):
    """The last ``key=value`` of a launch command, as the shell would split it (oracle for the importer)."""
    hits = re.findall(rf"(?:^|\s){re.escape(key)}=(\S+)", text)
    return hits[-1].strip("'\"") if hits else None


@pytest.mark.parametrize("run", ALL, ids=[r["id"] for r in ALL])
def test_excerpt_parses_and_the_logged_figure_is_the_texts(run):
    got = logged_memory(RUNS / run["log"])
    raw = _raw(run)
    lines = raw.splitlines()
    line = next(ln for ln in lines if re.search(rf"step:{got['step']} - ", ln) and "memory_allocated" in ln)
    text = re.search(r"perf/max_memory_allocated_gb:(?:np\.float64\()?([0-9.]+)", line).group(1)
    assert got["max_memory_allocated_gb"] == pytest.approx(float(text), abs=0)
    reserved = re.search(r"perf/max_memory_reserved_gb:(?:np\.float64\()?([0-9.]+)", line)
    assert got["max_memory_reserved_gb"] == (float(reserved.group(1)) if reserved else None)
    # the earliest step line of the excerpt that carries the figure is the one read
    steps = [int(m) for m in re.findall(r"step:(\d+) - [^\n]*max_memory_allocated_gb", "\n".join(lines))]
    assert got["step"] == min(steps)


@pytest.mark.parametrize("run", ALL, ids=[r["id"] for r in ALL])
def test_settings_read_into_the_kit_options_agree_with_the_excerpt(run):
    est, o, r, _spec, plan, cfg = predict_run(run, RUNS)
    raw = _raw(run)
    if run.get("excerpt_kind") == ASSEMBLED:
        _check_assembled(run, r, o, plan, est)
        return
    if "launcher" in run:
        cmd = launcher_text(run, RUNS)
        text = (RUNS / run["log"]).read_text()
        for placeholder, value in run["launcher"].get("placeholders", {}).items():
            assert placeholder in text and run["launcher"]["placeholders_why"]
            text = text.replace(placeholder, value)
        assert cmd in text
        want = {
            "gpu_memory_utilization": _last_override(cmd, "actor_rollout_ref.rollout.gpu_memory_utilization"),
            "n": _last_override(cmd, "actor_rollout_ref.rollout.n"),
            "tensor_model_parallel_size": _last_override(cmd, "actor_rollout_ref.rollout.tensor_model_parallel_size"),
            "prompt_length": _last_override(cmd, "data.max_prompt_length"),
            "response_length": _last_override(cmd, "data.max_response_length"),
            "train_batch_size": _last_override(cmd, "data.train_batch_size"),
        }
        assert None not in [want[k] for k in ("gpu_memory_utilization", "prompt_length", "response_length")]
        for field, value in want.items():
            if value is None:  # left to verl's defaults (the entry's config_defaults)
                continue
            assert getattr(r, field) == type(getattr(r, field))(float(value) if "." in value else int(value)), field
        ngpu = int(_last_override(cmd, "trainer.nnodes")) * int(_last_override(cmd, "trainer.n_gpus_per_node"))
        tp = _last_override(cmd, "actor_rollout_ref.actor.megatron.tensor_model_parallel_size")
        assert plan.parallel.tp == (int(tp) if tp else 1)
        offload = _last_override(cmd, "actor_rollout_ref.actor.megatron.param_offload") or _last_override(
            cmd, "actor_rollout_ref.actor.fsdp_config.param_offload"
        )
        assert o.param_offload == (offload == "True")
        kl = _last_override(cmd, "actor_rollout_ref.actor.use_kl_loss")
        assert r.ref == ("colocated" if kl == "True" else "none")
    else:
        rc = cfg["actor_rollout_ref"]["rollout"]
        assert (r.gpu_memory_utilization, r.n, r.tensor_model_parallel_size) == (
            rc["gpu_memory_utilization"],
            rc["n"],
            rc["tensor_model_parallel_size"],
        )
        assert (r.prompt_length, r.response_length) == (
            cfg["data"]["max_prompt_length"],
            cfg["data"]["max_response_length"],
        )
        ngpu = cfg["trainer"]["nnodes"] * cfg["trainer"]["n_gpus_per_node"]
        assert f"'gpu_memory_utilization': {rc['gpu_memory_utilization']}," in raw
    assert plan.ngpu == ngpu
    assert o.gpu_memory_gib == run["gpu_memory_gib"]
    assert est.phases and est.engine.weights > 0


def test_megatron_runs_are_read_as_megatron_with_their_mesh_and_recompute():
    megatron = [r for r in SECOND if "megatron" in r["log"]]
    assert len(megatron) >= 2
    for run in megatron:
        _est, o, _r, _spec, plan, cfg = predict_run(run, RUNS)
        cmd = launcher_text(run, RUNS)
        assert cfg["actor_rollout_ref"]["actor"]["strategy"] == "megatron"
        assert o.optimizer == "dist_opt" and plan.parallel.tp == 4
        gc = _last_override(cmd, "actor_rollout_ref.model.enable_gradient_checkpointing")
        assert o.recompute == ("full" if gc == "True" else "none")


PROVENANCE = ("id", "log", "model", "source", "cut", "gpu_memory_gib", "gpu_memory_source", "verl_version",
              "verl_version_source", "engine_placement", "vllm_version_source", "not_modelled")  # fmt: skip


@pytest.mark.parametrize("run", ALL, ids=[r["id"] for r in ALL])
def test_every_row_carries_its_provenance_and_is_estimated_as_it_ran(run):
    """Every row (both files): where it comes from and the evidence for the release, placement and vLLM version;
    the estimate runs under them, an FSDP actor as verl's FSDP worker with the settings its text names."""
    missing = [k for k in PROVENANCE if not run.get(k)]
    assert not missing, (run["id"], missing)
    est, _o, r, _spec, _plan, _cfg = predict_run(run, RUNS)
    assert r.verl_version == run["verl_version"] and r.engine_placement == run["engine_placement"]
    assert r.vllm_version == run.get("vllm_version", "latest")
    raw = _raw(run) if "launcher" not in run else launcher_text(run, RUNS)
    if "megatron" in raw:
        assert not est.fsdp.is_fsdp
        return
    assert est.fsdp.is_fsdp
    for key, field in (("use_remove_padding", "use_remove_padding"), ("use_dynamic_bsz", "use_dynamic_bsz")):
        said = re.findall(rf"{key}['\"]?[:=] ?(True|False)", raw)
        if said:  # the config dump's or the launcher's own (first: the actor's) value; else verl's default
            assert getattr(est.fsdp, field) == (said[0] == "True"), (run["id"], key)


def test_second_round_entries_carry_their_provenance():
    assert SECOND, "tests/data/rl/runs_second_round.json has no runs"
    first_round_ids = {r["id"] for r in ALL if r["_file"] == RUNS_FILES[0]}
    for run in SECOND:
        missing = [k for k in REQUIRED if k not in run]
        assert not missing, (run["id"], missing)
        assert run["id"] not in first_round_ids
        src = run["source"]
        if run.get("excerpt_kind") == ASSEMBLED:  # a thread read as search fragments: its URL, and the excerpt says so
            assert re.match(r"https://github\.com/[^/]+/[^/]+/issues/\d+ ", src)
            assert (RUNS / run["log"]).read_text().startswith("# ASSEMBLED FROM FRAGMENTS") and "fragment" in run["cut"]
        else:
            assert re.search(r"github\.com/[^/]+/[^/]+/blob/[0-9a-f]{40}/", src) or re.search(r"index file id \d+", src)
        assert isinstance(run["comparable"], bool) and run["comparable_why"]
        assert run["engine_accounting"] in ("outside", "torch_frees", "cumem")
        model = json.loads((RUNS / run["model"]).read_text())
        assert {"hidden_size", "num_hidden_layers", "vocab_size"} <= set(model) and run.get("model_source")
        if "launcher" in run:
            first, last = run["launcher"]["lines"]
            assert 1 <= first <= last <= len((RUNS / run["log"]).read_text().splitlines())


def test_the_runs_cover_what_the_issue_asks():
    """At least eight public runs (distinct logs), Megatron and FSDP, PPO and GRPO, old and new verl."""
    rows = comparison_rows(RUNS)
    logs = {r["log"] for r in ALL}
    assert len(logs) >= 8
    strategies = {row["strategy"] for row in rows}
    assert "megatron" in strategies and strategies & {"fsdp", "fsdp2"}
    assert {"PPO", "GRPO"} <= {row["algorithm"] for row in rows}
    assert {"vllm", "sglang"} <= {row["engine"].split()[0] for row in rows}
    accountings = {r["engine_accounting"] for r in ALL}
    assert {"torch_frees", "cumem", "outside"} <= accountings  # old in-process engines and the new separate one


def test_comparable_runs_are_within_15_percent_or_say_why_not():
    rows = comparison_rows(RUNS)
    for row in rows:
        if row["comparable"] and abs(row["ratio"] - 1) > 0.15:
            assert row["miss"], f"{row['run']}: off by {row['ratio'] - 1:+.0%} and no miss_why"
    # six since Megatron's forward-only passes hold one layer's input under torch.no_grad (the C550 baseline: +20 % to
    # +4 %); five since the state each step holds is read from the code (mlite/memory/rl_lazy.py); three before
    assert sum(1 for row in rows if row["comparable"] and abs(row["ratio"] - 1) <= 0.15) >= 7


def test_readme_table_is_what_the_code_computes():
    table = comparison_table(comparison_rows(RUNS))
    readme = (REPO / "README.md").read_text()
    assert table in readme, "README 'RL memory against public runs' table is stale: paste rl_runs --table"


def test_cli_prints_the_table_and_refuses_a_bad_root_in_one_line(tmp_path):
    env_py = [sys.executable, "-m", "mlite.validation.rl_runs"]
    ok = subprocess.run([*env_py, "--table"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.strip() == comparison_table(comparison_rows(RUNS))
    bad = subprocess.run([*env_py, "--root", str(tmp_path)], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and not bad.stdout and len(bad.stderr.strip().splitlines()) == 1
    assert "runs.json" in bad.stderr


def test_launcher_helpers():
    assert inner_script("sudo docker exec c bash -lc '\ncd /w && python3 -m x a=1'\n") == "\ncd /w && python3 -m x a=1"
    assert inner_script("python3 -m x a=1\n") == "python3 -m x a=1\n"
    assert unflatten({"a.b.c": 1, "+a.d": 2, "e": 3}) == {"a": {"b": {"c": 1}, "d": 2}, "e": 3}
    assert deep_merge({"a": {"b": 1, "c": 2}, "x": 0}, {"a": {"c": 3}}) == {"a": {"b": 1, "c": 3}, "x": 0}


def test_readme_prose_quotes_todays_figures():
    """The counts and misses the prose under the table quotes are today's."""
    rows = comparison_rows(RUNS)
    flat = " ".join((REPO / "README.md").read_text().split())
    comparable = [r for r in rows if r["comparable"]]
    within = [r for r in comparable if abs(r["ratio"] - 1) <= 0.15]
    words = {3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight", 9: "nine", 10: "ten", 11: "eleven"}
    assert f"Of the {words[len(comparable)]} comparable runs {words[len(within)]} land within 15 %" in flat
    for r in comparable:
        if r not in within:
            assert f"({round((r['ratio'] - 1) * 100):+d} %)" in flat, r["run"]
    assert (
        f"{words[len({r['log'] for r in ALL})].capitalize()} public verl runs ({words.get(len(rows), len(rows))}"
        in flat
    )


# ------------------------------------------------------------------------------------------ assembled from fragments
_BLOCK = re.compile(
    r"^# ===== fragment (\d+) BEGIN \(search corpus=(\w+), rank (\d+), query=\"([^\"]+)\"; ([^\n]+)\) =====\n", re.M
)


def _fragment_texts(run) -> dict[int, str]:
    """Oracle for the kit's ``fragments``: each block's text between its BEGIN line and its END line, by string
    search."""
    text = (RUNS / run["log"]).read_text()
    out = {}
    for m in _BLOCK.finditer(text):
        n = int(m[1])
        end = text.index(f"\n# ===== fragment {n} END =====", m.end())
        out[n] = text[m.end() : end]
    return out


def _check_assembled(run, r, o, plan, est):
    """Every found / derived setting stands on the exact text of the fragment it names, and the estimate reads it;
    every other setting is verl's default of the release with its source line."""
    frags = _fragment_texts(run)
    spec = run["assembled"]
    for group in ("found", "derived"):
        for key, item in spec[group].items():
            assert item["text"] in frags[item["fragment"]], (key, item["fragment"])
            assert key not in spec["not_found"]
    found = {k: v["value"] for k, v in spec["found"].items()}
    assert (r.name, r.prompt_length, r.response_length, r.train_batch_size) == (
        found["actor_rollout_ref.rollout.name"],
        found["data.max_prompt_length"],
        found["data.max_response_length"],
        found["data.train_batch_size"],
    )
    assert est.fsdp.ppo_micro_batch_size_per_gpu == found["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"]
    assert o.param_offload == found["actor_rollout_ref.actor.fsdp_config.param_offload"]
    assert r.ref == "colocated"  # use_kl_loss, derived from the step line's actor/kl_loss
    for key, item in spec["not_found"].items():
        assert re.search(r"@ v0\.3\.0\.post1 \(070ed6ac\) line \d+$", item["default_source"]), key
    nf = spec["not_found"]
    assert plan.ngpu == nf["trainer.nnodes"]["default"] * nf["trainer.n_gpus_per_node"]["default"]
    assert est.fsdp.use_remove_padding is nf["actor_rollout_ref.model.use_remove_padding"]["default"]


ASSEMBLED_RUNS = [r for r in ALL if r.get("excerpt_kind") == ASSEMBLED]


def test_an_assembled_excerpt_is_its_search_fragments_verbatim():
    """Each fragment block names the corpus, rank and query it came from; the kit's reader sees the same blocks;
    the step line the metric comes from is inside one; a fragment's text whose setting is not there is refused."""
    from mlite.validation.rl_runs import assembled_config, fragments

    assert ASSEMBLED_RUNS
    for run in ASSEMBLED_RUNS:
        text = (RUNS / run["log"]).read_text()
        heads = _BLOCK.findall(text)
        assert [int(h[0]) for h in heads] == list(range(1, len(heads) + 1)) and all(h[1] == "issues" for h in heads)
        assert fragments(text) == _fragment_texts(run)
        got = logged_memory(RUNS / run["log"])
        assert any(
            f"step:{got['step']} - " in body and "max_memory_allocated_gb" in body for body in fragments(text).values()
        )
        bad = json.loads(json.dumps(run))
        key = next(iter(bad["assembled"]["found"]))
        bad["assembled"]["found"][key]["text"] = "not in any fragment"
        with pytest.raises(MliteError, match=key):
            assembled_config(bad, RUNS)


def test_sglang_run_allocated_does_not_depend_on_the_card_it_does_not_name():
    """The GH200's memory is not in the fragments: with SGLang in its own processes the predicted allocated figure
    is the actor process's own, the same for a 96 GB and a 144 GB part; the GPU count (not found either) moves it
    by the FSDP state's share only."""
    from mlite.memory.rl_metrics import ALLOCATED, predicted_metrics

    for run in ASSEMBLED_RUNS:
        figs = {predicted_metrics(predict_run({**run, "gpu_memory_gib": g}, RUNS)[0])[ALLOCATED] for g in (89.0, 140.0)}
        assert len(figs) == 1
        four = json.loads(json.dumps(run))
        four["assembled"]["not_found"]["trainer.n_gpus_per_node"]["default"] = 4
        e8, e4 = predict_run(run, RUNS)[0], predict_run(four, RUNS)[0]
        diff = predicted_metrics(e4)[ALLOCATED] - predicted_metrics(e8)[ALLOCATED]
        assert 0 < diff < 2 * GIB
