#!/usr/bin/env bash
# Predicted vs measured lite-runtime step time on one GPU (issue 25): the whole device call. From the repository root:
#
#   bash bench/step_time_device.sh [OUTDIR]          # OUTDIR defaults to $OUT
#
# 1. python3 bench/step_time.py --out OUTDIR --device cuda: calibrate on this GPU (mlite.time.calibrate.calibrate,
#    what `python3 -m mlite calibrate CONFIG --device cuda` runs) with the dense and with the MoE model's shapes, then
#    the 12 configurations of bench/step_time.py; the raw JSON is rewritten after each one, so a timeout loses only
#    the configuration it cut. STEP_DEADLINE_S (default 380): no configuration starts after it; STEP_TIMEOUT_S
#    (default 470): the measuring step is ended there. STEP_ARGS: more arguments for it (later ones win), e.g.
#    STEP_ARGS="--device cpu --tiny --only dense_mb1" OUT=/tmp/x bash bench/step_time_device.sh   (a try on a CPU)
# 2. python3 bench/step_time.py --report: the CSV and the ratio table (no GPU needed: it reruns anywhere on the raw
#    JSON, which is how bench/results/step_time.csv is made from OUTDIR/step_time_raw.json).
#
# OUTDIR gets step_time_raw.json, step_time.csv, step_time_log.txt (everything the steps printed), env.txt (GPU,
# driver, torch, Triton, the tree). Nothing else is written outside /tmp. PYTHONPATH is set for this script only.
set -u -o pipefail
outdir=${1:-${OUT:?set OUT or give OUTDIR}}
mkdir -p "$outdir" || exit 1
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
t0=$SECONDS
{
    date -u +%FT%TZ
    git rev-parse HEAD 2>/dev/null && git status --short 2>/dev/null | head -n 30
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv
    python3 -c 'import torch, triton; print("torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__)'
    echo "cpus $(nproc)"
} >"$outdir/env.txt" 2>&1
cat "$outdir/env.txt"

rc=0 extra=()
read -r -a extra <<<"${STEP_ARGS:-}"
timeout -k 10 "${STEP_TIMEOUT_S:-470}" python3 bench/step_time.py --out "$outdir" --device cuda \
    --deadline-s "${STEP_DEADLINE_S:-380}" "${extra[@]}" >"$outdir/step_time_log.txt" 2>&1 || rc=$?
echo "step_time_device: measure rc=$rc after $((SECONDS - t0)) s"
if [ "$rc" -eq 0 ]; then grep -E '^== ' "$outdir/step_time_log.txt"; else tail -n 60 "$outdir/step_time_log.txt"; fi

report_rc=0
python3 bench/step_time.py --report "$outdir/step_time_raw.json" --csv "$outdir/step_time.csv" \
    >>"$outdir/step_time_log.txt" 2>&1 || report_rc=$?
if [ "$report_rc" -eq 0 ]; then sed -n '/^configuration /,$p' "$outdir/step_time_log.txt"; else tail -n 30 "$outdir/step_time_log.txt"; fi
echo "step_time_device: report rc=$report_rc; done after $((SECONDS - t0)) s"
[ "$rc" -eq 0 ] && exit "$report_rc"
exit "$rc"
