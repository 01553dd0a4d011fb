"""The mesh axes are one list (:data:`mlite.mesh.axes.AXES`): ParallelConfig's fields, the flags of ``mesh`` /
``memory`` / ``export``, the planner's controls, the verl Megatron keys and the Megatron Lite engine keys that the
export writes and ``import-launcher`` reads, the rank-group kinds and the table columns all follow it."""

from __future__ import annotations

import dataclasses
import re

import pytest

from mlite.cli import build_parser
from mlite.errors import MliteError
from mlite.export import ExportPlan, import_launcher
from mlite.export.writer import render
from mlite.mesh import GROUP_KINDS, ParallelConfig, resolve
from mlite.mesh.axes import AXES, AXIS_NAMES, BY_NAME, DENSE_DIMS, DERIVED, EXPERT_DIMS, MEGATRON_KEYS
from mlite.mesh.ranks import PRINTED_KINDS
from mlite.models import from_hf_config

MODEL = "Qwen3-30B-A3B"
MESHES = (  # every axis off its default; together they tell any two axes apart
    dict(tp=4, pp=2, vpp=3, cp=8, ep=16, etp=8),
    dict(tp=2, pp=4, vpp=3, cp=1, ep=16, etp=4),
)
NGPU = 256


def test_parallel_config_fields_are_the_axes():
    assert tuple(f.name for f in dataclasses.fields(ParallelConfig)) == (*AXIS_NAMES, "pp_layout")
    assert ParallelConfig(etp=None).sizes() == {a.name: 1 for a in AXES}
    assert set(BY_NAME) == set(MEGATRON_KEYS) == set(AXIS_NAMES)
    for a in AXES:
        assert getattr(ParallelConfig(), a.name) == a.default
        with pytest.raises(MliteError, match=rf"^{a.name} must be a positive integer"):
            ParallelConfig(**{a.name: 0})


def _subparser(name):
    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return sub.choices[name]


@pytest.mark.parametrize("command", ["mesh", "memory", "export"])
def test_mesh_flags_of_each_command_are_the_axes(command):
    p = _subparser(command)
    group = next(g for g in p._action_groups if g.title == "mesh")
    axis_actions = [a for a in group._group_actions if a.dest in AXIS_NAMES]
    assert [a.dest for a in axis_actions] == list(AXIS_NAMES)
    for action, axis in zip(axis_actions, AXES, strict=True):
        assert action.option_strings == [axis.flag]
        assert action.help == axis.help
        assert action.default == axis.default
    args = p.parse_args(
        ["x"]
        + (["--ngpu", "8"] if command != "export" else ["--target", "verl-mlite-sft", "--nodes", "1", "--out", "o"])
        + [s for a in AXES for s in (a.flag, "2")]
    )
    from mlite.cli.mesh import parallel_from_args

    assert parallel_from_args(args).sizes() == {a.name: 2 for a in AXES}


def test_the_planner_controls_are_the_axes():
    from widgets.planner import MeshPlanner

    planner = MeshPlanner(MODEL, ngpu=NGPU, **MESHES[0])
    names = [k for k in planner.controls if k in AXIS_NAMES]
    assert names == list(AXIS_NAMES)
    assert {k: planner.controls[k].value for k in names} == MESHES[0]
    assert [planner.controls[k].description for k in names] == list(AXIS_NAMES)
    assert planner.parallel().sizes() == MESHES[0]


def test_the_export_view_controls_are_the_axes():
    from widgets.export_view import ExportView

    view = ExportView()
    assert list(view._mesh) == list(AXIS_NAMES)
    assert [w.description for w in view._mesh.values()] == [a.label for a in AXES]


@pytest.mark.parametrize("mesh", MESHES, ids=lambda m: "-".join(map(str, m.values())))
@pytest.mark.parametrize(
    "target, key",
    [
        ("verl-megatron-grpo", lambda a: f"actor_rollout_ref.actor.megatron.{a.megatron}"),
        ("verl-mlite-grpo", lambda a: f"actor_rollout_ref.actor.engine.{a.engine_key}"),
        ("verl-mlite-sft", lambda a: f"engine.{a.engine_key}"),
    ],
)
def test_export_writes_and_import_reads_the_axis_keys(mesh, target, key):
    plan = ExportPlan(model=MODEL, target=target, parallel=ParallelConfig(**mesh), nodes=NGPU // 8)
    res = render(plan)
    text = res.files[res.launcher]
    for a in AXES:  # one knob per axis, with the plan's size
        assert re.search(rf"^{a.label}=\$\{{{a.label}:-{mesh[a.name]}\}}$", text, re.M), a.name
    labels = "|".join(a.label for a in AXES)
    written = dict(re.findall(rf'^\s*"([\w.]+)=\$\{{({labels})\}}"$', text, re.M))
    assert written == {key(a): a.label for a in AXES}  # each axis's key takes its knob, no other key does
    imp = import_launcher("<text>", text=text)
    assert imp.parallel.sizes() == mesh
    assert {k: imp.planner_values()[k] for k in AXIS_NAMES} == mesh
    doc = imp.to_dict(MODEL)
    assert [k for k in doc if k in AXIS_NAMES] == list(AXIS_NAMES)
    assert {k: doc[k] for k in AXIS_NAMES} == mesh


def test_null_megatron_keys_follow_the_axis_entries():
    """ETP null inherits TP (Megatron-Core), VPP null is off; the engine's null ETP is mlite's 1."""
    base = (
        "python3 -m verl.trainer.main_ppo --config-name=ppo_megatron_trainer trainer.nnodes=4 "
        "trainer.n_gpus_per_node=8 "
    )
    nulls = " ".join(f"actor_rollout_ref.actor.megatron.{a.megatron}=null" for a in AXES if a.megatron_nullable)
    imp = import_launcher(
        "<text>", text=base + "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=4 " + nulls
    )
    for a in AXES:
        if a.megatron_inherits:
            assert imp.parallel.size(a.name) == imp.parallel.size(a.megatron_inherits) == 4
            assert a.name in imp.inherited
        elif a.megatron_nullable:
            assert imp.parallel.size(a.name) == 1


def test_mesh_json_and_list_columns_are_the_axes():
    spec = from_hf_config(MODEL)
    doc = resolve(spec, NGPU, ParallelConfig(**MESHES[0])).to_dict()
    keys = list(doc)
    i = keys.index(AXIS_NAMES[0])
    assert keys[i : i + len(AXIS_NAMES) + len(DERIVED)] == [*AXIS_NAMES, *DERIVED]
    from widgets.mesh_table import MESH_COLUMNS

    assert [c.key for c in MESH_COLUMNS] == [*AXIS_NAMES, *DERIVED]


def test_rank_dims_and_group_kinds_cover_the_world_axes():
    world = {a.name for a in AXES if a.world}
    assert set(DENSE_DIMS) - {"dp"} == {a.name for a in AXES if a.dense}
    assert set(EXPERT_DIMS) - {"edp"} == {a.name for a in AXES if a.expert}
    assert world | set(DERIVED) <= set(GROUP_KINDS) & set(PRINTED_KINDS)
    assert not {a.name for a in AXES if not a.world} & set(GROUP_KINDS)  # VPP: no world factor, no group
    from widgets.gpu_grid import KINDS, LIST_KINDS, OUTLINE

    assert LIST_KINDS == PRINTED_KINDS
    assert set(KINDS) == set(OUTLINE) == (world | set(DERIVED)) - {"pp"}


def test_lite_runtime_refuses_exactly_the_axes_it_does_not_run():
    from mlite.runtime.parallel.state import check_mesh

    for a in AXES:
        p = ParallelConfig(**{a.name: 2})
        if a.lite_runs:
            check_mesh(p)
        else:
            with pytest.raises(MliteError, match=rf"^parallel\.{a.name}=2: {re.escape(a.lite_refusal)}"):
                check_mesh(p)
