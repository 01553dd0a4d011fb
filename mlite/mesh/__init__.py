"""Mesh planner: mlite's rank layout, validity with reasons, enumeration and ranking of meshes.

``resolve(spec, ngpu, ParallelConfig(tp=.., pp=.., ...))`` -> :class:`MeshPlan` (the findings of the rules in
:data:`RULES`, each a small function of a :class:`MeshContext`) (DP, EDP, stages, errors with the
rule, the numbers and the nearest valid values, warnings, rank groups); ``enumerate_meshes(spec, ngpu)`` -> every
valid mesh, best first; ``build_device_mesh(...)`` -> torch DeviceMeshes for runs on one node.
"""

from .checks import RULES, Inherited, MeshContext, run_rules
from .choices import field_options, mesh_command, mesh_key, planner_rows
from .config import DEFAULT_GPUS_PER_NODE, DEFAULT_SEQ_LEN, ParallelConfig
from .device_mesh import DeviceMeshes, build_device_mesh
from .enumerate import RankedMesh, enumerate_meshes, mesh_score
from .layout import SPLIT_KEYS, PipelineSplit, Stage, auto_layout, even_layout, layout_text, parse_layout, split_layout
from .plan import MeshPlan, resolve
from .ranks import GROUP_KINDS, RankLayout
from .rules import Finding, divisors, fix_label, pad_vocab

__all__ = [
    "DEFAULT_GPUS_PER_NODE",
    "DEFAULT_SEQ_LEN",
    "GROUP_KINDS",
    "RULES",
    "SPLIT_KEYS",
    "DeviceMeshes",
    "Finding",
    "Inherited",
    "MeshContext",
    "MeshPlan",
    "ParallelConfig",
    "PipelineSplit",
    "RankLayout",
    "RankedMesh",
    "Stage",
    "auto_layout",
    "build_device_mesh",
    "divisors",
    "enumerate_meshes",
    "even_layout",
    "field_options",
    "fix_label",
    "layout_text",
    "mesh_command",
    "mesh_key",
    "mesh_score",
    "pad_vocab",
    "parse_layout",
    "planner_rows",
    "resolve",
    "run_rules",
    "split_layout",
]
