"""Model catalog: Hugging Face configs read exactly, offline, into :class:`ModelSpec`.

Conventions: see :mod:`mlite.models.spec` (``total`` includes MTP, excludes vision; ``active`` includes
embedding and lm_head, excludes MTP; tied embeddings counted once; router expert biases are parameters).
"""

from .config import available_models, load_config, resolve_config_path
from .families import SUPPORTED_MODEL_TYPES
from .mesh_rules import ModelMeshRule, rules_for
from .reader import from_hf_config
from .spec import COMPONENTS, LayerSpec, ModelSpec, ParamGroup

ModelSpec.from_hf_config = staticmethod(from_hf_config)  # the documented entry point: ModelSpec.from_hf_config(...)

__all__ = [
    "COMPONENTS",
    "SUPPORTED_MODEL_TYPES",
    "LayerSpec",
    "ModelMeshRule",
    "ModelSpec",
    "ParamGroup",
    "available_models",
    "from_hf_config",
    "load_config",
    "resolve_config_path",
    "rules_for",
]
