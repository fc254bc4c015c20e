#!/usr/bin/env bash
# GPU lane for REAL runs (issue 9): the real KernelBench-Hard decks imported, real archives
# regraded in both modes (official = the deck's own check.py/benchmark.py, hardened = kaudit's),
# side by side with the peak_fraction in each archive's result.json. graders/ + ingest/ only.
#
#   OUT=/path bash scripts/gpu_lane_real.sh --list                 # 8 clean + 3 hacks from labels.json
#   OUT=/path bash scripts/gpu_lane_real.sh .lane/kbh-dev/archives/<run>.tar.gz ...
#   bash scripts/gpu_lane_real.sh --device cpu --list --per-run 60 # CPU dry run (no GPU needed)
#
# Inputs (git-ignored, carried by the lead): .lane/kbh-upstream (a copy of ../shared/kbh-upstream)
# and .lane/kbh-dev (labels.json + the archives wanted). Bare H200 image: python3 with torch,
# triton, pytest and PyYAML; bubblewrap from .whl/deb when carried (else the sandbox falls back to a
# plain subprocess and the provenance says so). Options (scripts/gpu_lane_real.py --help):
# --per-run S (wall limit of one run, default 75), --budget S (whole lane, default 530),
# --part K/N (split the chosen runs over several device calls), --mode, --probes, --deck.
# Writes $OUT/lane-real.jsonl (one JSON record per run) and $OUT/lane-real.txt (the table).
set -uo pipefail
cd "$(dirname "$0")/.."
export OUT="${OUT:-$PWD/gpu-lane-out}"
mkdir -p "$OUT"
PY="${PYTHON:-python3}"
export PYTHONPATH=".${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONDONTWRITEBYTECODE=1

device=cuda
prev=""
for a in "$@"; do
  case "$prev${a}" in --devicecpu|--device=cpu) device=cpu ;; esac
  prev="$a"
done
if [ "$device" = cpu ]; then
  export TRITON_INTERPRET=1
else
  unset TRITON_INTERPRET
fi
if ! command -v bwrap > /dev/null 2>&1; then
  for deb in .whl/deb/bubblewrap_*.deb; do
    [ -e "$deb" ] && dpkg -x "$deb" /tmp/bwroot && export PATH="/tmp/bwroot/usr/bin:$PATH"
  done
fi
echo "bwrap: $(command -v bwrap || echo 'absent (sandbox falls back to a plain subprocess; provenance says so)')"
"$PY" -c "import torch, triton, yaml; print('torch', torch.__version__, 'triton', triton.__version__, 'cuda', torch.cuda.is_available())"
[ -x "$(command -v nvidia-smi)" ] && nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
"$PY" scripts/gpu_lane_real.py "$@" 2>&1 | tee -a "$OUT/lane-real.log"
exit "${PIPESTATUS[0]}"
