"""Every published verl run of ``tests/data/rl`` (``runs.json``, the first round, and ``runs_second_round.json``)
estimated with the kit and put next to its logged ``perf/max_memory_allocated_gb``: the table "run | strategy | verl
| engine | logged | predicted | ratio | ... | comparable? why" (:func:`comparison_rows`, :func:`comparison_table`;
``python3 -m mlite.validation.rl_runs --table`` prints it).

The settings are read the way the kit reads them elsewhere: a run whose excerpt holds verl's start-up config dump is
read back (:func:`~.rl_check.verl_config_from_log`); a run
whose excerpt holds its launch command (``"launcher"`` in the entry) is read by ``mlite import-launcher``'s reader
(:func:`mlite.export.importer.import_launcher`), its Hydra overrides laid over the verl defaults the entry names
(``"config_defaults"``: another run's dump of the same verl era, or keys with their source), then the same
``training_from_verl`` for an FSDP actor, or the importer's Megatron mesh and options for a Megatron actor.

What is compared: :func:`mlite.memory.rl_metrics.predicted_metrics` (:func:`predicted`) under the entry's verl
release and engine placement, for every memory metric the log carries (allocated; reserved and the node's used host
RAM where logged). An FSDP actor is estimated as verl's FSDP worker (:mod:`mlite.memory.rl_fsdp`, options from the
config by :func:`fsdp_of`); the vLLM KV budget follows the entry's ``vllm_version`` (:mod:`mlite.memory.rl_vllm`),
each with its evidence in the entry (``vllm_version_source``).

The logged metric: ``perf/max_memory_allocated_gb`` (verl <= 0.7, ``update_actor`` in
``verl/workers/fsdp_workers.py`` / ``megatron_workers.py``) or, from the engine workers on
(``TrainingWorker._postprocess_output`` in ``verl/workers/engine_workers.py``), the same figure under
``actor/perf/max_memory_allocated_gb`` (as the verl 0.9 run here and the console line in verl-project/verl#7412 show);
the first step line that carries one (:func:`logged_memory`, read with ``mlite.logs``); the prediction is for that
step line (the "step" column: :mod:`mlite.memory.rl_lazy`, a step-1 line before any optimizer moment exists).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from ..errors import MliteError
from ..memory.estimate import GIB

RUNS_FILES = ("runs.json", "runs_second_round.json")
"""The run lists under ``tests/data/rl``, first round first."""

MEMORY_KEYS = {
    "max_memory_allocated_gb": ("perf/max_memory_allocated_gb", "actor/perf/max_memory_allocated_gb"),
    "max_memory_reserved_gb": ("perf/max_memory_reserved_gb", "actor/perf/max_memory_reserved_gb"),
    "cpu_memory_used_gb": ("perf/cpu_memory_used_gb", "actor/perf/cpu_memory_used_gb"),
}
"""Logged memory metric -> the keys verl has written it under (the engine workers' logs carry the actor's as
``actor/perf/...``)."""

FIRST_ROUND = {
    "grpo_qwen3vl_2b_8gpu_h200": (False, "the Qwen3-VL run read as an H200 (its card is not stated; H20 above)"),
}
"""What the comparison may say of a first-round entry (runs.json has no such fields): comparable unless named here."""

REQUIRED = ("id", "log", "model", "source", "cut", "gpu_memory_gib", "gpu_memory_source", "verl_era",
            "not_modelled", "engine_accounting", "comparable", "comparable_why")  # fmt: skip
"""Fields every second-round entry carries (provenance and what the comparison may say)."""


def load_runs(root) -> list[dict]:
    """Every entry of the run lists in ``root`` (``tests/data/rl``), first round first; each gets ``"_file"``."""
    root = Path(root)
    out = []
    for name in RUNS_FILES:
        path = root / name
        if path.exists():
            out += [{**r, "_file": name} for r in json.loads(path.read_text())["runs"]]
    if not out:
        raise MliteError(f"--root {root}: no {' or '.join(RUNS_FILES)} there; point it at tests/data/rl")
    return out


def logged_memory(path) -> dict:
    """``{"step", "max_memory_allocated_gb", "max_memory_reserved_gb", "cpu_memory_used_gb"}`` of the first step line
    of the log that carries an allocated figure (either key of :data:`MEMORY_KEYS`); a metric the log does not carry
    is None. Read with mlite's own log reader."""
    import math

    from ..logs import read_log

    wide = read_log(str(path)).wide
    cols = [k for k in MEMORY_KEYS["max_memory_allocated_gb"] if k in wide.columns]
    if not cols:
        raise MliteError(f"{path}: no step line carries perf/max_memory_allocated_gb")
    for step, row in wide.iterrows():
        if any(not math.isnan(float(row[c])) for c in cols):
            out: dict = {"step": int(step)}
            for name, keys in MEMORY_KEYS.items():
                vals = [float(row[k]) for k in keys if k in wide.columns and not math.isnan(float(row[k]))]
                out[name] = vals[0] if vals else None
            return out
    raise MliteError(f"{path}: no step line carries perf/max_memory_allocated_gb")


# ------------------------------------------------------------------------------------------ settings from launchers
def inner_script(text: str) -> str:
    """The script of ``... bash -lc '<script>'`` (a launch wrapped in ``docker exec``), else ``text`` unchanged."""
    tag = "bash -lc '"
    if tag not in text:
        return text
    start = text.index(tag) + len(tag)
    end = text.index("'", start)
    return text[start:end]


def launcher_text(run: dict, root) -> str:
    """The launch command of a ``"launcher"`` entry: lines ``[first, last]`` (1-based) of its excerpt, unwrapped
    from ``bash -lc '...'`` when the entry says ``"inner_bash_c": true``, with the entry's ``"placeholders"``
    (``{"<snap>": "snap"}``: a placeholder the source's author wrote for a value they elided, which a shell would
    read as a redirection) replaced as the entry says."""
    first, last = run["launcher"]["lines"]
    lines = (Path(root) / run["log"]).read_text().splitlines(keepends=True)[first - 1 : last]
    text = "".join(lines)
    text = inner_script(text) if run["launcher"].get("inner_bash_c") else text
    for placeholder, value in run["launcher"].get("placeholders", {}).items():
        if placeholder not in text:
            raise MliteError(f"{run['id']}: placeholder {placeholder!r} is not in its launcher; drop it from the entry")
        text = text.replace(placeholder, value)
    return text


def unflatten(flat: dict) -> dict:
    """``{"a.b.c": v}`` -> ``{"a": {"b": {"c": v}}}`` (a leading ``+`` / ``++`` of a Hydra override dropped)."""
    out: dict = {}
    for key, value in flat.items():
        parts = key.lstrip("+").split(".")
        node = out
        for p in parts[:-1]:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise MliteError(f"override {key}: {p} is both a value and a group")
        node[parts[-1]] = value
    return out


def deep_merge(base: dict, over: dict) -> dict:
    """``base`` with ``over`` laid on it, nested dicts merged (``over`` wins)."""
    out = dict(base)
    for k, v in over.items():
        out[k] = deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def config_defaults(run: dict, root) -> dict:
    """The verl config a launcher's overrides are laid on: the dump of ``config_defaults["dump_of"]`` (a log of the
    same verl era) and/or the nested ``config_defaults["keys"]``."""
    from .rl_check import verl_config_from_log

    spec = run.get("config_defaults") or {}
    base = verl_config_from_log(Path(root) / spec["dump_of"]) if spec.get("dump_of") else {}
    return deep_merge(base, spec.get("keys", {}))


def verl_config_from_launcher(run: dict, root):
    """``(nested verl config, ImportedLauncher)`` of a ``"launcher"`` entry: the importer's overrides (values
    expanded, later ones winning as in Hydra) over :func:`config_defaults`."""
    from ..export.importer import import_launcher

    imp = import_launcher(f"{run['log']}:{run['launcher']['lines']}", text=launcher_text(run, root))
    flat = {o.key.lstrip("+"): o.value for o in imp.overrides}
    return deep_merge(config_defaults(run, root), unflatten(flat)), imp


def megatron_training(imp, cfg: dict, gpu_memory_gib: float):
    """TrainingOptions of a verl Megatron actor: what the importer reads from the launcher (distributed optimizer,
    offloads, sequence parallel, P + R, the micro-batch), plus ``enable_gradient_checkpointing`` as full recompute
    (verl's Megatron worker turns it into ``recompute_granularity="full"``, ``recompute_method="uniform"``,
    ``recompute_num_layers=1`` in the override transformer config: ``_build_model_optimizer`` in
    ``verl/workers/megatron_workers.py``; the importer does not read that key)."""
    from ..options import TrainingOptions

    opts = dict(imp.options)
    if cfg.get("actor_rollout_ref", {}).get("model", {}).get("enable_gradient_checkpointing"):
        opts["recompute"] = "full"
    return TrainingOptions(**opts, gpu_memory_gib=gpu_memory_gib, gpus_per_node=imp.gpus_per_node)


def strategy_of(cfg: dict) -> str:
    """The actor's ``strategy`` (``fsdp``, ``fsdp2``, ``megatron``); verl's default is ``fsdp``."""
    return str(cfg.get("actor_rollout_ref", {}).get("actor", {}).get("strategy", "fsdp"))


ASSEMBLED = "assembled_from_fragments"
"""``excerpt_kind`` of an entry whose excerpt is put together from search-corpus fragments of a thread (no whole
config dump, no whole launcher): its settings are the entry's ``"assembled"`` keys, read by
:func:`assembled_config`."""

_FRAGMENT = re.compile(r"^# ===== fragment (\d+) BEGIN [^\n]*\n(.*?)\n# ===== fragment \1 END =====$", re.M | re.S)


def fragments(text: str) -> dict[int, str]:
    """Fragment number -> its verbatim text, from an assembled excerpt (``# ===== fragment N BEGIN ... =====`` to
    ``# ===== fragment N END =====``)."""
    return {int(m[1]): m[2] for m in _FRAGMENT.finditer(text)}


def assembled_config(run: dict, root) -> dict:
    """The nested verl config of an assembled entry: every ``"found"`` and ``"derived"`` key (each names the fragment
    and the exact text it stands on, checked here against the excerpt) over the ``"not_found"`` keys (verl's default
    of the release, each with its source file and line at the tag's commit). A key whose text is not in its
    fragment, or one both found and defaulted, raises :class:`MliteError`."""
    spec = run["assembled"]
    frags = fragments((Path(root) / run["log"]).read_text())
    flat: dict = {}
    for group in ("found", "derived"):
        for key, item in spec.get(group, {}).items():
            body = frags.get(int(item["fragment"]))
            if body is None or item["text"] not in body:
                raise MliteError(
                    f"{run['id']}: {group} key {key}: its text is not in fragment {item['fragment']} of {run['log']}"
                )
            flat[key] = item["value"]
    defaults = {}
    for key, item in spec.get("not_found", {}).items():
        if key in flat:
            raise MliteError(f"{run['id']}: {key} is both found and not_found; drop it from not_found")
        if not item.get("default_source"):
            raise MliteError(f"{run['id']}: not_found key {key} names no default_source (verl file @ commit)")
        defaults[key] = item["default"]
    return deep_merge(unflatten(defaults), unflatten(flat))


def run_config(run: dict, root):
    """``(nested verl config, ImportedLauncher or None)`` of any entry: its config dump read back, its launcher's
    overrides over :func:`config_defaults` (the strategy from the launcher's config file when it names none), or an
    assembled entry's keys (:func:`assembled_config`)."""
    from .rl_check import verl_config_from_log

    if run.get("excerpt_kind") == ASSEMBLED:
        return assembled_config(run, root), None
    if "launcher" not in run:
        return verl_config_from_log(Path(root) / run["log"]), None
    cfg, imp = verl_config_from_launcher(run, root)
    if "strategy" not in cfg.setdefault("actor_rollout_ref", {}).setdefault("actor", {}):
        # the launcher's config file decides (ppo_megatron_trainer -> megatron): the importer's reading of it
        cfg["actor_rollout_ref"]["actor"]["strategy"] = "megatron" if "megatron" in imp.target else "fsdp"
    return cfg, imp


ENTRY_ROLLOUT = (
    "sleep_level",
    "max_model_len",
    "verl_version",
    "engine_placement",
    "vllm_version",
    "sibling_contexts",
    "sibling_context_gib",
)
"""RolloutOptions fields an entry may set from its log's evidence (each with a ``*_source`` beside it where it is
not the log's own setting)."""


def fsdp_of(cfg: dict):
    """:class:`~mlite.memory.rl_fsdp.FsdpOptions` of an FSDP actor's verl config (``mlite.memory.rl_keys``'s reader,
    verl's ``fsdp`` default strategy); a Megatron actor's config gives its log-prob sizing only
    (:func:`mlite.memory.rl_keys.log_prob_kwargs`: ``rollout.`` / ``ref.log_prob_micro_batch_size_per_gpu``, dynamic
    batch size and its token budgets), strategy megatron."""
    from ..memory.rl_fsdp import FsdpOptions
    from ..memory.rl_keys import fsdp_kwargs, log_prob_kwargs

    if strategy_of(cfg) == "megatron":
        return FsdpOptions(**log_prob_kwargs(cfg))
    return FsdpOptions(**fsdp_kwargs(cfg, default_strategy="fsdp"))


def critic_of(cfg: dict, run: dict):
    """:class:`~mlite.memory.rl_critic.CriticOptions` of a run's verl config (:func:`mlite.memory.rl_keys.
    critic_kwargs`: ``algorithm.adv_estimator``, ``critic.*``); the critic's strategy is the config's
    ``critic.strategy`` (the actor's when it names none, as verl <= 0.5's ``${actor_rollout_ref.actor.strategy}``),
    its model the run's own model file when ``critic.model.path`` is the actor's (every PPO run here), else refused."""
    from ..memory.rl_critic import CriticOptions
    from ..memory.rl_keys import critic_kwargs

    kw = critic_kwargs(cfg)
    kw.setdefault("strategy", strategy_of(cfg))
    actor_path = cfg.get("actor_rollout_ref", {}).get("model", {}).get("path")
    if kw.get("model") is not None:
        if CriticOptions(**{**kw, "model": None}).active and str(kw["model"]) != str(actor_path):
            raise MliteError(f"{run['id']}: critic.model.path {kw['model']} is not the actor's; add its config")
        kw["model"] = None
    return CriticOptions(**kw)


def predict_run(run: dict, root):
    """``(RLEstimate, TrainingOptions, RolloutOptions, spec, plan, cfg)`` of any entry (config dump or launcher): a
    Megatron actor on the importer's mesh and options, an FSDP actor as verl's FSDP worker
    (:mod:`mlite.memory.rl_fsdp`, its options read from the config by :func:`fsdp_of`), the rollout under the
    entry's verl release, engine placement and vLLM version (:data:`ENTRY_ROLLOUT`)."""
    from ..memory.rl import rl_estimate
    from ..memory.rl_keys import rollout_kwargs
    from ..memory.rl_options import RolloutOptions
    from ..mesh import ParallelConfig, resolve
    from ..models import from_hf_config
    from .rl_check import training_from_verl

    root = Path(root)
    cfg, imp = run_config(run, root)
    spec = from_hf_config(str(root / run["model"]))
    if imp is not None:
        ngpu = imp.nnodes * imp.gpus_per_node
    else:
        ngpu = int(cfg["trainer"]["nnodes"]) * int(cfg["trainer"]["n_gpus_per_node"])
    if strategy_of(cfg) == "megatron":
        if imp is None:
            raise MliteError(f'{run["id"]}: a Megatron actor is read from its launcher (add "launcher")')
        o = megatron_training(imp, cfg, run["gpu_memory_gib"])
        par = imp.parallel
    else:
        o = training_from_verl(cfg, run["gpu_memory_gib"])
        par = ParallelConfig()
    kw = rollout_kwargs(cfg)
    kw.update({k: run[k] for k in ENTRY_ROLLOUT if k in run})
    r = RolloutOptions(**kw)
    plan = resolve(spec, ngpu, par, seq_len=o.seq_len, gpus_per_node=o.gpus_per_node)
    return rl_estimate(spec, plan, o, r, fsdp_of(cfg), critic_of(cfg, run)), o, r, spec, plan, cfg


def predicted(est, logged_step: int | None = None) -> dict:
    """The kit's figures for the run's logged memory metrics (GiB), keyed as :data:`MEMORY_KEYS`:
    :func:`mlite.memory.rl_metrics.predicted_metrics` under the estimate's verl release and engine placement, on the
    log line of step ``logged_step`` (:mod:`mlite.memory.rl_lazy`: at step 1 no optimizer moments exist before the
    first update; None: the steady state) (a PPO critic's parts are in the estimate's phases, counted in the actor's
    process: see rl_metrics)."""
    from ..memory.rl_metrics import ALLOCATED, CPU_USED, RESERVED, predicted_metrics

    pm = predicted_metrics(est, logged_step=logged_step)
    return {
        "max_memory_allocated_gb": pm[ALLOCATED] / GIB,
        "max_memory_reserved_gb": pm[RESERVED] / GIB,
        "cpu_memory_used_gb": pm[CPU_USED] / GIB,
    }


def engine_text(est) -> str:
    """The engine column: name, where it ran (``rl_metrics.placement_for``) and, for vLLM, its KV-budget rule."""
    from ..memory.rl_metrics import placement_for
    from ..memory.rl_vllm import kv_rule

    r = est.rollout
    rule = f", KV rule {kv_rule(r.vllm_version).name}" if r.name == "vllm" else ""
    return f"{r.name} ({placement_for(r)}{rule})"


def comparison_rows(root) -> list[dict]:
    """One row per run of :func:`load_runs`: every logged memory metric next to its prediction (GiB), with what
    the comparison may say; ``ratio`` is predicted / logged ``max_memory_allocated_gb``."""
    rows = []
    for run in load_runs(root):
        est, _o, _r, _spec, _plan, cfg = predict_run(run, root)
        logged = logged_memory(Path(root) / run["log"])
        pred = predicted(est, logged["step"])  # the step line the excerpt's figure is read from
        rows.append(
            {
                "run": run["id"],
                "file": run["_file"],
                "strategy": strategy_of(cfg),
                "algorithm": "PPO" if cfg.get("algorithm", {}).get("adv_estimator") == "gae" else "GRPO",
                "verl": run.get("verl_version") or run["verl_era"].split(",")[0],
                "engine": engine_text(est),
                "logged": logged,
                "predicted": pred,
                "ratio": pred["max_memory_allocated_gb"] / logged["max_memory_allocated_gb"],
                **_comparable(run),
            }
        )
    return rows


def _comparable(run: dict) -> dict:
    """``{"comparable", "why"}`` of an entry: its own fields, or :data:`FIRST_ROUND` for a first-round one."""
    if "comparable" in run:
        return {"comparable": bool(run["comparable"]), "why": run["comparable_why"], "miss": run.get("miss_why")}
    ok, why = FIRST_ROUND.get(run["id"], (True, f"first round, engine accounting {run['engine_accounting']}"))
    return {"comparable": ok, "why": why, "miss": run.get("miss_why")}


def _pair(row: dict, key: str) -> str:
    """``logged | predicted`` cells of one metric (a dash for a metric the log does not carry)."""
    got = row["logged"][key]
    if got is None:
        return "- | -"
    return f"{got:.1f} | {row['predicted'][key]:.1f}"


def comparison_table(rows: list[dict]) -> str:
    """The README table of :func:`comparison_rows` (GiB; verl's "gb" are GiB)."""
    out = [
        "| run | strategy | verl | engine (placement, vLLM KV rule) | step | logged max_allocated | predicted | "
        "ratio | logged max_reserved | predicted | logged cpu_used (node) | predicted (floor) | comparable? why |",
        "|" + "---|" * 13,
    ]
    for row in rows:
        yes = "yes" if row["comparable"] else "no"
        off = f"; off by {row['ratio'] - 1:+.0%}: {row['miss']}" if row["comparable"] and row["miss"] else ""
        out.append(
            f"| {row['run']} | {row['strategy']} {row['algorithm']} | {row['verl']} | {row['engine']} | "
            f"{row['logged']['step']} | {_pair(row, 'max_memory_allocated_gb')} | {row['ratio']:.2f} | {_pair(row, 'max_memory_reserved_gb')} | "
            f"{_pair(row, 'cpu_memory_used_gb')} | {yes}: {row['why']}{off} |"
        )
    return "\n".join(out)


__all__ = [
    "ASSEMBLED",
    "MEMORY_KEYS",
    "RUNS_FILES",
    "assembled_config",
    "comparison_rows",
    "comparison_table",
    "fragments",
    "load_runs",
    "logged_memory",
    "predict_run",
    "predicted",
    "verl_config_from_launcher",
]


def main(argv=None) -> int:
    """``python3 -m mlite.validation.rl_runs --table``: every published run of ``tests/data/rl`` estimated and put next
    to its logged ``perf/max_memory_allocated_gb``, as the README's table; ``--root DIR`` reads another folder of run
    lists. Bad input: one line on stderr, exit 2."""
    import argparse
    import sys

    from ..paths import REPO_ROOT

    ap = argparse.ArgumentParser(prog="python3 -m mlite.validation.rl_runs")
    ap.add_argument("--table", action="store_true", help="print the README table of every run (the default)")
    ap.add_argument("--root", default=str(REPO_ROOT / "tests" / "data" / "rl"), help="folder of the run lists")
    args = ap.parse_args(argv)
    try:
        table = comparison_table(comparison_rows(args.root))
    except MliteError as e:
        print(f"error: {e.message}", file=sys.stderr)
        return 2
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
