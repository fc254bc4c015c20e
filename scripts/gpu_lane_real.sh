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
#
# The real decks' check.py of 02/03/05/06 import the harness's property stress, which needs
# `hypothesis` (and `sortedcontainers`); the bare image lacks them. Build a carried site folder
# once, here (pure-Python packages copied from the local venv), and carry `.lane`:
#   PYTHON=/work/main/.venv/bin/python bash scripts/gpu_lane_real.sh --make-site
#
# A record longer than one device call (06 in both modes: about 1,000 s; a call is at most 600 s):
#   bash scripts/gpu_lane_real.sh --detach WAIT [lane options and archives]   # first call
#   bash scripts/gpu_lane_real.sh --collect WAIT                              # next call(s), at once
# --detach copies this tree to $KAUDIT_LANE_BG (default /tmp/kaudit-lane-bg), starts the lane there
# in a new process session (the device keeps such a process running between calls while the
# machine stays warm: issue the next call within its 30 s), and waits up to WAIT seconds for it;
# --collect waits up to WAIT seconds more. Both copy what the lane wrote so far into $OUT/bg and
# print its tail; $OUT/bg/rc exists once the lane has ended.
set -uo pipefail
cd "$(dirname "$0")/.."
export OUT="${OUT:-$PWD/gpu-lane-out}"
mkdir -p "$OUT"
BG="${KAUDIT_LANE_BG:-/tmp/kaudit-lane-bg}"
_bg_wait() {  # wait up to $1 s for the detached lane, then hand back what it wrote
  local left="$1"
  while [ ! -f "$BG/out/rc" ] && [ "$left" -gt 0 ]; do sleep 5; left=$((left - 5)); done
  rm -rf "$OUT/bg" && cp -r "$BG/out" "$OUT/bg"
  tail -n 40 "$BG/out/lane.log" 2> /dev/null | cut -c1-400
  if [ -f "$BG/out/rc" ]; then echo "# detached lane ended, rc=$(cat "$BG/out/rc")"; return 0; fi
  echo "# detached lane still running: collect it with --collect WAIT in the next call (within 30 s)"
  return 3
}
case "${1:-}" in
  --detach)
    wait_s="${2:?--detach WAIT}"; shift 2
    if [ -d "$BG/out" ] && [ ! -f "$BG/out/rc" ]; then echo "a detached lane is still running in $BG" >&2; exit 2; fi
    rm -rf "$BG" && mkdir -p "$BG/out" "$BG/tree" || exit 2
    tar -c --exclude=./.venv --exclude=./.git . | tar -x -C "$BG/tree" || exit 2
    args=$(printf ' %q' "$@")
    setsid bash -c "cd $(printf %q "$BG/tree") && OUT=$(printf %q "$BG/out/r") bash scripts/gpu_lane_real.sh$args \
      > $(printf %q "$BG/out/lane.log") 2>&1; echo \$? > $(printf %q "$BG/out/rc")" < /dev/null > /dev/null 2>&1 &
    echo "# detached lane started in $BG (pid $!)"
    _bg_wait "$wait_s"; exit $? ;;
  --collect)
    [ -d "$BG/out" ] || { echo "no detached lane in $BG" >&2; exit 2; }
    _bg_wait "${2:?--collect WAIT}"; exit $? ;;
esac
PY="${PYTHON:-python3}"
if [ "${1:-}" = "--make-site" ]; then
  # hypothesis ships a compiled part (hypothesis/_native*.so): copying this host's CPython 3.11
  # build breaks on the image's 3.12, so the wheels are fetched for the image's interpreter
  # (DEVICE_PY, default 3.12) at the version installed here, and unpacked into .lane/site.
  ver=$("$PY" -c "import hypothesis; print(hypothesis.__version__)")
  rm -rf .lane/site /tmp/kaudit-site-wheels && mkdir -p .lane/site /tmp/kaudit-site-wheels
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version "${DEVICE_PY:-3.12}" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d /tmp/kaudit-site-wheels "hypothesis==$ver" sortedcontainers || exit 1
  for w in /tmp/kaudit-site-wheels/*.whl; do "$PY" -m zipfile -e "$w" .lane/site && echo "unpacked $(basename "$w")"; done
  exit 0
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
[ -d .lane/site ] && export PYTHONPATH="$PYTHONPATH:$PWD/.lane/site"
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
# A carried CUTLASS source tree (scripts/fetch_gpu_wheels.sh puts PyPI's nvidia-cutlass wheel, which
# ships the whole tree under cutlass_library/source, in .whl/deps): unpacked once and declared as a
# build dependency at the paths the corpus's CUTLASS runs expect (/tmp/cutlass, /workspace/refs/cutlass),
# unless the caller set KAUDIT_BUILD_DEPS itself (docs/regrade.md, "Declared build dependencies").
for whl in .whl/deps/nvidia_cutlass-*.whl; do
  [ -e "$whl" ] || continue
  [ -d /tmp/kaudit-cutlass/cutlass_library/source/include ] || "$PY" -m zipfile -e "$whl" /tmp/kaudit-cutlass
  src=/tmp/kaudit-cutlass/cutlass_library/source
  export KAUDIT_BUILD_DEPS="${KAUDIT_BUILD_DEPS-/tmp/cutlass=$src,/workspace/refs/cutlass=$src}"
done
echo "build deps: ${KAUDIT_BUILD_DEPS:-none}"
echo "bwrap: $(command -v bwrap || echo 'absent (sandbox falls back to a plain subprocess; provenance says so)')"
"$PY" -c "import torch, triton, yaml; print('torch', torch.__version__, 'triton', triton.__version__, 'cuda', torch.cuda.is_available())"
"$PY" -c "import hypothesis; print('hypothesis', hypothesis.__version__)" 2>/dev/null \
  || echo "WARNING: hypothesis missing: the real decks' property stress (02/03/05/06 check.py) cannot import; official mode reports harness_env_missing (build .lane/site: --make-site)"
[ -x "$(command -v nvidia-smi)" ] && nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
"$PY" scripts/gpu_lane_real.py "$@" 2>&1 | tee -a "$OUT/lane-real.log"
exit "${PIPESTATUS[0]}"
