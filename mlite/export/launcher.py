"""Shared shape of the three verl launchers: header, knobs, the mesh check (runtime rule), environment, Hydra
override arrays, and the launch line with ``DRY_RUN=1`` (prints the resolved command, one line, and exits).

The target modules (:mod:`.verl_sft`, :mod:`.verl_grpo_mlite`, :mod:`.verl_grpo_megatron`) fill a :class:`Launcher`;
:func:`render` turns it into bash that passes ``bash -n`` and ``shellcheck`` with no findings.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..mesh.axes import AXES, AXIS_NAMES, DENSE_DIMS, DERIVED, EXPERT_DIMS, model_parallel, product_label
from .overrides import Override, shell_word


@dataclass(kw_only=True)
class Knob:
    """A variable at the top of a launcher: ``NAME=${NAME:-default}`` (the environment wins)."""

    name: str
    """Variable name (verl's example launchers' names where they have one)."""
    default: str
    """Default value (a literal; quoted for bash by :func:`shell_word`)."""
    comment: str = ""
    """Trailing explanation."""
    raw: bool = False
    """``default`` is bash text (e.g. ``${SLURM_NODEID:-0}``), written without quoting."""


@dataclass(kw_only=True)
class Launcher:
    """One launcher script, before rendering."""

    filename: str
    """File name, e.g. ``run_verl_mlite_grpo.sh``."""
    header: list[str]
    """Comment lines under the shebang (without ``# ``)."""
    knob_groups: list[tuple[str, list[Knob]]]
    """Titled groups of knobs."""
    derived: list[str] = field(default_factory=list)
    """Bash lines after the knobs (mesh check, log path)."""
    env: list[tuple[str, str]] = field(default_factory=list)
    """``export NAME="${NAME:-value}"`` lines."""
    sections: list[tuple[str, list[Override]]] = field(default_factory=list)
    """Bash arrays of Hydra overrides, in order."""
    command: list[str] = field(default_factory=list)
    """Words before the overrides, e.g. ``python3 -m verl.trainer.main_ppo`` (bash text, may expand variables)."""


def mesh_knobs(plan, mp, *, megatron_nulls: bool = False) -> list[Knob]:
    """NNODES, NDEVICES_PER_NODE and one knob per axis (TP, PP, VPP, CP, EP, ETP) from a resolved plan;
    ``megatron_nulls`` writes null where Megatron-Core wants it for 1 (:attr:`~mlite.mesh.axes.Axis.megatron_null_note`)."""
    p = mp.parallel
    knobs = [
        Knob(name="NNODES", default=str(plan.nodes), comment="trainer.nnodes"),
        Knob(name="NDEVICES_PER_NODE", default=str(plan.gpus_per_node), comment="trainer.n_gpus_per_node"),
    ]
    for a in AXES:
        v = p.size(a.name)
        if megatron_nulls and a.megatron_null_note and v == 1:
            knobs.append(Knob(name=a.label, default="null", comment=a.megatron_null_note))
        else:
            knobs.append(Knob(name=a.label, default=str(v)))
    return knobs


def path_knobs(plan) -> list[Knob]:
    """MODEL_PATH, TRAIN_FILES, VAL_FILES, LOG_DIR, PROJECT_NAME, EXPERIMENT_NAME."""
    return [
        Knob(name="MODEL_PATH", default=plan.checkpoint_path, comment="Hugging Face checkpoint directory"),
        Knob(name="TRAIN_FILES", default=plan.train_files),
        Knob(name="VAL_FILES", default=plan.val_files),
        Knob(name="LOG_DIR", default=plan.log_dir, comment="Slurm .out files and verl's JSONL metrics"),
        Knob(name="PROJECT_NAME", default=plan.project_name),
        Knob(name="EXPERIMENT_NAME", default=plan.name),
    ]


def mesh_check() -> list[str]:
    """Bash that recomputes DP and EDP with the runtime's rule and refuses a mesh that does not divide the GPUs."""
    lines = ["NGPU=$((NNODES * NDEVICES_PER_NODE))"]
    worlds = (("dense", DENSE_DIMS), ("expert", EXPERT_DIMS))
    for world, dims in worlds:
        mp = product_label(model_parallel(dims), " * ")
        lines += [
            f"if (( NGPU % ({mp}) != 0 )); then",
            f'    echo "Invalid mesh: NGPU=${{NGPU}} is not divisible by {product_label(model_parallel(dims))}=$(({mp})) '
            f'({world} ranks = {product_label(dims)})" >&2',
            "    exit 1",
            "fi",
        ]
    for _, dims in worlds:
        derived = next(d for d in dims if d in DERIVED)
        lines.append(f"{derived.upper()}=$((NGPU / ({product_label(model_parallel(dims), ' * ')})))")
    sizes = " ".join(f"{n}=${{{product_label((n,))}}}" for n in AXIS_NAMES + DERIVED)
    lines.append(f'echo "MLITE_MESH ngpu=${{NGPU}} {sizes}" >&2')
    return lines


def log_path_lines() -> list[str]:
    """An absolute ``LOG_DIR`` and ``VERL_FILE_LOGGER_PATH`` (verl's file logger: one JSON object per step)."""
    return [
        'if [[ "${LOG_DIR}" != /* ]]; then LOG_DIR="${PWD}/${LOG_DIR}"; fi',
        'export VERL_FILE_LOGGER_PATH="${VERL_FILE_LOGGER_PATH:-${LOG_DIR}/${EXPERIMENT_NAME}.jsonl}"',
    ]


COMMON_ENV = [
    ("CUDA_DEVICE_MAX_CONNECTIONS", "1"),
    ("TORCH_NCCL_AVOID_RECORD_STREAMS", "1"),
    ("NCCL_DEBUG", "WARN"),
    ("PYTHONUNBUFFERED", "1"),
]
"""Environment every launcher exports (verl's Megatron / mlite examples; a Slurm job's values win)."""


def launch_env(optimizer: str, pairs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """``pairs`` without the variables the optimizer backend's launch-environment rules refuse
    (:attr:`mlite.options.optimizers.Backend.env_refuses`: mfsdp refuses ``CUDA_DEVICE_MAX_CONNECTIONS=1``, so its
    launchers do not export it)."""
    from ..errors import MliteError
    from ..options.optimizers import check_env

    out = []
    for name, value in pairs:
        try:
            check_env(optimizer, {name: value})
        except MliteError:
            continue
        out.append((name, value))
    return out


def render(lc: Launcher) -> str:
    """The launcher as bash text."""
    out = ["#!/usr/bin/env bash"]
    out += [f"# {h}".rstrip() for h in lc.header]
    out += ["", "set -euo pipefail", ""]
    for title, knobs in lc.knob_groups:
        out.append(f"########################### {title} ###########################")
        for k in knobs:
            line = f"{k.name}=${{{k.name}:-{k.default if k.raw else shell_word(k.default)}}}"
            out.append(line + (f"  # {k.comment}" if k.comment else ""))
        out.append("")
    if lc.derived:
        out += lc.derived + [""]
    if lc.env:
        out.append("########################### environment ###########################")
        out += [f'export {n}="${{{n}:-{v}}}"' for n, v in lc.env]
        out.append("")
    out.append("########################### Hydra overrides ###########################")
    for name, ovs in lc.sections:
        out.append(f"{name}=(")
        out += [f"    {o.render()}" for o in ovs]
        out += [")", ""]
    out.append("########################### launch ###########################")
    cmd = ["CMD=("] + [f"    {w}" for w in lc.command]
    cmd += [f'    "${{{name}[@]}}"' for name, _ in lc.sections]
    cmd += ['    "$@"', ")"]
    out += cmd
    out += [
        'if [[ "${DRY_RUN:-0}" == 1 ]]; then',
        "    printf '%q ' \"${CMD[@]}\"",
        "    echo",
        "    exit 0",
        "fi",
        'mkdir -p "$(dirname "${VERL_FILE_LOGGER_PATH}")"',
        'exec "${CMD[@]}"',
        "",
    ]
    return "\n".join(out)


def mtp_overrides(prefix: str, spec, train: bool | None = None) -> list[Override]:
    """Train the model's MTP layers when it has some and the plan trains them (``train``:
    :attr:`~mlite.export.plan.ExportPlan.train_mtp`, None = yes): the planner places them in the last pipeline stage,
    and verl leaves them off unless ``<model>.mtp.enable`` and ``enable_train`` are set
    (``trainer/config/model/hf_model.yaml``). ``train=False`` (an imported launcher that does not train MTP) writes
    neither key: verl's default, off, as the launcher had it."""
    if not spec.num_mtp_layers or train is False:
        return []
    return [Override.lit(f"{prefix}.mtp.enable", True), Override.lit(f"{prefix}.mtp.enable_train", True)]
