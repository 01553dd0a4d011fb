"""All 2**32 fp32 bit patterns through the PAO remainder split/merge (mlite.runtime.optim.master): counts of exact
round trips and of disagreements with torch's round-to-nearest-even bf16 cast (expected only at exact ties), and the
time taken. The unit tests cover the edge classes exhaustively; this covers everything (seconds on a GPU, about half
an hour on one CPU core).

    python3 bench/remainder_exhaustive.py --device cuda
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from mlite.runtime.optim.master import merge_fp32, split_fp32


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--chunk-log2", type=int, default=28)
    a = ap.parse_args()
    dev = torch.device(a.device)
    n = 1 << a.chunk_log2
    t = time.perf_counter()
    bad = ties = tie_diff = nontie_diff = 0
    for c in range((1 << 32) // n):
        b = torch.arange(c * n, (c + 1) * n, dtype=torch.int64, device=dev)
        b = torch.where(b >= 1 << 31, b - (1 << 32), b).to(torch.int32)
        x = b.view(torch.float32)
        hi, rem = split_fp32(x)
        bad += int((merge_fp32(hi, rem).view(torch.int32) != b).sum())
        diff = hi.view(torch.int16) != x.to(torch.bfloat16).view(torch.int16)
        keep = ~torch.isnan(x)
        tie = ((b & 0xFFFF) == 0x8000) & keep
        ties += int(tie.sum())
        tie_diff += int((diff & tie).sum())
        nontie_diff += int((diff & keep & ~tie).sum())
        del b, x, hi, rem, diff, keep, tie
    if dev.type == "cuda":
        torch.cuda.synchronize()
    dt = time.perf_counter() - t
    print(
        f"patterns=2**32 device={dev} round_trip_mismatches={bad} non_tie_rne_mismatches(non-NaN)={nontie_diff} "
        f"exact_ties(non-NaN)={ties} ties_rounded_differently_from_rne={tie_diff} seconds={dt:.1f}"
    )
    return 0 if bad == 0 and nontie_diff == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
