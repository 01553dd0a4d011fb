"""Chunk sizes of the lite runtime's kernels, torch-free so the memory estimator reads the same numbers."""

GDN_TORCH_CHUNK = {"cpu": 64, "cuda": 128}
"""Gated DeltaNet chunk length of the pure-PyTorch chunked path, per device type (other devices: the CPU's). A GPU
takes 128: fewer sequential chunk steps and bigger GEMMs; 64 keeps the CPU's work per step small."""

__all__ = ["GDN_TORCH_CHUNK"]
