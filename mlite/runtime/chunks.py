"""Chunk sizes of the lite runtime's kernels, torch-free so the memory estimator reads the same numbers."""

GDN_TORCH_CHUNK = {"cpu": 64, "cuda": 128}
"""Gated DeltaNet chunk length of the pure-PyTorch chunked path, per device type."""

__all__ = ["GDN_TORCH_CHUNK"]
