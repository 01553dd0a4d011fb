#!/usr/bin/env bash
# The verl SFT GPU row on the device machine (wheel folders: bench/gpu_verl_wheels.py; the row: gpu_verl_sft.py).
#
#   bash KIT/bench/gpu_verl_sft_device.sh run WHEELS [OUTDIR]   install WHEELS/*.whl into /tmp/verl_site, run the row
#   bash KIT/bench/gpu_verl_sft_device.sh pairs WHEELS [OUTDIR] install once, then the like-for-like rows:
#        gpu_verl_sft.py --pairs 3 (the kit's data workers) and --pairs 3 --num-workers 0, each under VERL_DEADLINE_S
#   bash KIT/bench/gpu_verl_sft_device.sh stage A               two-call plan, call A: keep A's ray part on the machine
#
# Run from the repository root (the device's working directory): .gl/verlgpu_stage is taken from there. KIT is the
# kit snapshot the wheel folder carries (one/kit, b/kit).
# WHEELS is one/ (one call) or b/ (call B of the two-call plan: ray's wheel is put together from b/'s part and the
# part call A kept, then checked against b/SHA256SUMS). OUTDIR (default $OUT/verl_sft) gets gpu_verl_sft.csv,
# gpu_verl_sft_raw.json; the run directory (and verl's ~17 GB end-of-run checkpoint, removed afterwards) is under
# /tmp/verl_sft. Nothing outside /tmp/verl_site, /tmp/verl_sft, /tmp/verl_stage, .gl/verlgpu_stage and OUTDIR is
# written (VERL_SITE, VERL_WORK, VERL_STAGE_DIRS move them); PYTHONPATH is set for this script only.
set -u -o pipefail
KIT=$(cd "$(dirname "$0")/.." && pwd)
# where call A leaves its part: /tmp and .gl/verlgpu_stage (ignored, not carried: kept between calls on a warm machine)
read -r -a STAGES <<<"${VERL_STAGE_DIRS:-/tmp/verl_stage $PWD/.gl/verlgpu_stage}"
SITE=${VERL_SITE:-/tmp/verl_site}  # where the wheels are installed
WORK=${VERL_WORK:-/tmp/verl_sft}  # the run directory's parent
fail() { echo "gpu_verl_sft_device: FAILED: $*"; exit 1; }

stage() {
    local a=$1
    (cd "$a" && sha256sum -c --quiet SHA256SUMS) || fail "checksums of $a"
    for d in "${STAGES[@]}"; do
        mkdir -p "$d" || fail "mkdir $d"
        cp "$a"/*.part-aa "$d"/ || fail "copy to $d"
    done
    ls -l "${STAGES[@]}"
    echo "gpu_verl_sft_device: staged $(ls "$a"/*.part-aa)"
}

assemble() {  # b/*.part-ab + the staged *.part-aa -> b/ray-...whl (checked by b/SHA256SUMS)
    local b=$1 ab whl
    for ab in "$b"/*.part-ab; do
        [ -e "$ab" ] || return 0
        whl=${ab%.part-ab}
        local aa=""
        for d in "$b" "${STAGES[@]}"; do
            [ -f "$d/$(basename "$whl").part-aa" ] && { aa="$d/$(basename "$whl").part-aa"; break; }
        done
        [ -n "$aa" ] || fail "no $(basename "$whl").part-aa in ${STAGES[*]}: call A did not run on this machine (it was given back between the calls?)"
        cat "$aa" "$ab" >"$whl" || fail "cat $aa $ab"
        echo "gpu_verl_sft_device: assembled $whl from $aa"
    done
}

install() {
    local w=$1 t0=$SECONDS
    mkdir -p "$WORK"
    assemble "$w"
    (cd "$w" && sha256sum -c --quiet SHA256SUMS) || fail "checksums of $w"
    rm -rf "$SITE"
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
        "$w"/*.whl || fail "pip install"
    local n
    n=$(find "$w" -maxdepth 1 -name '*.whl' | wc -l)
    echo "gpu_verl_sft_device: installed $n wheels in $((SECONDS - t0)) s; $(df -h /tmp | tail -1)"
    export PYTHONPATH=$SITE NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
    export PYTHONUNBUFFERED=1
}

bench() {  # OUTDIR DEADLINE_S ARGS...: one gpu_verl_sft.py row (VERL_BENCH_ARGS appended, e.g. "--device cpu --tiny")
    local outdir=$1 deadline=$2 rc=0 extra=() t0=$SECONDS
    shift 2
    mkdir -p "$outdir"
    read -r -a extra <<<"${VERL_BENCH_ARGS:-}"
    python3 "$KIT/bench/gpu_verl_sft.py" --out "$outdir" --run-dir "$WORK/run" --deadline-s "$deadline" "$@" \
        "${extra[@]}" || rc=$?
    rm -rf "$WORK/run/checkpoints"
    echo "gpu_verl_sft_device: $* rc=$rc after $((SECONDS - t0)) s"
    return $rc
}

run() {
    local outdir=${2:-${OUT:-/tmp/out}/verl_sft}
    install "$1"
    bench "$outdir" "${VERL_DEADLINE_S:-200}"
}

pairs() {
    local outdir=${2:-${OUT:-/tmp/out}/verl_sft} rc=0
    install "$1"
    bench "$outdir" "${VERL_DEADLINE_S:-150}" --pairs 3 || rc=$?
    bench "$outdir" "${VERL_DEADLINE_S:-150}" --pairs 3 --num-workers 0 || rc=$?
    return $rc
}

case "${1:-}" in
stage) stage "${2:?A folder}" ;;
run) run "${2:?wheel folder}" "${3:-}" ;;
pairs) pairs "${2:?wheel folder}" "${3:-}" ;;
*) echo "usage: $0 stage A_DIR | run WHEELS_DIR [OUTDIR] | pairs WHEELS_DIR [OUTDIR]" >&2; exit 2 ;;
esac
