#!/usr/bin/env bash
# What torch.cuda.max_memory_allocated() counts in one process (issue 27, mlite/memory/rl_metrics.py): MemPool
# allocations (vLLM's CuMem pool) and the peak over every phase, never reset. From the repository root:
#
#   bash bench/measuredas_device.sh [OUTDIR]          # OUTDIR defaults to $OUT; under a minute on one GPU
#   MEASUREDAS_DEVICE=cpu OUT=/tmp/x bash bench/measuredas_device.sh   # a try on a CPU: the predictions only
#
# OUTDIR gets measuredas_raw.json (rewritten after each variant), measuredas.csv (the report step, which reruns
# anywhere on the raw JSON: python3 bench/measuredas_pool.py --report RAW --csv bench/results/measuredas.csv),
# measuredas_log.txt and env.txt.
set -u -o pipefail
outdir=${1:-${OUT:?set OUT or give OUTDIR}}
mkdir -p "$outdir" || exit 1
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
device=${MEASUREDAS_DEVICE:-cuda}
{
    date -u +%FT%TZ
    git rev-parse HEAD 2>/dev/null
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>/dev/null || echo "no nvidia-smi"
    python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
} >"$outdir/env.txt" 2>&1
rc=0
timeout -k 10 140 python3 bench/measuredas_pool.py --out "$outdir" --device "$device" >"$outdir/measuredas_log.txt" 2>&1 || rc=$?
cat "$outdir/measuredas_log.txt"
python3 bench/measuredas_pool.py --report "$outdir/measuredas_raw.json" --csv "$outdir/measuredas.csv" || rc=$?
exit "$rc"
