#!/usr/bin/env bash
# The colocated-RL-budget probe on one GPU (issue #27): sibling CUDA contexts on device 0 and verl's list-then-cat
# gather peak (bench/rlengine_probe.py says what each measures). Writes OUT/rlengine_raw.json as it goes, then
# OUT/rlengine.csv. Under a minute on one H200.
#
#   bash bench/rlengine_device.sh OUT [--device cpu] [probe flags]
set -u -o pipefail
OUT=${1:?usage: bash bench/rlengine_device.sh OUT [--device cpu]}
shift
KIT=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$OUT"
PYTHON=${PYTHON:-python}
"$PYTHON" "$KIT/bench/rlengine_probe.py" --out "$OUT" "$@" || exit 1
cd "$KIT" && "$PYTHON" - "$OUT" <<'PY'
import sys
from pathlib import Path
sys.path.insert(0, "bench")
import rlengine_probe as p
out = Path(sys.argv[1])
p.report(out / "rlengine_raw.json", out / "rlengine.csv")
print(f"wrote {out / 'rlengine.csv'}")
PY
