"""Megatron-Core's own saved activations: the oracle for the estimator's ``megatron`` activation model.

Builds Megatron-Core's ``GPTModel`` with the local layer spec (``get_gpt_layer_local_spec``: no Transformer Engine,
unfused ``DotProductAttention``, torch RMSNorm, ``SequentialMLP`` experts behind the all-gather token dispatcher) in
one process, runs one forward with ``torch.autograd.graph.saved_tensors_hooks`` and counts the bytes autograd keeps
for the backward, deduplicated by storage and attributed to the innermost module that saved them. Components use
the estimator's names (``norms``, ``attention``, ``attention_core``, ``mlp``/``moe``, ``layer_inputs`` per layer;
``embedding``, ``rope``, ``final_norm``, ``logits`` for the root). Runs on the CPU (CI) and on CUDA (the bench).

The settings are Megatron-LM's training defaults where they run without Transformer Engine or Apex:
``bias_activation_fusion`` (SwiGLU saves only its input), ``masked_softmax_fusion=False`` (the fused softmax
kernels are not built), ``apply_rope_fusion=False``, ``gradient_accumulation_fusion=False``, unfused cross-entropy,
dropout 0, RMSNorm, RoPE, no bias, ``moe_router_load_balancing_type="aux_loss"``. The JIT fuser is switched off
(torch.compile would only change transients inside the fused functions, not what they save).

Shims, only what the CUDA-only calls of Megatron-Core need on a CPU: ``torch.cuda.current_device`` answers
``"cpu"``, the causal mask is built on the current device, the CUDA RNG tracker and the checkpoint's RNG state
copies are no-ops, and 0.16.1's missing ``te_general_gemm`` name is set to None. A gloo process group of size 1
and ``initialize_model_parallel(1, 1)`` stand in for the distributed set-up; a tensor-parallel case (``tp > 1``) runs
in ``tp`` processes of one gloo group (:func:`tp_saved_bytes`, started by :func:`mlite.runtime.dist.run_local`) with
``initialize_model_parallel(tp, 1)``: the column/row-parallel linears, the vocabulary-parallel embedding and
cross-entropy then all-reduce over gloo, and no other shim is needed (the TP region ops are plain
``torch.distributed`` calls on the tensor-parallel group).

Megatron is imported only inside these functions: ``import mlite`` never needs it.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

ROOT_PARTS = ("embedding", "rope", "final_norm", "logits")


@dataclass(frozen=True)
class OracleCase:
    """One tiny GPT configuration for the oracle (Megatron-Core names in brackets)."""

    hidden: int = 64
    """Hidden size (hidden_size)."""
    heads: int = 4
    """Attention heads (num_attention_heads)."""
    kv_heads: int = 2
    """Key/value heads (num_query_groups); equal to heads for MHA."""
    head_dim: int = 16
    """Head dimension (kv_channels)."""
    ffn: int = 96
    """Dense SwiGLU width (ffn_hidden_size)."""
    layers: int = 2
    """Transformer layers (num_layers)."""
    vocab: int = 256
    """Vocabulary, a multiple of 128 so Megatron's padding leaves it alone."""
    seq: int = 32
    """Sequence length."""
    micro_batch: int = 1
    """Micro-batch size."""
    recompute: str = "none"
    """none | selective (core attention) | full (uniform, one layer per checkpoint)."""
    qk_norm: bool = True
    """RMSNorm on queries and keys (qk_layernorm)."""
    experts: int = 0
    """Routed experts (num_moe_experts); 0 is a dense model."""
    topk: int = 2
    """Experts per token (moe_router_topk)."""
    moe_ffn: int = 32
    """Expert SwiGLU width (moe_ffn_hidden_size)."""
    tp: int = 1
    """Tensor-parallel size (tensor_model_parallel_size): the case runs in this many gloo processes. Without
    sequence parallelism: the local spec's torch norms refuse it (``WrappedTorchNorm``), and Megatron-Core wants it
    for MoE under TP, so a TP case is dense."""

    def hf_config(self) -> dict:
        """The same model as a Hugging Face config, for :func:`mlite.models.from_hf_config`."""
        c: dict[str, object] = {
            "hidden_size": self.hidden,
            "num_hidden_layers": self.layers,
            "num_attention_heads": self.heads,
            "num_key_value_heads": self.kv_heads,
            "head_dim": self.head_dim,
            "intermediate_size": self.ffn,
            "vocab_size": self.vocab,
            "tie_word_embeddings": False,
            "rms_norm_eps": 1e-6,
            "rope_theta": 10000.0,
            "max_position_embeddings": 4 * self.seq,
        }
        if self.experts:
            if self.qk_norm:
                c.update(
                    model_type="qwen3_moe",
                    architectures=["Qwen3MoeForCausalLM"],
                    num_experts=self.experts,
                    num_experts_per_tok=self.topk,
                    moe_intermediate_size=self.moe_ffn,
                    norm_topk_prob=True,
                    decoder_sparse_step=1,
                    mlp_only_layers=[],
                )
            else:
                c.update(
                    model_type="mixtral",
                    architectures=["MixtralForCausalLM"],
                    num_local_experts=self.experts,
                    num_experts_per_tok=self.topk,
                    intermediate_size=self.moe_ffn,
                )
        elif self.qk_norm:
            c.update(model_type="qwen3", architectures=["Qwen3ForCausalLM"])
        else:
            c.update(model_type="llama", architectures=["LlamaForCausalLM"])
        return c


class _NoRng:
    """Stands in for Megatron's CUDA RNG tracker (dropout is 0; nothing random is recomputed)."""

    def fork(self, *args, **kwargs):
        return contextlib.nullcontext()

    def get_states(self):
        return {}

    def set_states(self, states):
        pass

    def is_initialized(self):
        return True

    def add(self, *args, **kwargs):
        pass


_READY = {"shims": False}


def install_shims() -> None:
    """Patch the few CUDA-only calls the local spec makes (idempotent); must run before the model is built."""
    if _READY["shims"]:
        return
    from megatron.core import jit

    jit.jit_fuser = jit.noop_decorator
    import megatron.core.tensor_parallel.random as rng
    import torch
    from megatron.core.fusions import fused_softmax
    from megatron.core.transformer.moe import moe_utils

    if not torch.cuda.is_available():
        # a device name where torch types an index: Megatron only hands it to torch.device / .to(), which take "cpu"
        torch.cuda.current_device = lambda: "cpu"  # type: ignore[assignment,return-value]
        rng._CUDA_RNG_STATE_TRACKER = _NoRng()
        rng._CUDA_RNG_STATE_TRACKER_INITIALIZED = True
        rng._get_all_rng_states = lambda: ()
        rng._set_all_rng_states = lambda *states: None
        rng._fork_rng = contextlib.nullcontext
    fused_softmax.get_default_causal_mask = _causal_mask
    if not hasattr(moe_utils, "te_general_gemm"):  # 0.16.1 without Transformer Engine leaves the name undefined
        moe_utils.te_general_gemm = None
    _READY["shims"] = True


def _causal_mask(sq: int):
    """Megatron's ``get_default_causal_mask`` (a new bool s x s mask per call), on the current device."""
    import torch

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.triu(torch.ones(sq, sq, device=dev), diagonal=1).bool()


def init_single_process(tp: int = 1) -> None:
    """A process group of size 1 (gloo on CPU, nccl on CUDA) and model parallelism of 1 (idempotent); with ``tp > 1``
    the caller's process group of ``tp`` processes (:func:`tp_saved_bytes`) and tensor parallelism over all of it."""
    import torch
    import torch.distributed as dist
    from megatron.core import parallel_state

    install_shims()
    if not dist.is_initialized():
        if tp != 1:
            raise RuntimeError(f"mcore oracle: tp={tp} needs a process group of {tp} processes (tp_saved_bytes)")
        # an in-process store: no port to race other programs for
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    if not parallel_state.model_parallel_is_initialized():
        parallel_state.initialize_model_parallel(tp, 1)
        if torch.cuda.is_available():
            from megatron.core.tensor_parallel.random import (
                model_parallel_cuda_manual_seed,
            )

            model_parallel_cuda_manual_seed(1234)


def transformer_config(case: OracleCase, **overrides):
    """Megatron-Core's ``TransformerConfig`` for ``case`` (the settings in the module docstring)."""
    import torch
    import torch.nn.functional as F
    from megatron.core.transformer.transformer_config import TransformerConfig

    cfg = {
        "num_layers": case.layers,
        "hidden_size": case.hidden,
        "num_attention_heads": case.heads,
        "num_query_groups": case.kv_heads,
        "ffn_hidden_size": case.ffn,
        "kv_channels": case.head_dim,
        "bf16": True,
        "params_dtype": torch.bfloat16,
        "hidden_dropout": 0.0,
        "attention_dropout": 0.0,
        "normalization": "RMSNorm",
        "gated_linear_unit": True,
        "activation_func": F.silu,
        "add_bias_linear": False,
        "qk_layernorm": case.qk_norm,
        "use_cpu_initialization": not torch.cuda.is_available(),
        "gradient_accumulation_fusion": False,
        "masked_softmax_fusion": False,
        "bias_activation_fusion": True,
        "apply_rope_fusion": False,
        "bias_dropout_fusion": False,
        "persist_layer_norm": False,
        "cross_entropy_loss_fusion": False,
        "tensor_model_parallel_size": case.tp,
    }
    if case.recompute == "selective":
        cfg.update(recompute_granularity="selective")
    elif case.recompute == "full":
        cfg.update(recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1)
    if case.experts:
        cfg.update(
            num_moe_experts=case.experts,
            moe_router_topk=case.topk,
            moe_ffn_hidden_size=case.moe_ffn,
            moe_token_dispatcher_type="allgather",
            moe_router_load_balancing_type="aux_loss",
            moe_aux_loss_coeff=1e-2,
            moe_grouped_gemm=False,
        )
    cfg.update(overrides)
    return TransformerConfig(**cfg)


def build_gpt(case: OracleCase, layer_spec=None, **overrides):
    """Megatron-Core's GPTModel for ``case`` in bf16 on the current device (local spec unless ``layer_spec``)."""
    import torch
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec

    init_single_process(case.tp)
    config = transformer_config(case, **overrides)
    spec = layer_spec or get_gpt_layer_local_spec(
        num_experts=case.experts or None, moe_grouped_gemm=False, qk_layernorm=case.qk_norm, normalization="RMSNorm"
    )
    model = GPTModel(
        config=config,
        transformer_layer_spec=spec,
        vocab_size=case.vocab,
        max_sequence_length=max(4 * case.seq, 64),
        position_embedding_type="rope",
        share_embeddings_and_output_weights=False,
    )
    model = model.bfloat16()
    if torch.cuda.is_available():
        model = model.cuda()
    return model


def sdpa_layer_spec(case):
    """The local spec with ``DotProductAttention`` replaced by PyTorch SDPA (causal, GQA native, the flash kernel
    forced): Megatron's other modules around a flash core, the closest to Transformer Engine that runs here."""
    import torch
    import torch.nn.functional as F
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.module import MegatronModule

    class SDPAttention(MegatronModule):
        """Core attention through ``F.scaled_dot_product_attention`` (flash kernel on CUDA for bf16)."""

        def __init__(
            self,
            config,
            layer_number,
            attn_mask_type,
            attention_type=None,
            attention_dropout=None,
            softmax_scale=None,
            **kwargs,
        ):
            super().__init__(config=config)
            self.heads, self.groups = config.num_attention_heads, config.num_query_groups
            self.scale = softmax_scale

        def forward(
            self,
            query,
            key,
            value,
            attention_mask=None,
            attn_mask_type=None,
            attention_bias=None,
            packed_seq_params=None,
            **kwargs,
        ):
            s, b = query.shape[0], query.shape[1]
            q, k, v = (x.permute(1, 2, 0, 3) for x in (query, key, value))  # [b, heads, s, d]
            with torch.nn.attention.sdpa_kernel([torch.nn.attention.SDPBackend.FLASH_ATTENTION]):
                out = F.scaled_dot_product_attention(
                    q, k, v, is_causal=True, scale=self.scale, enable_gqa=self.heads != self.groups
                )
            return out.permute(2, 0, 1, 3).reshape(s, b, -1)

    spec = get_gpt_layer_local_spec(
        num_experts=case.experts or None, moe_grouped_gemm=False, qk_layernorm=case.qk_norm, normalization="RMSNorm"
    )
    spec.submodules.self_attention.submodules.core_attention = SDPAttention
    return spec


def predict_row(row: dict) -> dict:
    """The estimator's static and peak bytes for one row of ``bench/mcore_memory.py`` (one GPU, CUDA)."""
    from ..memory.estimate import estimate
    from ..mesh import ParallelConfig, resolve
    from ..models import from_hf_config
    from ..options import TrainingOptions

    case = OracleCase(seq=row["seq"], micro_batch=row["micro_batch"], recompute=row["recompute"], **row["model"])
    spec = from_hf_config(case.hf_config())
    o = TrainingOptions(
        seq_len=row["seq"],
        micro_batch_size=row["micro_batch"],
        num_microbatches=row["num_microbatches"],
        recompute=row["recompute"],
        attention=row["attention"],
        use_distributed_optimizer=row["dist_opt"],
        main_grads_dtype=row["grad"],
        lite_device="cuda",
        gpu_memory_gib=141,
    )
    e = estimate(spec, resolve(spec, 1, ParallelConfig(), seq_len=row["seq"]), o, explain=False)
    w = e.worst
    return {
        "predicted_static_bytes": round(w.static),
        "predicted_peak_bytes": round(w.peak),
        "predicted_activations": {k: round(v) for k, v in w.activations.items()},
        "predicted_transients": {k: round(v) for k, v in w.transients.items()},
        "predicted_persistent": {k: round(v) for k, v in w.persistent.items()},
        "params": round(w.local_params),
    }


def component(name: str) -> tuple[int | None, str]:
    """(layer index or None for the root, estimator component) of the module that saved a tensor."""
    parts = name.split(".")
    if len(parts) >= 3 and parts[0] == "decoder" and parts[1] == "layers":
        i, rest = int(parts[2]), parts[3:]
        if not rest:
            return i, "layer_inputs"
        head = rest[0]
        if head in ("input_layernorm", "pre_mlp_layernorm"):
            return i, "norms"
        if head == "self_attention":
            return i, "attention_core" if "core_attention" in rest else "attention"
        if head == "mlp":
            return i, "mlp"  # "moe" for MoE layers (saved_bytes renames)
        return i, head
    if parts[0] == "embedding":
        return None, "embedding"
    if name == "decoder":
        return None, "layer_inputs"  # full recompute: the checkpointed layer inputs (and the RoPE table)
    if name == "decoder.final_layernorm":
        return None, "final_norm"
    return None, "logits"  # output layer and the cross-entropy after it (no module of its own)


def saved_bytes(model, case: OracleCase, tokens=None) -> dict:
    """Bytes autograd keeps for the backward after one forward (+ loss) of ``model``, by layer and component.

    Returns ``{"layers": [ {component: bytes} per layer ], "root": {component: bytes}, "total": bytes,
    "moe_parts": [ {part: bytes} per layer ]}``; ``moe_parts`` splits an MoE layer's ``moe`` bytes by the module
    that saved them (``router``, ``dispatcher`` for the MoE layer itself, where the token dispatcher's permutation
    runs, ``experts``, ``shared_experts``; empty for dense layers). The loss is backpropagated afterwards so the
    graph is freed. Parameters are not counted; a storage counts once, for the first module that saved any view of
    it."""
    import torch

    dev = next(model.parameters()).device
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    stack: list[str] = []
    handles = []
    for name, mod in model.named_modules():
        handles.append(mod.register_forward_pre_hook(lambda m, a, n=name: stack.append(n)))
        handles.append(mod.register_forward_hook(lambda m, a, o: (stack.pop(), None)[1]))
    seen: dict[int, tuple[str, int, bool]] = {}
    keep = []

    def pack(t):
        st = t.untyped_storage()
        ptr = st.data_ptr()
        if ptr not in params and ptr not in seen:
            seen[ptr] = (stack[-1] if stack else "", st.nbytes(), t.dtype == torch.float32)
            keep.append(t)  # holds the storage so that no later tensor reuses its address
        return t

    g = torch.Generator(device="cpu").manual_seed(0)
    ids = tokens if tokens is not None else torch.randint(0, case.vocab, (case.micro_batch, case.seq), generator=g)
    ids = ids.to(dev)
    labels = torch.roll(ids, -1, dims=1)
    pos = torch.arange(case.seq, device=dev).unsqueeze(0).expand(case.micro_batch, -1)
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            loss = model(ids, pos, None, labels=labels)
    finally:
        for h in handles:
            h.remove()
    layers: list[dict[str, int]] = [{} for _ in range(case.layers)]
    moe_parts: list[dict[str, int]] = [{} for _ in range(case.layers)]
    root: dict[str, int] = {}
    for name, nbytes, fp32 in seen.values():
        i, comp = component(name)
        if comp == "layer_inputs" and i is None and fp32:
            comp = "rope"  # the fp32 RoPE table the checkpoints save next to the (bf16) layer inputs
        if i is None and comp == "layer_inputs":
            # the checkpoint of layer k saves layer k's input; attribute them in order
            k = next(j for j, d in enumerate(layers) if "layer_inputs" not in d)
            layers[k]["layer_inputs"] = nbytes
            continue
        if comp == "mlp" and case.experts and i is not None:
            comp = "moe"
            part = moe_part(name)
            moe_parts[i][part] = moe_parts[i].get(part, 0) + nbytes
        target = root if i is None else layers[i]
        target[comp] = target.get(comp, 0) + nbytes
    loss.float().sum().backward()
    keep.clear()
    total = sum(sum(d.values()) for d in layers) + sum(root.values())
    return {"layers": layers, "root": root, "total": total, "moe_parts": moe_parts}


def tp_saved_bytes(rank: int, world: int, cases: dict) -> dict:
    """:func:`saved_bytes` on this rank for each tensor-parallel case ``{name: OracleCase fields}``, all of
    ``tp == world`` (``run_local(tp_saved_bytes, tp, (cases,))`` brings the process group up; every rank draws the
    same tokens)."""
    import torch

    out = {}
    for name, kw in cases.items():
        case = OracleCase(**kw)
        if case.tp != world:
            raise RuntimeError(f"mcore oracle: case {name} has tp={case.tp}, started on {world} processes")
        torch.manual_seed(0)
        model = build_gpt(case)
        model.train()
        out[name] = saved_bytes(model, case)
    return out


def moe_part(name: str) -> str:
    """The part of an MoE layer (``decoder.layers.N.mlp...``) a module name belongs to: ``router``, ``experts``,
    ``shared_experts``, or ``dispatcher`` for the MoE layer module itself (the token dispatcher is not a module:
    its permutation and combine run inside ``MoELayer.forward``)."""
    rest = name.split(".")[4:]
    return rest[0] if rest else "dispatcher"


def measure(case: OracleCase) -> dict:
    """Build the model for ``case`` and return :func:`saved_bytes` of one forward."""
    import torch

    torch.manual_seed(0)
    model = build_gpt(case)
    model.train()
    return saved_bytes(model, case)


def predicted(case: OracleCase, device: str = "cpu", attention: str = "unfused") -> dict:
    """The estimator's ``megatron`` components for ``case`` on one GPU, shaped like :func:`saved_bytes`."""
    from ..memory.activations import layer_bytes, mcore_moe_parts
    from ..memory.estimate import _act_dims, estimate
    from ..mesh import ParallelConfig, resolve
    from ..models import from_hf_config
    from ..options import TrainingOptions

    spec = from_hf_config(case.hf_config())
    o = TrainingOptions(
        seq_len=case.seq,
        micro_batch_size=case.micro_batch,
        num_microbatches=1,
        recompute=case.recompute,
        attention=attention,
        lite_device=device,
    )
    plan = resolve(spec, case.tp, ParallelConfig(tp=case.tp), seq_len=case.seq)
    d = _act_dims(spec, plan, o)
    layers = [{k: v for k, v in layer_bytes(spec, layer, d).items() if v} for layer in spec.layers]
    w = estimate(spec, plan, o, explain=False).worst
    root = {k: w.activations[k] for k in ("embedding", "final_norm", "logits") if k in w.activations}
    if case.recompute == "full":
        root["rope"] = w.persistent["rope_table"]
    total = sum(sum(x.values()) for x in layers) + sum(root.values())
    keep_moe = case.recompute != "full"
    moe_parts = [mcore_moe_parts(spec, d) if layer.mlp == "moe" and keep_moe else {} for layer in spec.layers]
    return {"layers": layers, "root": root, "total": total, "moe_parts": moe_parts}


def _alive_storages(params: set[int]) -> dict[int, tuple]:
    import gc

    import torch
    from torch._subclasses.fake_tensor import FakeTensor

    gc.collect()
    seen: dict[int, tuple] = {}
    for obj in gc.get_objects():
        if isinstance(obj, torch.Tensor) and not isinstance(obj, (torch.nn.Parameter, FakeTensor)):
            st = obj.untyped_storage()
            if st.data_ptr() not in params and st.nbytes():
                seen.setdefault(st.data_ptr(), (st.nbytes(), tuple(obj.shape), str(obj.dtype).replace("torch.", "")))
    return seen


def alive_after_backward(model, case: OracleCase, iters: int = 2) -> dict:
    """Tensors still alive after ``iters`` forward/backward passes that were not there before them (parameters and
    their grads excluded): what Megatron-Core keeps between steps besides the model state. Megatron's global score
    buffer is emptied first so that an earlier model's buffer does not stand in for this one's. Returns
    ``{"bytes": total, "tensors": [(bytes, shape, dtype), ...]}``, each storage once (FakeTensors left by tracing
    at import hold no memory and are skipped)."""
    import torch
    from megatron.core import parallel_state

    parallel_state.get_global_memory_buffer().buffer.clear()
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    before = _alive_storages(params)
    dev = next(model.parameters()).device
    g = torch.Generator(device="cpu").manual_seed(1)
    for _ in range(iters):
        ids = torch.randint(0, case.vocab, (case.micro_batch, case.seq), generator=g).to(dev)
        pos = torch.arange(case.seq, device=dev).unsqueeze(0).expand(case.micro_batch, -1)
        loss = model(ids, pos, None, labels=torch.roll(ids, -1, dims=1))
        loss.float().mean().backward()
        del loss, ids, pos
        for p in model.parameters():
            p.grad = None
    new = {k: v for k, v in _alive_storages(params).items() if k not in before}
    return {"bytes": sum(v[0] for v in new.values()), "tensors": sorted(new.values(), reverse=True)}
