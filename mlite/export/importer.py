"""``import_launcher``: read the Hydra overrides of an existing verl command line back into a plan.

Accepts a launcher script (bash arrays, ``${X:-default}`` knobs, ``case`` variants — see :mod:`.shell`), a resolved
command (what ``DRY_RUN=1`` or ``set -x`` prints), or the launchers ``mlite export`` writes; the launch line is a verl
entry point or any Python entry whose arguments are verl Hydra overrides (``python ../qwen3/verl_entrypoint.py``,
``python3 -m main_gkd``). ``SLURM_*`` values come from the ``#SBATCH`` headers (:mod:`mlite.shell.slurm`), the config
``--config-path`` / ``--config-name`` name from its YAML files beside the script (:mod:`.hydra_config`), and the
overrides apply as Hydra applies them (``~key`` deletes, :func:`.overrides.apply_overrides`). Reads the mesh from the
mlite engine keys (``engine.tp`` ... / ``actor_rollout_ref.actor.engine.tp`` ...) or verl's Megatron keys
(``actor_rollout_ref.actor.megatron.*_parallel_size``; ETP ``null`` means ETP = TP there, 1 for mlite), the GPU count
from ``trainer.nnodes x trainer.n_gpus_per_node`` (else torchrun's flags), and the training options the memory
estimator needs. The mesh is then judged by the mesh rules (:data:`mlite.mesh.checks.RULES`) the way Megatron-Core
judges it at start-up, with each size the launcher leaves unset said (:attr:`ImportedLauncher.inherited`) and MTP
layers placed only when the launcher trains them.

Never a silently wrong mesh: a mesh or cluster size that could not be expanded, or is not a number, stops the import
(:class:`~mlite.errors.MliteError`, exit 2 from the CLI) naming the key and the variable; so does a script that
launches nothing, hands over to a file that cannot be read, or runs a command variable it never sets.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, cast

from ..errors import MliteError
from ..mesh.axes import AXES, AXIS_NAMES, BY_NAME, DERIVED
from ..mesh.layout import SPLIT_KEYS
from ..mesh.rules import launcher_rule_dp, launcher_rule_outcome
from ..options.optimizers import BACKENDS, check_env, check_overrides
from ..shell.script import run_script, uses_launcher_rule
from .mapping import ACTOR, read_options, read_parallel, read_split
from .overrides import ParsedOverride, apply_overrides, parse_override
from .verl_grpo_megatron import PARALLEL_KEYS

if TYPE_CHECKING:
    from ..mesh import ParallelConfig, PipelineSplit
    from ..models import ModelSpec

_MLITE_SIZES = tuple(a.engine_key for a in AXES)
_MODEL_SUFFIXES = re.compile(r"(-(Base|Instruct|Chat|BF16|FP8|RL|SFT|derived)(-\d+)?)+$", re.IGNORECASE)
# A launcher that leaves model.path empty and picks its model with MODEL_VARIANT (verl's Megatron Lite examples):
# the variant -> the data/models config of that model (DeepSeek-V4-Pro has none).
_VARIANT_MODELS = {"kimi_k2_6": "Kimi-K2.6", "glm5_1": "GLM-5", "flash": "DeepSeek-V4-Flash"}

_TARGETS = {
    ("mlite", False): "verl-mlite-grpo",
    ("mlite", True): "verl-mlite-sft",
    ("megatron", False): "verl-megatron-grpo",
    ("megatron", True): "verl-megatron-sft",
    ("fsdp", False): "verl-fsdp-grpo",
    ("fsdp", True): "verl-fsdp-sft",
}


@dataclass(kw_only=True)
class ImportedLauncher:
    """What a verl command line sets, as a plan."""

    source: str
    """File read (or ``<text>``)."""
    target: str
    """``verl-mlite-grpo``, ``verl-mlite-sft``, ``verl-megatron-grpo`` (export targets), or ``verl-megatron-sft``,
    ``verl-fsdp-*`` (read, not exported)."""
    entry: str
    """The verl module launched."""
    config_name: str | None
    """``--config-name`` (e.g. ``ppo_megatron_trainer``), None for the entry's default."""
    overrides: list[ParsedOverride]
    """Every Hydra override, values expanded."""
    nnodes: int
    """Nodes."""
    gpus_per_node: int
    """GPUs per node."""
    parallel: ParallelConfig
    """The :class:`mlite.mesh.ParallelConfig` read."""
    options: dict
    """:class:`mlite.memory.TrainingOptions` keyword arguments read (only what the launcher says)."""
    model_path: str | None = None
    """``model.path`` / ``actor_rollout_ref.model.path`` as written."""
    warnings: list[str] = field(default_factory=list)
    """What could not be resolved, keys ignored that look like mesh or memory settings, rule disagreements."""
    unresolved: dict = field(default_factory=dict)
    """Variable or substitution -> the overrides it appears in."""
    ignored: list[str] = field(default_factory=list)
    """Override keys that are not part of a mesh / memory plan."""
    launcher_rule: bool = False
    """The script computes DP with verl's rule ngpu / PP = TP * EP * DP."""
    inherited: dict = field(default_factory=dict)
    """Mesh field -> :class:`mlite.mesh.Inherited`: the sizes the launcher leaves unset and the value they take
    (Megatron-Core: ETP = TP, VPP null, CP 1; Megatron Lite: ETP 1)."""
    required: dict = field(default_factory=dict)
    """Variables the script requires (``${NAME:?message}``) that were not set: name -> message."""
    train_mtp: bool = False
    """The launcher trains MTP layers (``model.mtp.enable`` and ``enable_train``); else no stage holds them."""
    model_variant: str | None = None
    """``MODEL_VARIANT`` as the script leaves it (verl's Megatron Lite examples pick their model with it)."""
    deleted: list[str] = field(default_factory=list)
    """Keys the launcher deletes with Hydra's ``~key`` (unset, not empty)."""
    split: PipelineSplit | None = None
    """The Megatron-Core pipeline split keys the launcher sets (first/last-stage counts, ``account_for_*``, a layer
    list): the layers rule checks them as Megatron-Core does and the estimate uses the stages they give."""
    environment: dict = field(default_factory=dict)
    """Variables the script puts in the launch's environment (``export NAME=...``, ``NAME=... cmd``:
    :attr:`mlite.shell.script.ScriptResult.exported`) -> ``(value, line)``; the outside ``env`` is not in it
    (``mlite check`` reads both: the environment rules of :attr:`mlite.options.optimizers.Backend.env_refuses`)."""
    verl_version: dict = field(default_factory=dict)
    """``{"version": str | None, "source": str}``: the verl release the launcher names and where
    (:func:`mlite.export.verl_version.launcher_verl_version`); its rollout estimate's ``predicted_metrics`` assume it."""

    @property
    def ngpu(self) -> int:
        return self.nnodes * self.gpus_per_node

    def training_options(self):
        """:class:`mlite.memory.TrainingOptions` from :attr:`options` (defaults for the rest)."""
        from ..memory import TrainingOptions

        return TrainingOptions(**self.options, gpus_per_node=self.gpus_per_node)

    def model_ref(self, config: str | None = None) -> str | None:
        """The model config to judge the mesh with: ``config``, else ``model.path`` when it is a local folder or
        file, else the catalog model its last component names (:func:`catalog_model`), else, with ``model.path``
        empty, the config of the script's ``MODEL_VARIANT``."""

        if config:
            return config
        if not self.model_path:
            return _VARIANT_MODELS.get(self.model_variant or "")
        p = Path(self.model_path).expanduser()
        if (p.is_dir() and (p / "config.json").is_file()) or (p.is_file() and p.suffix == ".json"):
            return str(p)
        return catalog_model(p.name)

    def plan(self, config: str | None = None):
        """``(MeshPlan or None, model ref or None)``: the planner's verdict on the mesh read."""
        from ..mesh import resolve
        from ..mesh.engine import judgment, target_engine
        from ..models import from_hf_config

        ref = self.model_ref(config)
        if ref is None:
            return None, None
        spec = from_hf_config(ref)
        seq = int(self.options.get("seq_len", 4096))
        how = judgment(target_engine(self.target))  # the engine's mesh rule, as ``mlite mesh --engine`` applies it
        mp = resolve(
            spec,
            self.ngpu,
            self.parallel,
            seq_len=seq,
            gpus_per_node=self.gpus_per_node,
            auto_uneven=how.auto_uneven,
            inherited=self.inherited,
            train_mtp=self.train_mtp,
            kv_replication=how.kv_replication,
            split=self.split,
        )
        if spec.vision_params:  # said with the estimate: where the memory estimate holds the tower
            from ..mesh.rules import finding
            from ..models.vision import VISION_PLACEMENT

            mp.findings.append(
                finding("vision", "info", f"vision tower ({spec.vision_params:,} parameters) {VISION_PLACEMENT}")
            )
        return mp, ref

    @property
    def rollout(self) -> dict:
        """The rollout knobs the launcher sets, as :class:`~mlite.memory.rl_options.RolloutOptions` keyword
        arguments (:mod:`mlite.memory.rl_keys`; values that did not resolve are left out)."""
        from ..memory.rl_keys import rollout_kwargs

        return rollout_kwargs({o.key: o.value for o in self.overrides}, problems=[])

    @property
    def log_prob(self) -> dict:
        """What sizes the old_log_prob / ref forwards (``rollout.`` / ``ref.log_prob_micro_batch_size_per_gpu``,
        dynamic batch size and its token budgets), as :class:`~mlite.memory.rl_fsdp.FsdpOptions` keyword arguments
        with strategy megatron (:func:`mlite.memory.rl_keys.log_prob_kwargs`; values that did not resolve are left
        out and said in :attr:`warnings` at import)."""
        from ..memory.rl_keys import log_prob_kwargs

        return log_prob_kwargs({o.key: o.value for o in self.overrides}, problems=[])

    @property
    def critic(self) -> dict:
        """PPO's critic as the launcher sets it (``algorithm.adv_estimator``, ``critic.*``), as
        :class:`~mlite.memory.rl_critic.CriticOptions` keyword arguments (:func:`mlite.memory.rl_keys.critic_kwargs`;
        values that did not resolve are left out and said in :attr:`warnings` at import)."""
        from ..memory.rl_keys import critic_kwargs

        return critic_kwargs({o.key: o.value for o in self.overrides}, problems=[])

    def critic_options(self):
        """:class:`~mlite.memory.rl_critic.CriticOptions` of :attr:`critic` (a value verl would refuse raises
        :class:`MliteError` naming the key)."""
        from ..memory.rl_critic import CriticOptions

        kw = self.critic
        if kw.get("model") is not None:  # a checkpoint path: the config it names, as model.path's (model_ref)
            path = str(kw["model"])
            same = path == self.model_path
            kw["model"] = None if same else _critic_model(path)
        c = CriticOptions(**kw)
        if "strategy" not in kw and self.target == "verl-fsdp-grpo" and c.active:  # ppo_trainer: critic.strategy fsdp
            c = CriticOptions(**kw, strategy="fsdp")
        return c

    def to_dict(self, config: str | None = None) -> dict:
        """The ``mlite import-launcher --json`` document: ``ngpu``, the mesh keys as ``mlite mesh`` prints them,
        ``warnings`` (the planner's and the import's), and what was read."""
        mp, ref = self.plan(config)
        p = self.parallel
        warnings = list(self.warnings)
        if mp is not None:
            doc = mp.to_dict()
            warnings = doc["warnings"] + warnings
        else:
            doc = self._world_only()
            warnings = doc["warnings"] + warnings
            warnings.append(
                f"no model config for '{self.model_path or '?'}': only the GPU-count rules were checked "
                "(pass --config NAME_OR_PATH for heads, experts, layers)"
            )
        out: dict[str, object] = {"ngpu": self.ngpu}
        for k in ("valid", "errors"):
            out[k] = doc[k]
        # the rollout engine's own rule, apart from the actor mesh's verdict (valid / errors)
        bad = self._rollout_tp_error(ref)
        out["rollout_errors"] = [bad] if bad else []
        out["warnings"] = warnings
        out["info"] = doc["info"] + self._model_info(config, ref)
        for k in (*AXIS_NAMES, *DERIVED, "pp_layout", "layout_source"):
            out[k] = doc[k]
        ldp = launcher_rule_dp(self.ngpu, p)
        out.update(
            {
                "nnodes": self.nnodes,
                "gpus_per_node": self.gpus_per_node,
                "target": self.target,
                "entry": self.entry,
                "config_name": self.config_name,
                "model_path": self.model_path,
                "model_config": ref,
                "options": self.options,
                "rollout": self.rollout,
                "launcher_rule": {"used": self.launcher_rule, "dp": int(ldp) if ldp.is_integer() else round(ldp, 3)},
                "unresolved": self.unresolved,
                "ignored": self.ignored,
                "source": self.source,
                "inherited": {k: v.why for k, v in self.inherited.items()},
                "train_mtp": self.train_mtp,
                "deleted": self.deleted,
                "pipeline_split": self.split.describe() if self.split else "",
                "verl_version": self.verl_version,
            }
        )
        return out

    def _rollout_tp_error(self, ref: str | None) -> str:
        """A GRPO/PPO launcher's rollout TP against the rollout rules (:func:`mlite.models.quantized.
        check_rollout_tp`: whole FP8 blocks per rank, DeepSeek-V4's o_groups); the refusal, or ``""``."""
        if self.target.endswith("-sft") or ref is None:
            return ""
        from ..memory.rl_options import RolloutOptions
        from ..models import from_hf_config
        from ..models.quantized import check_rollout_tp

        r = self.rollout
        d = RolloutOptions.__dataclass_fields__
        tp = r.get("tensor_model_parallel_size", d["tensor_model_parallel_size"].default)
        ep = r.get("expert_parallel_size", 1)
        try:
            check_rollout_tp(
                from_hf_config(ref),
                int(tp),
                r.get("weight_block_size"),
                expert_parallel=ep > 1,
                flag="actor_rollout_ref.rollout.tensor_model_parallel_size",
            )
        except MliteError as e:
            return e.message
        return ""

    def _model_info(self, config: str | None, ref: str | None) -> list[str]:
        """How the model config was found, when it is not the one ``model.path`` names (a sibling checkpoint, a
        derived file, the script's MODEL_VARIANT)."""
        if config or ref is None:
            return []
        if not self.model_path:
            return [
                f"model.path is empty (the script requires MODEL_PATH); MODEL_VARIANT={self.model_variant} read with "
                f"data/models/{ref} (pass --env MODEL_PATH=... or --config for another)"
            ]
        if Path(ref).name.lower() != Path(self.model_path).name.lower():
            same = " (a derived config: see data/models/README.md)" if ref.endswith("-derived") else ""
            return [f"model.path '{self.model_path}' read with data/models/{ref}{same}, the same architecture"]
        return []

    def _world_only(self) -> dict:
        """The verdict of the rules that need no model (Megatron-Core's world-size and VPP checks)."""
        from types import SimpleNamespace

        from ..mesh import MeshContext, run_rules
        from ..mesh import checks as C

        p = self.parallel
        # any model: experts and widths that every size divides, so only the GPU-count rules speak
        anything = SimpleNamespace(num_experts=1 << 20, moe_ffn_hidden_size=1 << 20, name=self.model_path or "?")
        # a stand-in, not a ModelSpec: the four rules below read only num_experts, moe_ffn_hidden_size and name
        ctx = MeshContext(
            spec=cast("ModelSpec", anything),
            ngpu=self.ngpu,
            parallel=p,
            gpus_per_node=self.gpus_per_node,
            inherited=self.inherited,
        )
        found = run_rules(ctx, (C.rule_world_dense, C.rule_world_expert, C.rule_vpp, C.rule_inherited))
        errors = [f.message for f in found if f.level == "error"]
        return {
            "valid": not errors,
            "errors": errors,
            "warnings": [],
            "info": [f.message for f in found if f.level == "info"],
            **p.sizes(),
            "dp": ctx.dp,
            "edp": ctx.edp,
            "pp_layout": p.pp_layout or "",
            "layout_source": "pp_layout" if p.pp_layout else "unknown",
        }

    def planner_values(self) -> dict:
        """The mesh and cluster as planner fields: ``ngpu``, ``gpus_per_node``, ``seq_len``, ``tp`` ... ``etp``
        (resolved, e.g. ETP = TP for a Megatron launcher that leaves it unset), ``pp_layout`` (the stages of the
        launcher's split keys when it sets them: the planner has no such fields)."""
        ref = self.model_ref()
        p = self._parallel_with_split(ref) if ref is not None else self.parallel
        return {
            "ngpu": self.ngpu,
            "gpus_per_node": self.gpus_per_node,
            "seq_len": int(self.options.get("seq_len", 4096)),
            **p.sizes(),
            "pp_layout": p.pp_layout or "",
        }

    def estimate(self, config: str | None = None, *, gpu_memory_gib: float | None = None):
        """``(MeshPlan, MemoryEstimate or None)``: the training memory estimate of the imported mesh and options (None
        for an invalid mesh). Refused (MliteError) without a model config. The per-phase RL estimate of GRPO/PPO
        launchers (rollout ``gpu_memory_utilization``, rollout TP, ``n``, lengths, offload) is :func:`rl_estimate`.
        """
        from dataclasses import replace

        from ..memory import estimate
        from ..models import from_hf_config

        mp, ref = self.plan(config)
        if mp is None:
            if not self.model_path:
                need = "; ".join(f"the script requires {k} ({v})" for k, v in self.required.items())
                variant = (
                    f"; MODEL_VARIANT={self.model_variant} has no config in data/models/ (no public config.json found)"
                    if self.model_variant
                    else ""
                )
                raise MliteError(
                    f"--estimate needs the model: model.path is empty{' (' + need + ')' if need else ''}{variant}; "
                    "pass --env MODEL_PATH=... or --config NAME_OR_PATH"
                )
            raise MliteError(
                f"--estimate needs the model: '{self.model_path}' is not a config in data/models/ "
                "or a local folder; pass --config NAME_OR_PATH"
            )
        if not mp.valid:
            return mp, None
        o = self.training_options()
        if gpu_memory_gib is not None:
            o = replace(o, gpu_memory_gib=gpu_memory_gib)
        return mp, estimate(from_hf_config(ref), mp, o)

    def _parallel_with_split(self, ref: str) -> ParallelConfig:
        """:attr:`parallel`, with the stages of the launcher's split keys as its ``pp_layout`` (the layout an export
        writes as ``pipeline_model_parallel_layout``); unchanged without split keys or when they do not hold."""
        from dataclasses import replace

        if not self.split:
            return self.parallel
        mp, _ = self.plan(ref)
        return replace(self.parallel, pp_layout=mp.layout) if mp is not None and mp.stages else self.parallel

    def to_export_plan(self, *, model: str | None = None, target: str | None = None, **kw):
        """An :class:`mlite.export.ExportPlan` with this mesh, cluster and options (the header then states the
        difference to this launcher's rule when it used verl's)."""
        from .plan import ExportPlan

        ref = self.model_ref(model)
        if ref is None:
            raise MliteError(f"no model config for '{self.model_path}': pass model= (a data/models name or path)")
        from .plan import ROLLOUT_OWNED

        p = self._parallel_with_split(ref)
        ldp = launcher_rule_dp(self.ngpu, p)
        r = self.rollout
        if not self.target.endswith("-sft"):
            kw.setdefault(
                "rollout_knobs",
                {k: v for k, v in r.items() if k not in ROLLOUT_OWNED and k not in ("ref", "ref_param_offload")},
            )
            for field, name in (
                ("n", "rollout_n"),
                ("tensor_model_parallel_size", "rollout_tp"),
                ("gpu_memory_utilization", "rollout_gpu_memory_utilization"),
                ("prompt_length", "max_prompt_length"),
            ):
                if field in r:
                    kw.setdefault(name, r[field])
        kw.setdefault("train_mtp", self.train_mtp)  # the launcher's MTP training, written back as it was
        if not self.target.endswith("-sft"):  # the log-prob forwards and PPO's critic, written back as they were
            from .plan import LOG_PROB_OWNED

            kw.setdefault(
                "log_prob_knobs", {k: v for k, v in self.log_prob.items() if k not in (*LOG_PROB_OWNED, "strategy")}
            )
            kw.setdefault("critic", self.critic_options())
        return ExportPlan(
            model=ref,
            target=target
            or (
                self.target
                if self.target in ("verl-mlite-sft", "verl-mlite-grpo", "verl-megatron-grpo")
                else "verl-mlite-grpo"
            ),
            parallel=p,
            options=self.training_options(),
            nodes=self.nnodes,
            gpus_per_node=self.gpus_per_node,
            model_path=self.model_path or None,
            source_launcher=self.source,
            source_rule_dp=ldp if self.launcher_rule else None,
            **kw,
        )


def _critic_model(path: str) -> str:
    """The model config ``critic.model.path`` names: a local folder's / file's, else the catalog model of its last
    component (:func:`catalog_model`); one the kit cannot find raises :class:`MliteError` naming the key."""
    p = Path(path).expanduser()
    if (p.is_dir() and (p / "config.json").is_file()) or (p.is_file() and p.suffix == ".json"):
        return str(p)
    found = catalog_model(p.name)
    if found is None:
        raise MliteError(
            f"critic.model.path={path}: no config in data/models/ or local folder names it; pass the critic "
            "model's config (or leave critic.model.path to the actor's)"
        )
    return found


def catalog_model(name: str) -> str | None:
    """The ``data/models/`` config a checkpoint folder's name names: the name itself, else with a -Base/-Instruct/...
    suffix on either side ignored (Moonlight-16B-A3B finds Moonlight-16B-A3B-Instruct, the same architecture; a
    ``-derived`` file counts as its model), else the longest catalog name it starts with followed by ``-`` or ``_``
    (``Qwen3-235B-A22B-hf`` -> Qwen3-235B-A22B, ``DeepSeek-V3-0324-BF16`` -> DeepSeek-V3)."""
    from ..models import available_models

    models = sorted(available_models(), reverse=True)
    names = {n.lower(): n for n in models}
    base = _MODEL_SUFFIXES.sub("", name)  # Qwen3-30B-A3B-Base, -Instruct-2507: the same architecture
    siblings = {_MODEL_SUFFIXES.sub("", n).lower(): n for n in models}
    found = names.get(name.lower()) or names.get(base.lower()) or siblings.get(base.lower())
    if found:
        return found
    low = name.lower()
    heads = [(len(k), v) for k, v in (names | siblings).items() if low.startswith((k + "-", k + "_"))]
    return max(heads)[1] if heads else None


def _read_source(src: str | Path, text: str | None) -> tuple[str, str]:
    """``(text, source name)`` of a launcher file, or of ``text`` given directly."""
    if text is not None:
        return text, str(src or "<text>")
    path = Path(src).expanduser()
    try:
        return path.read_text(encoding="utf-8", errors="replace"), str(src)
    except (FileNotFoundError, IsADirectoryError) as e:
        what = "no such file" if isinstance(e, FileNotFoundError) else "is a folder"
        raise MliteError(f"{src}: {what}; give a launcher script or a file with a verl command line") from None


def _torchrun_args(launch) -> dict[str, str]:
    """torchrun's ``--nnodes`` / ``--nproc-per-node`` before the entry point, by their underscore names."""
    out: dict[str, str] = {}
    for j, w in enumerate(launch.words[: launch.entry]):
        if w.startswith(("--nnodes", "--nproc_per_node", "--nproc-per-node")):
            key, _, val = w.partition("=")
            val = val or (launch.words[j + 1] if j + 1 < launch.entry else "")
            out[key.lstrip("-").replace("-", "_")] = val
    return out


@dataclass
class _LaunchWords:
    """The arguments after a launch line's entry point, read as Hydra overrides."""

    overrides: list[ParsedOverride] = field(default_factory=list)
    """The overrides in order."""
    unresolved: dict[str, list[str]] = field(default_factory=dict)
    """Variable -> the override keys whose value needed it unset."""
    used_by: dict[str, set] = field(default_factory=dict)
    """Override key -> the variables its value was built from."""
    config_name: str | None = None
    """``--config-name`` / ``-cn`` without ``.yaml``."""
    config_path: str | None = None
    """``--config-path`` / ``-cp`` as expanded."""
    config_path_unresolved: list[str] = field(default_factory=list)
    """Variables ``--config-path`` needed that are not set."""


def _launch_words(launch, warnings: list[str]) -> _LaunchWords:
    """Read the words after the entry point (``--config-name`` / ``--config-path`` and Hydra overrides)."""
    out = _LaunchWords()
    words = launch.words[launch.entry + 1 :]
    unres = launch.unresolved[launch.entry + 1 :]
    deps = launch.used[launch.entry + 1 :]
    i = 0
    while i < len(words):
        w, u, d = words[i], unres[i], deps[i]
        i += 1
        if w.startswith(("--config-name", "--config-path", "-cn", "-cp")):
            key, _, val = w.partition("=")
            if not val and i < len(words):
                val, u, i = words[i], unres[i], i + 1
            if key in ("--config-name", "-cn"):
                out.config_name = val.removesuffix(".yaml")
            elif key in ("--config-path", "-cp"):
                out.config_path, out.config_path_unresolved = val, list(u)
            continue
        ov = parse_override(w)
        if ov is None:
            if w.strip():
                warnings.append(f"'{w}' is not a Hydra override; ignored")
            continue
        out.overrides.append(ov)
        out.used_by[ov.key] = d
        for name in u:
            out.unresolved.setdefault(name, []).append(ov.key)
    return out


def _unresolved_warnings(unresolved: dict[str, list[str]]) -> list[str]:
    """One warning per variable that could not be resolved, naming where it was used."""
    out = []
    for name, keys in unresolved.items():
        label = name if name.startswith("$") else "$" + name
        shown = ", ".join(keys[:3]) + (f" and {len(keys) - 3} more" if len(keys) > 3 else "")
        out.append(
            f"could not resolve {label} (used in {shown}); pass --env {name.strip('$')}=VALUE"
            if not name.startswith("$")
            else f"could not resolve {label} (used in {shown})"
        )
    return out


def _ignored_warnings(ignored: list[str]) -> list[str]:
    """Warnings for ignored keys that look like mesh or memory settings."""
    out = []
    for k in ignored:
        low = k.lower()
        if any(
            t in low for t in ("parallel_size", "offload", "recompute", ".engine.", "impl_cfg")
        ) and not low.startswith(("actor_rollout_ref.rollout.", "actor_rollout_ref.ref.", "critic.")):
            out.append(f"{k}: looks like a mesh or memory setting but is not read; ignored")
        elif low.startswith(("actor_rollout_ref.ref.", "critic.")) and "parallel_size" in low:
            out.append(f"{k}: the plan is the actor's mesh; the reference/critic setting is ignored")
    return out


def _launcher_rule_warning(p: ParallelConfig, ngpu: int) -> list[str]:
    """The warning of a launcher that computes DP with verl's rule, where that disagrees with the runtime's."""
    rdp = ngpu / (p.tp * p.cp * p.pp)
    if launcher_rule_dp(ngpu, p) == rdp:
        return []
    return [
        f"this launcher computes DP with verl's rule ngpu/PP = TP*EP*DP, which {launcher_rule_outcome(ngpu, p)}; "
        "the runtime's "
        f"rule ngpu = TP*CP*DP*PP gives DP = {rdp:g} (they differ because CP {p.cp} != EP {p.ep})"
    ]


def import_launcher(src: str | Path, *, env: dict | None = None, text: str | None = None) -> ImportedLauncher:
    """Read a launcher file (or ``text``) into an :class:`ImportedLauncher`; ``env`` supplies outside variables."""
    text, source = _read_source(src, text)
    res = run_script(text, env, path=None if source.startswith("<") else Path(source).expanduser())
    if not res.launches:
        raise _no_launch(source, res)
    warnings = list(res.notes) + [
        f"the script requires {k} ({v}); it is not set" for k, v in res.shell.required.items()
    ]
    outside = [ln for ln in res.launches if not ln.in_block]
    launch = (outside or res.launches)[-1]
    if len(outside or res.launches) > 1:
        warnings.append(f"{len(outside or res.launches)} verl launch lines found; read the last (line {launch.line})")
    torchrun = _torchrun_args(launch)
    lw = _launch_words(launch, warnings)
    unresolved, config_name = lw.unresolved, lw.config_name
    base, config_notes = _config_values(lw, launch, source)
    ovs, deleted, hydra_warn = apply_overrides(base, lw.overrides)
    warnings += config_notes + hydra_warn + _slurm_notes(res, launch)
    warnings += _unresolved_warnings(unresolved)
    is_sft = "sft" in launch.module
    backend, parallel, consumed, mesh_warn = read_parallel(ovs, is_sft=is_sft, config_name=config_name)
    split_keys = {o.key for o in ovs if o.key.rsplit(".", 1)[-1] in SPLIT_KEYS.values()}
    _refuse_unread_mesh(
        source, ovs, consumed | split_keys | {"trainer.nnodes", "trainer.n_gpus_per_node"}, unresolved, res
    )
    split, consumed_s = read_split(ovs, backend=backend, is_sft=is_sft)
    consumed |= consumed_s
    warnings += mesh_warn
    nnodes, gpn, consumed_c, cw = _cluster(ovs, torchrun, is_sft)
    warnings += cw
    options, consumed_o, ow = read_options(ovs, backend=backend, is_sft=is_sft)
    warnings += ow
    if options.get("optimizer") in BACKENDS:  # the backend's rules of keys mlite has no option for, and of the env
        opt_backend = options["optimizer"]
        marker = "override_optimizer_config."
        check_overrides(opt_backend, {o.key.split(marker, 1)[1]: o.value for o in ovs if marker in o.key})
        try:
            check_env(opt_backend, {k: str(v) for k, v in res.shell.vars.items() if isinstance(v, str)})
        except MliteError as e:  # the preflight reports it as an error; the plan itself still reads
            warnings.append(f"{e} (the launch would fail)")
    consumed |= consumed_c | consumed_o
    if backend == "fsdp" and not is_sft:  # verl's FSDP actor: its keys are read by mlite/export/importer_fsdp.py
        from .importer_fsdp import fsdp_keys

        consumed |= fsdp_keys() & {o.key for o in ovs}
    if not is_sft:  # the log-prob forwards (every strategy) and PPO's critic: mlite/memory/rl_keys.py reads them
        consumed_rl, rl_warn = _rl_keys(ovs)
        consumed |= consumed_rl
        warnings += rl_warn
    model_path = next((str(o.value) for o in ovs if o.key in ("model.path", "actor_rollout_ref.model.path")), None)
    if model_path is not None:
        consumed.add("model.path" if is_sft else "actor_rollout_ref.model.path")
    ignored = [o.key for o in ovs if o.key not in consumed and not o.origin]
    from_config = [f"{o.key}={o.raw} from {o.origin}" for o in ovs if o.origin and o.key in consumed]
    if from_config:  # the config's values the plan reads, each with its file (the command line is silent on them)
        warnings.append("from the config: " + ", ".join(from_config))
    read_vars = set().union(*(lw.used_by.get(k, set()) for k in consumed)) if consumed else set()
    for name in sorted(res.block_assignments & read_vars):
        warnings.append(
            f"{name} is also assigned inside an if/loop block that was not evaluated; the value set outside it was used"
        )
    warnings += _ignored_warnings(ignored)
    text_rule = uses_launcher_rule(text)
    if text_rule:
        warnings += _launcher_rule_warning(parallel, nnodes * gpn)
    by = {o.key: o.value for o in ovs}
    mtp = "model.mtp" if is_sft else "actor_rollout_ref.model.mtp"
    train_mtp = by.get(f"{mtp}.enable") is True and by.get(f"{mtp}.enable_train", True) is not False
    return ImportedLauncher(
        source=source,
        target=_TARGETS[(backend, is_sft)],
        entry=launch.module,
        config_name=config_name,
        overrides=ovs,
        nnodes=nnodes,
        gpus_per_node=gpn,
        parallel=parallel,
        options=options,
        model_path=model_path,
        warnings=warnings,
        unresolved=unresolved,
        ignored=ignored,
        launcher_rule=text_rule,
        inherited=_inherited(by, backend, is_sft, parallel, {o.key: o.origin for o in ovs if o.origin}),
        train_mtp=train_mtp,
        required=dict(res.shell.required),
        model_variant=res.shell.vars.get("MODEL_VARIANT"),
        deleted=deleted,
        split=split,
        environment={
            n: (res.shell.vars[n], line) for n, line in res.exported.items() if isinstance(res.shell.vars.get(n), str)
        },
        verl_version=_verl_version(text, by),
    )


def _rl_keys(ovs) -> tuple[set, list[str]]:
    """``(consumed keys, warnings)`` of the log-prob and critic rows (:func:`mlite.memory.rl_keys.log_prob_kwargs`,
    :func:`~mlite.memory.rl_keys.critic_kwargs`): a value that did not resolve is left at verl's default, said."""
    from ..memory.rl_keys import _critic_rows, _log_prob_rows, critic_kwargs, log_prob_kwargs

    flat = {o.key: o.value for o in ovs}
    problems: list[str] = []
    log_prob_kwargs(flat, problems=problems)
    critic_kwargs(flat, problems=problems)
    keys = {k for r in (*_log_prob_rows(), *_critic_rows()) for k in (r.mlite.key, *r.mlite.aliases)}
    return keys & set(flat), [f"{p}; verl's default used" for p in problems]


def _verl_version(text: str, by: dict) -> dict:
    """The launcher's verl release and its source; one the kit does not know is dropped, saying why."""
    from ..memory.rl_metrics import verl_release
    from .verl_version import launcher_verl_version

    version, source = launcher_verl_version(text, by)
    if version is not None:
        try:
            verl_release(version)
        except MliteError as e:
            return {"version": None, "source": f"{source}: {e.message}"}
    return {"version": version, "source": source}


def _slurm_notes(res, launch) -> list[str]:
    """ "NAME=V from #SBATCH ... (line N)" for each ``SLURM_*`` value from a header that the launch line reads."""
    used = set().union(*launch.used) if launch.used else set()
    return [v.note(name) for name, v in res.slurm.items() if name in used]


def _config_folder(lw: _LaunchWords, launch, source: str) -> Path | None:
    """The ``--config-path`` folder: absolute, else relative to the entry script's folder (Hydra resolves it from
    the file declaring ``@hydra.main``), else to the launcher's folder (the working directory it is run from)."""
    p = Path(lw.config_path or "").expanduser()
    if p.is_absolute():
        return p if p.is_dir() else None
    if source.startswith("<"):
        return None
    here = Path(source).expanduser().parent
    entry = launch.module
    tries = ([(here / entry).parent / p] if entry.endswith(".py") else []) + [here / p]
    return next((t for t in tries if t.is_dir()), None)


def _config_values(lw: _LaunchWords, launch, source: str) -> tuple[list[ParsedOverride], list[str]]:
    """The values of the config ``--config-path`` / ``--config-name`` name, when it is found beside the launcher
    (:func:`mlite.export.hydra_config.read_config`), and one line saying what was read and one what was not."""
    from .hydra_config import read_config

    if not lw.config_name or lw.config_path is None:
        return [], []
    name = f"--config-path={lw.config_path} --config-name={lw.config_name}"
    if lw.config_path_unresolved:
        need = ", ".join(f"${n}" if not n.startswith("$") else n for n in lw.config_path_unresolved)
        return [], [f"{name}: not read ({need} is not set; pass --env for it); verl's defaults assumed"]
    folder = _config_folder(lw, launch, source)
    if folder is None:
        return [], [f"{name}: not read (no such folder relative to {source}); verl's defaults assumed"]
    rc = read_config(Path(os.path.normpath(folder)), lw.config_name)
    notes = []
    if rc.files:
        notes.append(
            f"read {os.path.normpath(folder)}: {', '.join(rc.files)} (their values count where the command line "
            "is silent)"
        )
    if rc.unread:
        notes.append(f"{name}: could not read {'; '.join(rc.unread)}; verl's defaults assumed for those")
    return rc.values, notes


def _no_launch(source: str, res) -> MliteError:
    """Why a script has no verl launch line, in one line."""
    if res.unfollowed:
        return MliteError(
            f"{source}: no verl launch line found; the script hands over to {res.unfollowed[0]}, which "
            "could not be read (pass --env for the variables of its path, or import that file)"
        )
    if res.unset_commands:
        line, name = res.unset_commands[-1]
        return MliteError(
            f"{source}: no verl launch line found; line {line} runs ${name}, which the script never sets "
            f"(pass --env {name}='torchrun ... -m verl.trainer.sft_trainer' or the command it stands "
            "for)"
        )
    if res.prints and not res.commands:
        said = next((t for t in res.prints if t.strip()), "")
        return MliteError(f"{source}: launches nothing: it only prints" + (f" '{said[:160]}'" if said else ""))
    return MliteError(
        f"{source}: no verl launch line found (expected python3 -m verl.trainer.main_ppo, torchrun ... "
        "-m verl.trainer.sft_trainer, or any python entry point (-m MODULE or FILE.py) whose arguments are verl "
        "Hydra overrides: actor_rollout_ref./data./trainer./model./engine. keys)"
    )


def _is_mesh_key(key: str) -> bool:
    leaf = key.rsplit(".", 1)[-1]
    return (
        key in ("trainer.nnodes", "trainer.n_gpus_per_node")
        or leaf in PARALLEL_KEYS.values()
        or leaf == "pipeline_model_parallel_layout"
        or leaf in SPLIT_KEYS.values()
        or (key.startswith(("engine.", f"{ACTOR}.engine.")) and leaf in _MLITE_SIZES)
    )


_NULLABLE_LEAVES = {k for a in AXES if a.megatron_nullable for k in (a.megatron, a.engine_key)}
"""Mesh key leaves a launcher may set to null (VPP off, ETP inherited), under either spelling."""


def _refuse_unread_mesh(source: str, ovs, consumed: set, unresolved: dict, res) -> None:
    """A mesh or cluster size the reader could not expand, or that is not a number, stops the import (exit 2)
    rather than a silently wrong mesh."""
    for o in ovs:
        if o.key not in consumed or not _is_mesh_key(o.key):
            continue
        names = [n for n, keys in unresolved.items() if o.key in keys]
        if names:
            n = names[0]
            how = (
                f"pass --env {n}=VALUE"
                if not n.startswith("$")
                else "it is not run; pass --env for the variable that holds it"
            )
            raise MliteError(
                f"{source}: {o.key}={o.raw}: could not expand {n if n.startswith('$') else '$' + n} ({how})"
            )
        leaf = o.key.rsplit(".", 1)[-1]
        if leaf == "pipeline_model_parallel_layout" or leaf in SPLIT_KEYS.values():
            continue  # the layout is parsed by the layers rule, the split keys by read_split
        ok = o.value is None and leaf in _NULLABLE_LEAVES
        if not ok and not (isinstance(o.value, int) and not isinstance(o.value, bool) and o.value >= 1):
            raise MliteError(
                f"{source}: {o.key}={o.raw}: not a positive integer; set it (or pass --env for the "
                "variable it comes from)"
            )


def _inherited(by: dict, backend: str, is_sft: bool, p, origins: dict | None = None) -> dict:
    """The mesh sizes the launcher leaves unset, with the value they take and why (``origins``: key -> the config
    file that set it, when not the command line)."""
    from ..mesh import Inherited

    out = {}
    if backend == "megatron":
        root = "engine" if is_sft else f"{ACTOR}.megatron"

        def key(k):
            return f"{root}.{PARALLEL_KEYS[k]}"

        def unset(k):
            return by.get(key(k)) is None

        def how(k):
            if key(k) not in by:
                return f"does not set {PARALLEL_KEYS[k]}"
            f = (origins or {}).get(key(k))
            return f"'s config {f} sets it to null" if f else "sets it to null"

        for a in AXES:  # ETP: null means TP
            if a.megatron_inherits and unset(a.name):
                src = BY_NAME[a.megatron_inherits]
                out[a.name] = Inherited(
                    f"{a.label} inherited from {src.label} = {p.size(src.name)} because the launcher{_sp(how(a.name))} "
                    f"(Megatron-Core: {a.megatron} None means {src.label})",
                    key(a.name),
                )
        if unset("vpp"):
            out["vpp"] = Inherited(
                f"VPP null (no interleaved schedule) because the launcher{_sp(how('vpp'))}", key("vpp")
            )
        if unset("cp"):
            out["cp"] = Inherited(f"CP 1 (Megatron-Core's default) because the launcher{_sp(how('cp'))}", key("cp"))
    elif backend == "mlite":
        root = "engine" if is_sft else f"{ACTOR}.engine"
        for a in AXES:  # ETP: the engine's default None, read as 1
            if a.default is None and by.get(f"{root}.{a.engine_key}") is None:
                out[a.name] = Inherited(
                    f"{a.label} 1 (Megatron Lite's default) because the launcher does not set {root}.{a.engine_key}",
                    f"{root}.{a.engine_key}",
                )
    return out


def _sp(text: str) -> str:
    """``text`` after "the launcher": a space unless it is a possessive (``'s config ...``)."""
    return text if text.startswith("'") else " " + text


def _int(ov: ParsedOverride | None, what: str, warnings: list[str]) -> int | None:
    if ov is None:
        return None
    if isinstance(ov.value, int) and not isinstance(ov.value, bool) and ov.value > 0:
        return ov.value
    warnings.append(f"{ov.key}={ov.raw}: {what} is not a positive integer; not used")
    return None


def _cluster(ovs, torchrun: dict, is_sft: bool) -> tuple[int, int, set, list[str]]:
    by = {o.key: o for o in ovs}
    w: list[str] = []
    nn = _int(by.get("trainer.nnodes"), "the node count", w)
    g = _int(by.get("trainer.n_gpus_per_node"), "the GPUs per node", w)
    if nn is None and str(torchrun.get("nnodes", "")).isdigit():
        nn = int(torchrun["nnodes"])
    if g is None and str(torchrun.get("nproc_per_node", "")).isdigit():
        g = int(torchrun["nproc_per_node"])
    if nn is None:
        nn = 1
        w.append("trainer.nnodes not set: verl's default 1 node")
    if g is None:
        g = 1 if is_sft else 8
        w.append(f"trainer.n_gpus_per_node not set: verl's default {g}")
    return nn, g, {"trainer.nnodes", "trainer.n_gpus_per_node"}, w


def rl_estimate(imported: ImportedLauncher, training, config: str | None = None) -> dict | None:
    """The per-phase RL estimate (:func:`mlite.memory.rl.rl_estimate`) of a GRPO/PPO launcher: its training estimate
    ``training`` (model, mesh, options) with the rollout knobs the launcher sets (``gpu_memory_utilization``, rollout
    TP, ``n``, lengths, offload and sleep settings; verl's defaults for the others). None for SFT launchers."""
    if imported.target.endswith("-sft"):
        return None
    from ..memory.rl import rl_estimate as phases
    from ..memory.rl_options import RolloutOptions
    from ..models import from_hf_config

    _, ref = imported.plan(config)
    kw = dict(imported.rollout)
    if imported.verl_version.get("version"):
        kw["verl_version"] = imported.verl_version["version"]
    rollout = RolloutOptions(**kw)
    from ..memory.rl_fsdp import FsdpOptions

    return phases(
        from_hf_config(ref),
        training.plan,
        training.options,
        rollout,
        FsdpOptions(**imported.log_prob),
        imported.critic_options(),
    ).to_dict()
