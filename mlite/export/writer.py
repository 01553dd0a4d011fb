"""``render(plan)`` -> the files (launcher, sbatch job, plan.json) as text; ``write(plan, out_dir)`` writes them."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..errors import MliteError
from ..models.quantized import check_rollout_tp
from ..options.rules import precision_mesh
from . import launcher as L
from . import sbatch, verl_grpo_megatron, verl_grpo_mlite, verl_lite_sft, verl_sft

BUILDERS = {
    "verl-mlite-sft": verl_sft.build_launcher,
    "verl-mlite-grpo": verl_grpo_mlite.build_launcher,
    "verl-megatron-grpo": verl_grpo_megatron.build_launcher,
    "verl-lite-sft": verl_lite_sft.build_launcher,
}
"""Target -> launcher builder ``(plan, spec, mesh_plan) -> (Launcher, notes)``."""


class InvalidMesh(MliteError):
    """The plan's mesh breaks a rule; ``.mesh`` holds the planner's verdict (``mlite export``: bad input, exit 2)."""

    def __init__(self, mesh):
        self.mesh = mesh
        super().__init__("invalid mesh: " + "; ".join(f.message for f in mesh.errors))


@dataclass(kw_only=True)
class ExportResult:
    """What an export produced."""

    files: dict[str, str]
    """File name -> content, in writing order (launcher, sbatch job, plan.json)."""
    mesh: dict
    """The resolved mesh as ``mlite mesh --json`` prints it."""
    notes: list[str] = field(default_factory=list)
    """What the target could not express (also in the launcher header)."""
    paths: list[str] = field(default_factory=list)
    """Written paths (after :func:`write`)."""

    @property
    def launcher(self) -> str:
        return next(iter(self.files))

    @property
    def job(self) -> str:
        return list(self.files)[1]

    def to_dict(self) -> dict:
        return {
            "files": self.paths or list(self.files),
            "launcher": self.launcher,
            "sbatch": self.job,
            "mesh": self.mesh,
            "notes": self.notes,
        }


def render(plan) -> ExportResult:
    """The launcher, the sbatch job and ``plan.json`` for ``plan``; raises :class:`InvalidMesh` for a bad mesh."""
    spec, mp = plan.resolve()
    if not mp.valid:
        raise InvalidMesh(mp)
    precision_mesh(plan.options, mp.parallel)  # the precision profile's validated topology (cp, pp)
    if not plan.is_sft:  # the rollout TP keeps whole FP8 blocks (and DeepSeek-V4's o_groups): mlite.models.quantized
        r = plan.rollout_options
        check_rollout_tp(
            spec, r.tensor_model_parallel_size, r.weight_block_size, expert_parallel=r.expert_parallel_size > 1
        )
    lc, notes = BUILDERS[plan.target](plan, spec, mp)
    files = {lc.filename: L.render(lc), sbatch.filename(plan.target): sbatch.render(plan, spec, mp, lc)}
    doc = {
        "model": plan.model,
        "target": plan.target,
        "nodes": plan.nodes,
        "gpus_per_node": plan.gpus_per_node,
        "ngpu": plan.ngpu,
        "mesh": mp.to_dict(),
        "options": _jsonable(asdict(plan.options)),
        "launcher": lc.filename,
        "sbatch": sbatch.filename(plan.target),
        "notes": notes,
        "experiment_name": plan.name,
        "log_dir": plan.log_dir,
        "train_mtp": plan.train_mtp,
    }
    if not plan.is_sft:
        doc["rollout"] = _jsonable(asdict(plan.rollout_options))
    files["plan.json"] = json.dumps(doc, indent=2) + "\n"
    return ExportResult(files=files, mesh=mp.to_dict(), notes=notes)


def write(plan, out_dir: str | os.PathLike) -> ExportResult:
    """Render and write the files into ``out_dir`` (created); launchers and the job are made executable."""
    res = render(plan)
    out = Path(out_dir).expanduser()
    if out.exists() and not out.is_dir():
        raise MliteError(f"--out {out}: exists and is not a folder; give a folder to write the files into")
    try:
        out.mkdir(parents=True, exist_ok=True)
        for name, text in res.files.items():
            p = out / name
            p.write_text(text, encoding="utf-8")
            if name.endswith((".sh", ".sbatch")):
                p.chmod(0o755)
            res.paths.append(str(p))
    except OSError as e:
        raise MliteError(f"--out {out}: cannot write ({e.strerror}); pick a writable folder") from None
    return res


def _jsonable(d):
    if isinstance(d, dict):
        return {k: _jsonable(v) for k, v in d.items()}
    if isinstance(d, tuple):
        return list(d)
    return d
