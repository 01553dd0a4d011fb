#!/usr/bin/env bash
# Muon vs Adam on one GPU (issue 26): the lite runtime's dist_opt with --optimizer-algorithm muon against adam on the
# small dense model of bench/mfsdp_device.py -- optimizer-state bytes, the CUDA peaks and the step time (median of
# >= 3 alternating pairs) next to the estimate. From the repository root:
#
#   bash bench/muon_device.sh [OUTDIR]          # OUTDIR defaults to $OUT; < 6 min on one H200 (about 2 expected)
#
# 1. python3 bench/muon_device.py --out OUTDIR --device cuda (OUTDIR/muon_raw.json, rewritten as it goes);
#    MUON_ARGS: more arguments, e.g. MUON_ARGS="--device cpu --tiny" OUT=/tmp/x bash bench/muon_device.sh
# 2. python3 bench/muon_device.py --report OUTDIR/muon_raw.json --csv OUTDIR/muon.csv (copy both to bench/results/).
set -u -o pipefail
outdir=${1:-${OUT:?set OUT or give OUTDIR}}
mkdir -p "$outdir" || exit 1
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
rc=0 extra=()
read -r -a extra <<<"${MUON_ARGS:-}"
timeout -k 10 "${MUON_TIMEOUT_S:-330}" "$py" bench/muon_device.py --out "$outdir" --device cuda "${extra[@]}" \
    >"$outdir/muon_log.txt" 2>&1 || rc=$?
echo "muon_device: measure rc=$rc after $((SECONDS - t0)) s"
tail -n 40 "$outdir/muon_log.txt"
report_rc=0
if [ -f "$outdir/muon_raw.json" ]; then
    "$py" bench/muon_device.py --report "$outdir/muon_raw.json" --csv "$outdir/muon.csv" || report_rc=$?
else
    report_rc=1
fi
echo "muon_device: report rc=$report_rc; done after $((SECONDS - t0)) s"
[ "$rc" -eq 0 ] && exit "$report_rc"
exit "$rc"
