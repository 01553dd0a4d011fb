"""Chunk sizes of the lite runtime's kernels, torch-free below `runtime/` and `memory/` (both read the same numbers)."""

GDN_TORCH_CHUNK = {"cpu": 64, "cuda": 128}
"""Gated DeltaNet chunk length of the pure-PyTorch chunked path, per device type (other devices: the CPU's). A GPU
takes 128: fewer sequential chunk steps and bigger GEMMs; 64 keeps the CPU's work per step small."""

CE_CHUNK_LOGITS = 256 * 1024 * 1024
"""Logits per chunk of the fused linear cross-entropy: 1 GiB of fp32 (3 chunks for 4096 tokens at a 152k
vocabulary)."""
CE_MIN_CHUNK_ROWS = 1024
"""Fewest token rows in a cross-entropy chunk (a large vocabulary still gets GEMM-sized chunks)."""


def ce_chunk_rows(vocab_size: int) -> int:
    """Token rows per chunk of the fused linear cross-entropy (the runtime's loss and the estimator's transients)."""
    return max(CE_MIN_CHUNK_ROWS, CE_CHUNK_LOGITS // max(1, vocab_size))


__all__ = ["CE_CHUNK_LOGITS", "CE_MIN_CHUNK_ROWS", "GDN_TORCH_CHUNK", "ce_chunk_rows"]
