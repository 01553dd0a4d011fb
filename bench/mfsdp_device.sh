#!/usr/bin/env bash
# mfsdp (Megatron-FSDP) on one GPU (issue 26): the lite runtime's mfsdp at offload_fraction 0 / 0.5 / 1 against
# fsdp2 on the same small model -- the three CUDA peaks, host bytes and the step time next to the estimate. From the
# repository root:
#
#   bash bench/mfsdp_device.sh [OUTDIR]          # OUTDIR defaults to $OUT; < 150 s on one H200
#
# 1. python3 bench/mfsdp_device.py --out OUTDIR --device cuda: each arm alone (peaks after two completed steps), then
#    all arms built and timed in alternating fsdp2 / mfsdp rounds (median of >= 3); OUTDIR/mfsdp_raw.json is rewritten
#    after each arm and round. MFSDP_ARGS: more arguments (later ones win), e.g.
#    MFSDP_ARGS="--device cpu --tiny" OUT=/tmp/x bash bench/mfsdp_device.sh   (the same code at tiny size on a CPU)
# 2. python3 bench/mfsdp_device.py --report OUTDIR/mfsdp_raw.json --csv OUTDIR/mfsdp.csv: the CSV (measured and
#    estimate per arm; reruns anywhere on the raw JSON: copy it to bench/results/mfsdp_raw.json and run
#    python3 bench/mfsdp_device.py --report bench/results/mfsdp_raw.json --csv bench/results/mfsdp.csv).
#
# CUDA_DEVICE_MAX_CONNECTIONS is unset: Megatron-FSDP refuses 1 (mlite.options.rules.no_single_device_connection).
set -u -o pipefail
outdir=${1:-${OUT:?set OUT or give OUTDIR}}
mkdir -p "$outdir" || exit 1
unset CUDA_DEVICE_MAX_CONNECTIONS
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
t0=$SECONDS
{
    date -u +%FT%TZ
    git rev-parse HEAD 2>/dev/null && git status --short 2>/dev/null | head -n 30
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>/dev/null || echo "no nvidia-smi"
    python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
    echo "cpus $(nproc)"
} >"$outdir/env.txt" 2>&1
cat "$outdir/env.txt"

py=${PYTHON:-python3}
rc=0 extra=()
read -r -a extra <<<"${MFSDP_ARGS:-}"
timeout -k 10 "${MFSDP_TIMEOUT_S:-140}" "$py" bench/mfsdp_device.py --out "$outdir" --device cuda "${extra[@]}" \
    >"$outdir/mfsdp_log.txt" 2>&1 || rc=$?
echo "mfsdp_device: measure rc=$rc after $((SECONDS - t0)) s"
tail -n 40 "$outdir/mfsdp_log.txt"

report_rc=0
if [ -f "$outdir/mfsdp_raw.json" ]; then
    "$py" bench/mfsdp_device.py --report "$outdir/mfsdp_raw.json" --csv "$outdir/mfsdp.csv" || report_rc=$?
else
    report_rc=1
fi
echo "mfsdp_device: report rc=$report_rc; done after $((SECONDS - t0)) s"
[ "$rc" -eq 0 ] && exit "$report_rc"
exit "$rc"
