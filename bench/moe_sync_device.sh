#!/usr/bin/env bash
# MoE host syncs and the lite-vs-transformers MoE ratio on one GPU (issue 31). From the repository root:
#
#   bash bench/moe_sync_device.sh [OUTDIR]      # OUTDIR defaults to $OUT; < 5 min on one H200 (about 3 expected)
#
# 1. python3 bench/gpu_speed.py --out OUTDIR/speed --only moe --pairs 3: MOE_SMALL, lite then transformers+FSDP2 in 3
#    alternating pairs (the "ratio moe mbN" rows: the median pair; new rows "... min" / "... max": the spread; "mfu moe
#    mb4" for both sides). Merge: python3 bench/gpu_speed.py --out DIR --only moe --merge
#    bench/results/gpu_speed_raw.json, or copy OUTDIR/speed/gpu_speed_raw.json's "moe" section into it and rerun the
#    report step (python3 bench/gpu_speed.py --report bench/results/gpu_speed_raw.json --csv bench/results/gpu_speed.csv).
# 2. python3 bench/moe_sync.py --out OUTDIR/sync: host syncs of one MoE layer (forward, backward) and of one lite
#    micro-batch + optimizer step under torch.cuda.set_sync_debug_mode("warn"), and the layer's time against the
#    dispatch before issue 31 (OUTDIR/sync/moe_sync_raw.json, moe_sync.csv; copy both to bench/results/).
set -u -o pipefail
outdir=${1:-${OUT:?set OUT or give OUTDIR}}
mkdir -p "$outdir/speed" "$outdir/sync" || exit 1
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
t0=$SECONDS
{
    date -u +%FT%TZ
    git rev-parse HEAD 2>/dev/null && git status --short 2>/dev/null | head -n 30
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>/dev/null || echo "no nvidia-smi"
    python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
} >"$outdir/env.txt" 2>&1
cat "$outdir/env.txt"
py=${PYTHON:-python3}
rc=0
timeout -k 10 "${MOE_SPEED_TIMEOUT_S:-200}" "$py" bench/gpu_speed.py --out "$outdir/speed" --only moe --pairs 3 \
    --deadline-s 150 >"$outdir/speed_log.txt" 2>&1 || rc=$?
echo "moe_sync_device: gpu_speed rc=$rc after $((SECONDS - t0)) s"
tail -n 25 "$outdir/speed_log.txt"
src=0
timeout -k 10 "${MOE_SYNC_TIMEOUT_S:-80}" "$py" bench/moe_sync.py --out "$outdir/sync" >"$outdir/sync_log.txt" 2>&1 || src=$?
echo "moe_sync_device: moe_sync rc=$src after $((SECONDS - t0)) s"
tail -n 25 "$outdir/sync_log.txt"
echo "moe_sync_device: done after $((SECONDS - t0)) s"
[ "$rc" -eq 0 ] && exit "$src"
exit "$rc"
