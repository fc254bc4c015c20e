#!/usr/bin/env bash
# Multi-GPU queue lane: N regrades of the lane examples over G GPUs, one worker process per GPU.
#
#   OUT=/path GPUS=all N=12 bash scripts/gpu_lane_multi.sh
#
# Reports makespan against (sum of job times)/G (goal <= 1.05x), GPU idle time while work waited,
# per-GPU lock waits (from each measurement's provenance) and whether two jobs ever shared a GPU.
# Writes $OUT/gpu-multi.jsonl and $OUT/gpu-multi.txt; commit them under docs/gpu-lane/.
# Bare image: carry .whl/ (service wheels + bubblewrap .deb), as for scripts/gpu_lane_regrade.sh.
# PROBES (default same_storage_overwrite,l2_policy), DEVICE=cpu rehearses the plumbing on CPU slots.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu-lane-out}"
mkdir -p "$OUT"
PY="${PYTHON:-python3}"
export PYTHONPATH=".${PYTHONPATH:+:$PYTHONPATH}"
if [ "${DEVICE:-cuda}" = "cuda" ]; then unset TRITON_INTERPRET; else export TRITON_INTERPRET=1; fi

if compgen -G ".whl/*.whl" > /dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH="$PYTHONPATH:/tmp/site"
fi
if ! command -v bwrap > /dev/null 2>&1; then
  for deb in .whl/deb/bubblewrap_*.deb; do
    [ -e "$deb" ] && dpkg -x "$deb" /tmp/bwroot && export PATH="/tmp/bwroot/usr/bin:$PATH"
  done
fi
command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=index,name,uuid,driver_version --format=csv | tee "$OUT/gpu-multi-host.txt"
"$PY" scripts/gpu_lane_multi.py --out "$OUT" --gpus "${GPUS:-all}" --jobs "${N:-0}" \
  --probes "${PROBES:-same_storage_overwrite,l2_policy}" --device "${DEVICE:-cuda}" --wait "${WAIT_S:-540}"
