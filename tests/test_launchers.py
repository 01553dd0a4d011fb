"""verl's own Megatron and Megatron Lite example launchers through ``mlite import-launcher``.

The launchers are verbatim copies (tests/data/launchers/verl/, provenance table in its README.md). Each one imports
(exit 0, or 1 for a mesh Megatron-Core refuses) with the mesh written below, read by eye from the script's defaults
(gpu branches of ``case "${DEVICE}"``, no environment), or is refused with exit 2 and one line naming the construct;
none crashes. The verdicts are held against Megatron-Core 0.16.1's own code on CPU:
``parallel_state.initialize_model_parallel`` run on a fake world (``torch.distributed`` answers world size and rank,
groups are placeholders; its divisibility checks and rank generators run as written, with ETP None where the launcher
leaves it unset) and ``TransformerConfig.__post_init__`` (heads, query groups, EP without experts) for the models that
have a config in data/models/.
"""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path
from unittest import mock

import pytest
from conftest import REPO

from mlite.cli import main
from mlite.export import import_launcher
from mlite.models import from_hf_config

VERL = REPO / "tests" / "data" / "launchers" / "verl"

# key: <ref>/<path under examples/>; value: ((ngpu, tp, pp, vpp, cp, ep, etp), valid) or the exit-2 line's words.
# ETP of Megatron launchers that leave expert_tensor_parallel_size unset is TP (Megatron-Core's default), which is
# why the dense Qwen3-8B / Qwen2.5 / MiMo rows show etp = tp and stay valid, and why Qwen3-235B (TP4 EP4 PP8 on 64:
# 4*4*8 = 128) and Qwen3-30B (TP4 EP2 PP2 on 8: 16) are invalid. Qwen3-30B's VPP 2 comes from
# `[ "${actor_pp}" -gt 1 ] && actor_vpp_override=${actor_vpp} || ...`. Kimi/GLM (Megatron Lite): NNODES 32 x 8.
EXPECTED = {
    "main/ascend_extras/grpo_trainer/run_qwen3_235b_256k_megatron.sh": ((256, 2, 16, 1, 8, 16, 1), True),
    "main/ascend_extras/grpo_trainer/run_qwen3_30b_a3b_megatron.sh": ((16, 4, 1, 1, 1, 4, 4), True),
    "main/ascend_extras/grpo_trainer/run_qwen3_5_122b_a10b_32k_megatron.sh": ((64, 2, 4, 1, 4, 16, 1), True),
    "main/dppo_trainer/run_qwen3_30b_a3b_megatron.sh": ((8, 2, 1, 1, 1, 8, 1), True),
    "main/gpg_trainer/run_qwen3_8b_megatron.sh": ((8, 2, 2, 1, 1, 1, 2), True),
    "main/grpo_trainer/run_deepseek_v3_671b_megatron.sh": ((96, 8, 12, 1, 1, 8, 1), True),
    "main/grpo_trainer/run_deepseek_v4_flash_megatron.sh": ((64, 1, 8, 1, 1, 8, 1), True),
    "main/grpo_trainer/run_deepseek_v4_megatron_lite.sh": "launches nothing: it only prints 'This e",
    "main/grpo_trainer/run_hy_v3_megatron.sh": ((128, 1, 16, 1, 8, 8, 1), True),
    "main/grpo_trainer/run_kimi_k2_6_glm5_1_megatron_lite.sh": ((256, 1, 8, 1, 8, 8, 1), True),
    "main/grpo_trainer/run_moonlight_16b_a3b_megatron.sh": ((24, 4, 3, 1, 1, 4, 1), True),
    "main/grpo_trainer/run_nemotron_nano_v3_30b_a3b_megatron.sh": ((8, 8, 1, 1, 1, 8, 1), True),
    "main/grpo_trainer/run_qwen2-7b_math_megatron_fsdp.sh": ((8, 4, 1, 1, 1, 1, 4), True),
    "main/grpo_trainer/run_qwen2_5_vl_7b_megatron.sh": ((8, 2, 2, 1, 1, 1, 2), True),
    "main/grpo_trainer/run_qwen3_235b_a22b_megatron.sh": ((64, 4, 8, 1, 1, 4, 4), False),
    "main/grpo_trainer/run_qwen3_30b_a3b_megatron.sh": ((8, 4, 2, 2, 1, 2, 4), False),
    "main/grpo_trainer/run_qwen3_5_122b_a10b_megatron.sh": ((32, 2, 2, 1, 1, 8, 1), True),
    "main/grpo_trainer/run_qwen3_5_35b_megatron.sh": ((8, 2, 1, 1, 1, 8, 1), True),
    "main/grpo_trainer/run_qwen3_5_35b_megatron_lite.sh": ((8, 1, 1, 1, 8, 8, 1), True),
    "main/grpo_trainer/run_qwen3_5_397b_megatron.sh": ((128, 2, 2, 1, 1, 64, 1), True),
    "main/grpo_trainer/run_qwen3_8b_megatron.sh": ((8, 2, 2, 1, 1, 1, 2), True),
    "main/grpo_trainer/run_qwen3_vl_235b_a22b_megatron.sh": ((64, 4, 8, 1, 2, 8, 1), True),
    "main/grpo_trainer/run_qwen3_vl_30b_a3b_megatron.sh": ((8, 2, 1, 1, 2, 8, 1), True),
    "main/grpo_trainer/run_qwen3_vl_8b_megatron.sh": ((8, 2, 2, 1, 1, 1, 2), True),
    "main/gspo_trainer/run_qwen3_30b_a3b_megatron.sh": ((8, 2, 1, 1, 1, 8, 1), True),
    "main/mtp_trainer/run_mimo_7b_mtp_fully_async_megatron_multinode.sh": ((4, 2, 1, 1, 1, 1, 2), True),
    "main/mtp_trainer/run_mimo_7b_mtp_megatron.sh": ((8, 2, 2, 1, 2, 1, 2), True),
    "main/mtp_trainer/run_mimo_7b_mtp_rl_vllm_sgl_megatron.sh": ((8, 2, 1, 1, 1, 1, 2), True),
    "main/on_policy_distillation_trainer/run_qwen3_8b_megatron.sh": ((8, 2, 1, 1, 1, 1, 2), True),
    "main/ppo_trainer/run_qwen3_8b_megatron.sh": ((8, 2, 2, 1, 1, 1, 2), True),
    "main/router_replay/run_qwen3_30b_a3b_megatron.sh": ((48, 1, 6, 1, 1, 8, 1), True),
    "main/sft/gsm8k/run_deepseek_v4_megatron_lite.sh": ((128, 1, 4, 1, 4, 8, 1), True),
    "main/sft/gsm8k/run_mimo_7b_mtp_megatron.sh": "no verl launch line found; line 77 runs",
    "main/sft/gsm8k/run_nemotron_nano_v3_megatron.sh": ((8, 8, 1, 1, 1, 8, 1), True),
    "main/sft/gsm8k/run_qwen3_5_397b_a17b_megatron.sh": ((128, 2, 4, 1, 1, 32, 1), True),
    "main/sft/gsm8k/run_qwen_megatron_fsdp.sh": ((8, 4, 1, 1, 1, 1, 4), True),
    "main/tuning/lora/run_qwen3_30b_a3b_megatron.sh": ((8, 2, 2, 1, 2, 4, 1), True),
    "main/tuning/scaling/run_qwen2_5_32b_megatron.sh": ((8, 8, 1, 1, 1, 1, 8), True),
    "v0.9.0/dppo_trainer/run_qwen3_30b_a3b_megatron.sh": ((8, 2, 1, 1, 1, 8, 1), True),
    "v0.9.0/gpg_trainer/run_qwen3_8b_megatron.sh": ((8, 2, 2, 1, 1, 1, 2), True),
    "v0.9.0/grpo_trainer/run_deepseek_v3_671b_megatron.sh": ((96, 8, 12, 1, 1, 8, 1), True),
    "v0.9.0/grpo_trainer/run_deepseek_v4_flash_megatron.sh": ((64, 1, 8, 1, 1, 8, 1), True),
    "v0.9.0/grpo_trainer/run_moonlight_16b_a3b_megatron.sh": ((24, 4, 3, 1, 1, 4, 1), True),
    "v0.9.0/grpo_trainer/run_nemotron_nano_v3_30b_a3b_megatron.sh": ((8, 8, 1, 1, 1, 8, 1), True),
    "v0.9.0/grpo_trainer/run_qwen2-7b_math_megatron_fsdp.sh": ((8, 4, 1, 1, 1, 1, 4), True),
    "v0.9.0/grpo_trainer/run_qwen2_5_vl_7b_megatron.sh": ((8, 2, 2, 1, 1, 1, 2), True),
    "v0.9.0/grpo_trainer/run_qwen3_235b_a22b_megatron.sh": ((64, 4, 8, 1, 1, 4, 4), False),
    "v0.9.0/grpo_trainer/run_qwen3_30b_a3b_megatron.sh": ((8, 4, 2, 2, 1, 2, 4), False),
    "v0.9.0/grpo_trainer/run_qwen3_5_122b_a10b_megatron.sh": ((32, 2, 2, 1, 1, 8, 1), True),
    "v0.9.0/grpo_trainer/run_qwen3_5_35b_megatron.sh": ((8, 2, 1, 1, 1, 8, 1), True),
    "v0.9.0/grpo_trainer/run_qwen3_5_397b_megatron.sh": ((128, 2, 2, 1, 1, 64, 1), True),
    "v0.9.0/grpo_trainer/run_qwen3_8b_megatron.sh": ((8, 2, 2, 1, 1, 1, 2), True),
    "v0.9.0/grpo_trainer/run_qwen3_vl_235b_a22b_megatron.sh": ((64, 4, 8, 1, 2, 8, 1), True),
    "v0.9.0/grpo_trainer/run_qwen3_vl_30b_a3b_megatron.sh": ((8, 2, 1, 1, 2, 8, 1), True),
    "v0.9.0/grpo_trainer/run_qwen3_vl_8b_megatron.sh": ((8, 2, 2, 1, 1, 1, 2), True),
    "v0.9.0/gspo_trainer/run_qwen3_30b_a3b_megatron.sh": ((8, 2, 1, 1, 1, 8, 1), True),
    "v0.9.0/mtp_trainer/run_mimo_7b_mtp_fully_async_megatron_multinode.sh": ((4, 2, 1, 1, 1, 1, 2), True),
    "v0.9.0/mtp_trainer/run_mimo_7b_mtp_megatron.sh": ((8, 2, 2, 1, 2, 1, 2), True),
    "v0.9.0/mtp_trainer/run_mimo_7b_mtp_rl_vllm_sgl_megatron.sh": ((8, 2, 1, 1, 1, 1, 2), True),
    "v0.9.0/on_policy_distillation_trainer/run_qwen3_8b_megatron.sh": ((8, 2, 1, 1, 1, 1, 2), True),
    "v0.9.0/ppo_trainer/run_qwen3_8b_megatron.sh": ((8, 2, 2, 1, 1, 1, 2), True),
    "v0.9.0/router_replay/run_qwen3_30b_a3b_megatron.sh": ((48, 1, 6, 1, 1, 8, 1), True),
    "v0.9.0/tuning/lora/run_qwen3_30b_a3b_megatron.sh": ((8, 2, 2, 1, 2, 4, 1), True),
    "v0.9.0/tuning/scaling/run_qwen2_5_32b_megatron.sh": ((8, 8, 1, 1, 1, 1, 8), True),
}


def _files() -> list[str]:
    return sorted(str(p.relative_to(VERL)).replace("/examples/", "/", 1) for p in VERL.rglob("*.sh"))


def _path(key: str) -> Path:
    ref, rest = key.split("/", 1)
    return VERL / ref / "examples" / rest


def _cli(capsys, *args) -> tuple[int, str, str]:
    rc = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return rc, out, err


def test_every_copied_launcher_has_an_expectation():
    assert _files() == sorted(EXPECTED)
    assert len(EXPECTED) == 64  # 38 on main + 26 of v0.9.0 that differ from main (README.md)


@pytest.mark.parametrize("key", sorted(EXPECTED))
def test_launcher_imports_or_names_the_construct(key, capsys):
    want = EXPECTED[key]
    rc, out, err = _cli(capsys, "import-launcher", _path(key), "--json")
    if isinstance(want, str):
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert rc == 2 and len(lines) == 1 and want in lines[0], (rc, err)
        return
    mesh, valid = want
    doc = json.loads(out)
    assert tuple(doc[k] for k in ("ngpu", "tp", "pp", "vpp", "cp", "ep", "etp")) == mesh
    assert doc["valid"] is valid and rc == (0 if valid else 1), doc["errors"]
    assert not [w for w in doc["warnings"] if "not a positive integer" in w]  # no size silently replaced by 1


# ------------------------------------------------------------------------------------------ Megatron-Core oracle
def _mcore_world(ngpu, tp, pp, vpp, cp, ep, etp) -> str | None:
    """The error ``initialize_model_parallel`` raises for this mesh on ``ngpu`` ranks, or None."""
    import torch.distributed as dist
    from megatron.core import parallel_state as ps

    placeholder = mock.Mock(side_effect=lambda *a, **k: object())
    with (
        mock.patch.object(dist, "is_initialized", return_value=True),
        mock.patch.object(dist, "get_world_size", return_value=ngpu),
        mock.patch.object(dist, "get_rank", return_value=0),
        mock.patch.object(dist, "new_group", placeholder),
    ):
        try:
            ps.initialize_model_parallel(
                tensor_model_parallel_size=tp,
                pipeline_model_parallel_size=pp,
                virtual_pipeline_model_parallel_size=vpp,
                context_parallel_size=cp,
                expert_model_parallel_size=ep,
                expert_tensor_parallel_size=etp,
            )
            return None
        except (RuntimeError, AssertionError) as e:
            return str(e)
        finally:
            ps.destroy_model_parallel()


def _mcore_config(spec, tp, pp, vpp, cp, ep, etp) -> str | None:
    """The error ``TransformerConfig`` raises for this model and mesh, or None."""
    import torch
    from megatron.core.transformer.transformer_config import TransformerConfig

    kw = {
        "num_layers": spec.num_layers,
        "hidden_size": spec.hidden_size,
        "num_attention_heads": spec.num_attention_heads,
        "num_query_groups": spec.num_key_value_heads,
        "tensor_model_parallel_size": tp,
        "pipeline_model_parallel_size": pp,
        "virtual_pipeline_model_parallel_size": vpp,
        "context_parallel_size": cp,
        "expert_model_parallel_size": ep,
        "expert_tensor_parallel_size": etp,
        "pipeline_dtype": torch.bfloat16,
        "sequence_parallel": tp > 1,
        "add_bias_linear": False,
        "ffn_hidden_size": spec.ffn_hidden_size or spec.moe_ffn_hidden_size,
    }
    if spec.num_experts:
        kw.update(num_moe_experts=spec.num_experts, moe_ffn_hidden_size=spec.moe_ffn_hidden_size)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            TransformerConfig(**kw)
            return None
        except (ValueError, AssertionError) as e:
            return str(e)


def mcore_verdict(imp) -> str | None:
    """Megatron-Core's verdict on an imported launcher: the first error its start-up checks raise, or None."""
    p = imp.parallel
    etp = None if "etp" in imp.inherited and imp.target.startswith("verl-megatron") else p.etp_size
    vpp = None if "vpp" in imp.inherited or p.vpp == 1 else p.vpp
    err = _mcore_world(imp.ngpu, p.tp, p.pp, vpp, p.cp, p.ep, etp)
    ref = imp.model_ref()
    if err is None and ref is not None:
        err = _mcore_config(from_hf_config(ref), p.tp, p.pp, vpp, p.cp, p.ep, etp)
    return err


def test_oracle_is_megatron_cores_own_checks():
    # the oracle itself: it fails where Megatron-Core documents a failure and passes otherwise
    assert "not divisible by expert_tensor_model_pipeline_parallel size (16)" in _mcore_world(8, 4, 2, None, 1, 2, None)
    assert _mcore_world(8, 4, 2, None, 1, 2, 1) is None
    assert "interleaved schedule" in _mcore_world(8, 1, 1, 2, 1, 1, None)
    assert "world_size (8) is not divisible by 12" in _mcore_world(8, 3, 4, None, 1, 1, None)
    q8 = from_hf_config("Qwen3-8B")
    assert "num_moe_experts must be non None" in _mcore_config(q8, 1, 1, None, 1, 2, None)
    assert _mcore_config(q8, 2, 2, None, 1, 1, None) is None  # dense, ETP unset -> TP 2: fine
    assert "must be a multiple of tensor_model_parallel_size (3)" in _mcore_config(q8, 3, 1, None, 1, 1, None)


@pytest.mark.parametrize("key", sorted(k for k, v in EXPECTED.items() if not isinstance(v, str)))
def test_verdict_equals_megatron_core(key):
    imp = import_launcher(_path(key))
    doc = imp.to_dict()
    mcore = mcore_verdict(imp)
    assert doc["valid"] == (mcore is None), (doc["errors"], mcore)


# ------------------------------------------------------------------------------------------ messages
def test_inherited_etp_is_said_with_the_fix(capsys):
    rc, out, _ = _cli(capsys, "import-launcher", _path("main/grpo_trainer/run_qwen3_30b_a3b_megatron.sh"))
    assert rc == 1
    assert (
        "ngpu 8 is not divisible by ETP*EP*PP = 4*2*2 = 16" in out
        and "ETP inherited from TP = 4 because the launcher does not set expert_tensor_parallel_size" in out
        and "set actor_rollout_ref.actor.megatron.expert_tensor_parallel_size to 2 or 1" in out
    ), out
    # the dense Qwen3-8B inherits ETP 2 from TP 2 too: said, and not an error
    doc = import_launcher(_path("main/grpo_trainer/run_qwen3_8b_megatron.sh")).to_dict()
    assert doc["valid"] and doc["etp"] == 2 and any("ETP inherited from TP = 2" in i for i in doc["info"])
    assert any("VPP null" in i for i in doc["info"]) and any("CP 1" in i for i in doc["info"])


def test_mtp_follows_the_launcher():
    v4 = import_launcher(_path("main/grpo_trainer/run_deepseek_v4_flash_megatron.sh"))
    doc = v4.to_dict()
    # pp_layout 'Et*6|t*6|t*6|t*5|t*5|t*5|t*5|t*5L' has no MTP stage; the launcher does not enable model.mtp
    assert not v4.train_mtp and doc["valid"] and doc["pp_layout"] and doc["layout_source"] == "pp_layout"
    assert any("MTP layer(s) of the model are not trained" in i for i in doc["info"])
    sft = import_launcher(_path("main/sft/gsm8k/run_qwen3_5_397b_a17b_megatron.sh"))  # MTP_ENABLE=True
    assert sft.train_mtp


def test_case_on_a_device_probe_takes_the_gpu_branch():
    path = _path("main/grpo_trainer/run_qwen3_5_35b_megatron.sh")
    doc = import_launcher(path).to_dict()
    assert any(
        "depends on $(python3 -c 'import torch_npu'" in w and "took the 'gpu' branch" in w for w in doc["warnings"]
    )
    npu = import_launcher(path, env={"DEVICE": "npu"}).to_dict()
    # npu branch: TP2 PP2 EP8, 16 devices per node
    assert tuple(npu[k] for k in ("ngpu", "tp", "pp", "ep")) == (16, 2, 2, 8)
    assert not any("took the 'gpu' branch" in w for w in npu["warnings"])


# ------------------------------------------------------------------------------------------ --estimate
# Launchers whose model has no config in data/models/: none. Every model the launchers name resolves (data/models/
# README.md): Qwen2.5-VL / Qwen3-VL (vision tower counted apart), MiMo (Qwen2 + MTP), Nemotron-3-Nano (Mamba2 hybrid),
# Qwen2.5-Math-7B and Qwen2.5-VL-7B through -derived files, and the Megatron Lite scripts that leave model.path to the
# environment through their MODEL_VARIANT default (test_estimate_without_a_model_path_uses_the_variant).
NO_MODEL_CONFIG: set[str] = set()


@pytest.mark.parametrize("key", sorted(k for k, v in EXPECTED.items() if not isinstance(v, str)))
def test_estimate_for_every_launcher_that_imports(key, capsys):
    imp = import_launcher(_path(key))
    rc, out, err = _cli(capsys, "import-launcher", _path(key), "--estimate", "--gpu-mem", "H100", "--json")
    assert (imp.model_ref() is None) == (key in NO_MODEL_CONFIG), (key, imp.model_path, imp.model_ref())
    if key in NO_MODEL_CONFIG:  # no config for the model: refused, naming it
        assert rc == 2 and "--estimate needs the model" in err and "--config" in err, err
        return
    doc = json.loads(out)
    est = doc["estimate"]
    if not doc["valid"]:
        assert est is None and rc == 1
        return
    assert est["gpu_mem"] == 80 * 2**30 and est["per_gpu"]["total"] > 0 and est["host"]["per_gpu"] >= 0
    assert all(math.isfinite(v) and v >= 0 for v in est["per_gpu"].values()), est["per_gpu"]
    from mlite.memory.rl_options import RolloutOptions

    rl = doc["rl_estimate"]
    assert rc == (0 if est["fits"] and (rl is None or rl["fits"]) else 1)
    if doc["target"].endswith("-sft") or any(w.startswith("no RL estimate: ") for w in doc["warnings"]):
        assert rl is None
        return
    # GRPO/PPO: the per-phase RL estimate with the launcher's own rollout knobs, the same as mlite.memory.rl gives
    assert set(rl) >= {"phases", "peak_phase", "fits", "kv_cache", "host_per_node", "warnings", "errors"}
    ref = {"ref"} if RolloutOptions(**imp.rollout).ref == "colocated" else set()
    critic = {"critic_values", "critic_update"} if imp.critic_options().active else set()  # PPO with GAE
    assert set(rl["phases"]) == {"rollout", "old_log_prob", "actor_update", "weight_sync"} | ref | critic
    assert rl["peak_phase"] == max(rl["phases"], key=lambda n: rl["phases"][n]["gpu"])
    from mlite.memory.rl import rl_estimate
    from mlite.memory.rl_fsdp import FsdpOptions

    mp, training = imp.estimate(gpu_memory_gib=80.0)
    # the launcher's rollout knobs, its verl release, its log-prob micro-batches and its critic, as the CLI reads them
    kw = dict(imp.rollout, **({"verl_version": imp.verl_version["version"]} if imp.verl_version.get("version") else {}))
    again = rl_estimate(
        from_hf_config(imp.model_ref()),
        mp,
        training.options,
        RolloutOptions(**kw),
        FsdpOptions(**imp.log_prob),
        imp.critic_options(),
    )
    assert again.to_dict()["phases"] == rl["phases"]
    knobs = doc["rollout"]
    if "gpu_memory_utilization" in knobs:  # the launcher's share, not verl's default, sized the engine
        assert RolloutOptions(**imp.rollout).gpu_memory_utilization == knobs["gpu_memory_utilization"]


def test_estimate_matches_mlite_memory(capsys):
    """The estimate is the one ``mlite memory`` gives for the same mesh and options."""
    imp = import_launcher(_path("main/grpo_trainer/run_qwen3_5_35b_megatron.sh"))
    mp, est = imp.estimate(gpu_memory_gib=141.0)
    from mlite.memory import estimate

    again = estimate(from_hf_config("Qwen3.5-35B-A3B"), mp, est.options)
    assert again.to_dict()["per_gpu"] == est.to_dict()["per_gpu"] and est.options.gpu_memory_gib == 141.0


@pytest.mark.parametrize(
    "args, words",
    [
        (("--estimate", "--gpu-mem", "lots"), "--gpu-mem 'lots'"),
        (("--gpu-mem", "H100"), "--gpu-mem is for --estimate"),
        (("--estimate", "--env", "X"), "--env 'X'"),
    ],
)
def test_bad_estimate_input_exits_2(args, words, capsys):
    rc, _, err = _cli(capsys, "import-launcher", _path("main/grpo_trainer/run_qwen3_8b_megatron.sh"), *args)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == 2 and len(lines) == 1 and words in lines[0], err


def test_estimate_without_a_model_path_uses_the_variant(capsys):
    kimi = _path("main/grpo_trainer/run_kimi_k2_6_glm5_1_megatron_lite.sh")
    rc, out, _ = _cli(capsys, "import-launcher", kimi, "--estimate", "--json")
    doc = json.loads(out)
    # MODEL_PATH is empty; MODEL_VARIANT defaults to kimi_k2_6: estimated with data/models/Kimi-K2.6, and said so
    assert rc in (0, 1) and doc["model_config"] == "Kimi-K2.6" and doc["estimate"]["per_gpu"]["total"] > 0
    assert any("MODEL_VARIANT=kimi_k2_6 read with data/models/Kimi-K2.6" in i for i in doc["info"]), doc["info"]
    glm = import_launcher(kimi, env={"MODEL_VARIANT": "glm5_1"})
    assert glm.model_ref() == "GLM-5"
    given = import_launcher(kimi, env={"MODEL_PATH": "/models/Kimi-K2.6"})
    assert given.model_ref() == "Kimi-K2.6" and not any("model.path is empty" in i for i in given.to_dict()["info"])
    # DeepSeek-V4-Pro has no public config: refused in one line that names the variant and the way out
    v4 = _path("main/sft/gsm8k/run_deepseek_v4_megatron_lite.sh")
    rc, _, err = _cli(capsys, "import-launcher", v4, "--estimate", "--env", "MODEL_VARIANT=pro")
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == 2 and len(lines) == 1, err
    assert "the script requires MODEL_PATH" in err and "MODEL_VARIANT=pro has no config in data/models/" in err
    assert "--config" in err


def test_vision_tower_is_held_on_the_first_stage(capsys):
    from mlite.memory.params import stage_params

    imp = import_launcher(_path("main/grpo_trainer/run_qwen3_vl_8b_megatron.sh"))  # TP 2 PP 2
    mp, _ = imp.estimate()
    spec = from_hf_config(imp.model_ref())
    text_only = from_hf_config({k: v for k, v in spec.config.items()} | {"model_type": "qwen3"})
    with_vision, without = stage_params(spec, mp), stage_params(text_only, mp)
    assert spec.vision_params == 576_388_336  # transformers' Qwen3VLForConditionalGeneration: test_models.py
    assert with_vision[0].dense - without[0].dense == spec.vision_params  # whole on each TP rank: replicated
    assert with_vision[1].dense == without[1].dense
    assert any("replicated across TP" in n for n in spec.notes)
    rc, out, _ = _cli(capsys, "import-launcher", _path("main/grpo_trainer/run_qwen3_vl_8b_megatron.sh"), "--estimate")
    assert rc in (0, 1) and "info: vision tower (576,388,336 parameters) counted on the first pipeline stage" in out, (
        out
    )


# ------------------------------------------------------------------------------------------ notebook 01's view
def test_launcher_view_hands_mesh_and_options_to_the_planner_and_memory_view():
    from widgets.launcher_view import LauncherView
    from widgets.memory_view import MemoryView
    from widgets.planner import MeshPlanner

    planner = MeshPlanner("Qwen3-8B", ngpu=16)
    memory = MemoryView(planner, gpu="H100")
    view = LauncherView(planner, memory)
    key = "verl/main/examples/grpo_trainer/run_qwen3_5_35b_megatron.sh"
    imp = view.load(key)
    assert view.errors.message == "" and view.imported is imp
    doc = imp.to_dict()
    plan = planner.plan
    assert planner.spec.name == "Qwen3.5-35B-A3B" and plan.ngpu == doc["ngpu"] == 8
    assert (plan.parallel.tp, plan.parallel.ep, plan.parallel.etp_size, plan.dp) == (2, 8, 1, doc["dp"])
    o, want = memory.options(), imp.training_options()
    assert (o.use_precision_aware_optimizer, o.offload_fraction, o.recompute, o.seq_len) == (
        want.use_precision_aware_optimizer,
        want.offload_fraction,
        want.recompute,
        want.seq_len,
    )
    assert "valid" in view._summary.value and "took the &#x27;gpu&#x27; branch" in view._notes.value
    # a pasted stub: the refusal is the CLI's one line, the views keep their state
    view.errors.run(view.load, text='echo "moved"\n')
    assert "launches nothing" in view.errors.message and planner.plan is plan
    # an invalid launcher: the planner shows Megatron-Core's reason with the inherited ETP
    view.errors.run(view.load, "verl/main/examples/grpo_trainer/run_qwen3_30b_a3b_megatron.sh")
    assert not planner.plan.valid and any("ETP inherited from TP = 4" in f.message for f in planner.plan.errors)
