"""Export a plan to the engines that run it: verl launchers (SFT on the mlite engine, GRPO with the mlite actor,
GRPO on verl's Megatron backend) and a Slurm job that starts a Ray cluster; read existing launchers back.

``write(ExportPlan(model=..., target=..., parallel=..., options=..., nodes=..., gpus_per_node=...), out_dir)``
-> :class:`ExportResult`; ``import_launcher(path_or_text)`` -> :class:`ImportedLauncher` (the mesh and options a
verl command line sets). ``mlite.export.validate`` composes launchers against verl's packaged Hydra config.
"""

from .importer import ImportedLauncher, import_launcher
from .plan import DEFAULT_LOG_DIR, TARGETS, ExportPlan
from .writer import ExportResult, InvalidMesh, render, write

__all__ = [
    "DEFAULT_LOG_DIR",
    "TARGETS",
    "ExportPlan",
    "ExportResult",
    "ImportedLauncher",
    "InvalidMesh",
    "import_launcher",
    "render",
    "write",
]
