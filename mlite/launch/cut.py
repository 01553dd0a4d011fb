"""A run's model as the workers build it: the config cut to size (``--layers/--experts/--vocab``) and the weights of
``--hf-checkpoint``.

:func:`model_config` gives the config dict the run trains (the original one when nothing is cut) and the
:class:`~mlite.models.shrink.Shrunk` record; the caller (:func:`check_cut`, before any process starts) and every
worker compute it from the same :class:`~mlite.launch.config.RunConfig` fields, so they agree without a second
file. :func:`check_cut` refuses what the lite runtime cannot build or load: an architecture it has no model for,
``--vocab`` with a checkpoint (the embedding rows would not match), a checkpoint whose config.json describes another
model. :func:`checkpoint_factory` is the worker's model factory: build the cut model in fp32 on the CPU, copy the
checkpoint's tensors in, then cast and move it, before FSDP2 shards it.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import MliteError


def is_cut(config) -> bool:
    """True when the run changes the model's shape (layers, experts or vocabulary)."""
    return any(getattr(config, k) is not None for k in ("layers", "experts", "vocab"))


def model_config(config):
    """``(name, original config dict, config dict to train, Shrunk or None)`` for ``config.model``."""
    from ..models import load_config
    from ..models.shrink import shrink_config

    name, raw = load_config(config.model)
    if not is_cut(config):
        return name, raw, raw, None
    cut = shrink_config(config.model, layers=config.layers, experts=config.experts, vocab=config.vocab)
    return name, raw, cut.config, cut


def model_spec(config):
    """The ModelSpec the run trains (cut to size when asked)."""
    from ..models import from_hf_config

    name, _raw, cfg, cut = model_config(config)
    return from_hf_config(cfg, name=f"{name}-cut" if cut is not None else name)


def check_cut(config) -> None:
    """Refuse, with one line, a cut or a checkpoint the run could not use (nothing is read but config files)."""
    from ..runtime.architectures import SUPPORTED_ARCHITECTURES
    from ..runtime.hf_checkpoint import check_matches

    name, raw, _cfg, _cut = model_config(config)  # --layers / --experts / --vocab out of range raise here
    spec = model_spec(config)
    if spec.source != "native" or spec.architecture not in SUPPORTED_ARCHITECTURES:
        raise MliteError(
            f"model: {name} is a {spec.architecture} model, which the lite runtime does not build "
            f"(it builds {', '.join(SUPPORTED_ARCHITECTURES)}); plan it with 'mlite memory' instead"
        )
    if config.hf_checkpoint is not None:
        if config.vocab is not None:
            raise MliteError(
                "vocab: --vocab cuts the embedding for a randomly initialised run; drop it with "
                "--hf-checkpoint (the checkpoint's vocabulary is loaded)"
            )
        d = Path(config.hf_checkpoint)
        if not d.is_dir():
            raise MliteError(f"hf_checkpoint: {d} is not a directory; give a Hugging Face model directory")
        check_matches(d, raw)
        if not any(d.glob("*.safetensors")):
            raise MliteError(f"hf_checkpoint: {d} has no *.safetensors files")


def checkpoint_factory(config, recompute: str = "none", moe_aux_loss_coeff: float = 0.0):
    """``f(param_dtype, device, seed) -> LiteModel`` with ``config.hf_checkpoint``'s weights (see module doc)."""
    from ..runtime.hf_checkpoint import load_hf_checkpoint
    from ..runtime.models import build_lite_model

    name, raw, _cfg, cut = model_config(config)
    spec = model_spec(config)

    def factory(param_dtype, device, seed):
        import torch

        model = build_lite_model(
            spec,
            param_dtype=torch.float32,
            device="cpu",
            seed=seed,
            recompute=recompute,
            moe_aux_loss_coeff=moe_aux_loss_coeff,
        )
        wanted = {k: tuple(v.shape) for k, v in model.hf_state_dict().items()}
        state = load_hf_checkpoint(
            config.hf_checkpoint,
            wanted,
            config=raw,
            source_layers=cut.source_layers if cut is not None else None,
            num_experts=cut.num_experts if cut is not None else None,
        )
        model.load_hf_state_dict(state)
        if param_dtype != torch.float32 or torch.device(device).type != "cpu":
            # packed-attention / expert paths depend on device and dtype: rebuild the shell there, copy in
            target = build_lite_model(
                spec,
                param_dtype=param_dtype,
                device=device,
                seed=seed,
                recompute=recompute,
                moe_aux_loss_coeff=moe_aux_loss_coeff,
            )
            target.load_hf_state_dict(model.hf_state_dict())
            model = target
        return model

    factory.__qualname__ = f"hf_checkpoint({name})"
    return factory


__all__ = ["check_cut", "checkpoint_factory", "is_cut", "model_config", "model_spec"]
