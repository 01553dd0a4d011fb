"""Device probe for the colocated RL budget (``mlite rl-memory``, issue #27): two facts the kit models as inputs.

- ``contexts``: the device bytes one more process costs when it makes a CUDA call before selecting its device (its
  context lands on device 0; ``sibling_contexts`` x ``sibling_context_gib``, whose default 2.51 GiB is the DS4 job's
  measured sibling vLLM worker, engine buffers included). Each child allocates one small tensor on the default
  device and waits; the parent reads ``torch.cuda.mem_get_info`` before and after each child (the parent's own
  context is made first, so it is not counted).
- ``gather``: the export pattern of verl's Megatron exporter (``per_tensor_generator`` / ``default_tp_concat_fn``,
  ``verl/utils/megatron_utils.py`` @ 1811bfeb): a list of ``k`` shard-sized buffers filled, then ``torch.cat``-ed;
  the peak of ``torch.cuda.max_memory_allocated`` over the resident shard, in full-tensor units
  (``resync_gather_copies``, default 2).

``python bench/rlengine_probe.py --out DIR [--device cpu]`` writes ``DIR/rlengine_raw.json`` as it goes (``--device
cpu``: the same steps on CPU tensors with the process's RSS, to check the script runs; its figures mean nothing);
``python bench/rlengine_probe.py --report DIR/rlengine_raw.json`` writes ``bench/results/rlengine.csv`` with the
command in a comment line.
"""

from __future__ import annotations

import argparse
import csv
import json
import multiprocessing as mp
import os
import sys
import time
from pathlib import Path

MIB = 1024**2
HERE = Path(__file__).resolve().parent


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _used(device: str) -> int:
    """Bytes in use on the device (cuda: the whole device, every process; cpu: this process's RSS)."""
    import torch

    if device == "cuda":
        free, total = torch.cuda.mem_get_info()
        return total - free
    return _rss()


def _child(device: str, ready, stop) -> None:
    import torch

    x = torch.empty(1, device=device)  # no set_device: the context lands on the default device (0)
    x += 1
    ready.set()
    stop.wait(120)


def probe_contexts(device: str, n: int) -> list[dict]:
    """Device bytes added by each of ``n`` child processes that touch the default device."""
    import torch

    torch.empty(1, device=device)  # the parent's own context first
    ctx = mp.get_context("spawn")
    stop, rows, kids = ctx.Event(), [], []
    for i in range(n):
        time.sleep(0.5)
        before = _used(device)
        ready = ctx.Event()
        p = ctx.Process(target=_child, args=(device, ready, stop), daemon=True)
        p.start()
        kids.append(p)
        if not ready.wait(90):
            raise RuntimeError(f"child {i} did not start")
        time.sleep(0.5)
        rows.append({"probe": "context", "index": i, "bytes": _used(device) - before})
    stop.set()
    for p in kids:
        p.join(30)
    return rows


def probe_gather(device: str, full_mib: int, k: int) -> dict:
    """Peak over the resident shard of verl's list-then-cat gather of a ``full_mib`` tensor in ``k`` shards."""
    import torch

    numel = full_mib * MIB // 2 // k * k
    shard = torch.ones(numel // k, dtype=torch.bfloat16, device=device)
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        base = _rss()
    parts = [torch.empty_like(shard) for _ in range(k)]
    for q in parts:  # all_gather's output list, filled
        q.copy_(shard)
    full = torch.cat(parts)
    if device == "cuda":
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - base
    else:
        peak = _rss() - base
    nbytes = full.numel() * full.element_size()
    del parts, full
    return {"probe": "gather", "index": k, "bytes": peak, "full_bytes": nbytes, "copies": round(peak / nbytes, 3)}


def run(out: Path, device: str, contexts: int, full_mib: int) -> dict:
    import torch

    out.mkdir(parents=True, exist_ok=True)
    path = out / "rlengine_raw.json"
    rows: list[dict] = []
    doc: dict = {"device": device, "torch": torch.__version__, "rows": rows}
    if device == "cuda":
        doc["gpu"] = torch.cuda.get_device_name(0)

    def save():
        path.write_text(json.dumps(doc, indent=1) + "\n")

    save()
    for k in (2, 4, 8):
        rows.append(probe_gather(device, full_mib, k))
        save()
    rows.extend(probe_contexts(device, contexts))
    save()
    return doc


def report(raw: Path, dest: Path) -> None:
    doc = json.loads(raw.read_text())
    dest.parent.mkdir(parents=True, exist_ok=True)
    with dest.open("w", newline="") as f:
        f.write(f"# bash bench/rlengine_device.sh OUT; python bench/rlengine_probe.py --report {raw.name}\n")
        f.write(f"# device {doc['device']} {doc.get('gpu', '')}, torch {doc['torch']}\n")
        w = csv.writer(f)
        w.writerow(["probe", "index", "bytes", "MiB", "copies"])
        for r in doc["rows"]:
            w.writerow([r["probe"], r["index"], r["bytes"], round(r["bytes"] / MIB, 1), r.get("copies", "")])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="folder for rlengine_raw.json")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--contexts", type=int, default=3, help="child processes (sibling contexts) to start")
    ap.add_argument("--full-mib", type=int, default=1024, help="size of the gathered tensor in MiB")
    ap.add_argument("--report", type=Path, help="turn a rlengine_raw.json into bench/results/rlengine.csv")
    a = ap.parse_args(argv)
    if a.report:
        report(a.report, HERE / "results" / "rlengine.csv")
        return 0
    if a.out is None:
        ap.error("--out DIR is required without --report")
    doc = run(a.out, a.device, a.contexts, a.full_mib)
    for r in doc["rows"]:
        print(json.dumps(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
