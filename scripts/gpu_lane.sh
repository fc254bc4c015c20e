#!/usr/bin/env bash
# The GPU lane: ONE command on the lent H200 (bare image: python3 with torch, triton, pytest,
# PyYAML; no kaudit install, nothing carried but the working tree).
#
#   bash scripts/gpu_lane.sh            # output teed to $OUT/gpu-lane.txt ($OUT defaults to ./gpu-lane-out)
#
# Sections (each under its own time budget so one hang cannot eat the device's 10-minute command cap):
#   1. host facts (nvidia-smi, versions)
#   2. every GPU-marked test of the graders and the deck (tests/graders tests/kernels: paths that
#      never import the service): correctness tests 4 at a time, then `timing` tests alone
#   3. kaudit bench of each genuine example at full shapes (benchmark.log lines)
#   4. bench/timing_validation.py: kaudit's median vs triton.testing.do_bench (cold cache)
#   5. scripts/gpu_lane_regrade.sh when present (the regrade engineer's end-to-end regrades)
# The lead commits $OUT/gpu-lane.txt (and timing_validation.json) under docs/gpu-lane/.
# GPU_LANE_SECTIONS (default "host tests bench valid regrade") picks sections, so the lane can be
# split over two device calls if it nears the per-command limit; each call appends to the log
# when GPU_LANE_APPEND=1. The device caps one command at 10 minutes; with the regrade lane included
# the whole run does not fit in one call, so the lead runs, for example:
#   GPU_LANE_SECTIONS="host tests" bash scripts/gpu_lane.sh
#   GPU_LANE_APPEND=1 GPU_LANE_SECTIONS="bench valid" bash scripts/gpu_lane.sh
#   GPU_LANE_APPEND=1 GPU_LANE_SECTIONS="regrade" bash scripts/gpu_lane.sh   (regrade's own -k split inside)
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=".${PYTHONPATH:+:$PYTHONPATH}"
unset TRITON_INTERPRET
OUT="${OUT:-$PWD/gpu-lane-out}"
mkdir -p "$OUT"
LOG="$OUT/gpu-lane.txt"
PY="${PYTHON:-python3}"
T_TESTS="${GPU_LANE_TEST_TIMEOUT:-330}"
T_TIMING="${GPU_LANE_TIMING_TIMEOUT:-200}"
T_BENCH="${GPU_LANE_BENCH_TIMEOUT:-60}"
T_VALID="${GPU_LANE_VALIDATION_TIMEOUT:-300}"
SECTIONS=" ${GPU_LANE_SECTIONS:-host tests bench valid regrade} "
want() { [[ "$SECTIONS" == *" $1 "* ]]; }

section() { echo; echo "=================== $* ($(date -u +%H:%M:%S))"; }

main() {
  local status=0
  if want host; then
  section "host"
  nvidia-smi --query-gpu=index,name,uuid,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv || true
  nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv || true
  "$PY" - <<'EOF'
import platform, torch, triton
print("python", platform.python_version(), "torch", torch.__version__, "cuda", torch.version.cuda,
      "triton", triton.__version__)
p = torch.cuda.get_device_properties(0)
print("device", torch.cuda.get_device_name(0), "sm", f"{p.major}.{p.minor}", "L2_bytes",
      getattr(p, "L2_cache_size", None), "SMs", p.multi_processor_count)
EOF
  fi

  if want tests; then
  # GPU_LANE_TEST_PATHS narrows the set when a device call's time is short.
  # Correctness tests measure nothing: they run GPU_LANE_WORKERS at a time (pytest-xdist, on the
  # image) to fit the device's 10-minute call. Tests marked `timing` then run alone, one by one.
  # The do_bench agreement test is the `valid` section's script; with that section selected the
  # test is not run twice.
  section "pytest -m 'gpu and not timing' -n ${GPU_LANE_WORKERS:-4} (graders + deck: correctness)"
  # shellcheck disable=SC2086
  timeout -k 10 "$T_TESTS" "$PY" -m pytest -m "gpu and not timing" -n "${GPU_LANE_WORKERS:-4}" -q \
      -p no:cacheprovider -rA --durations=20 ${GPU_LANE_TEST_PATHS:-tests/graders tests/kernels} \
      2>&1 | tee "$OUT/.correctness.txt"
  local rc=${PIPESTATUS[0]}
  # The workers share one GPU's memory: a test can run out of it beside three others (session 21: 06
  # genuine_torch, 2 GiB short while another worker held 64 GiB). Each failure is run again alone,
  # and the log keeps both results; the section passes only if every failure passes alone.
  local failed
  failed=$(grep -oE '^FAILED [^ ]+' "$OUT/.correctness.txt" | cut -d' ' -f2 | sort -u | tr '\n' ' ')
  if [ "$rc" != 0 ] && [ -n "$failed" ]; then
    section "the failures above, each again alone (one worker, the GPU to itself)"
    # shellcheck disable=SC2086
    timeout -k 10 "$T_TESTS" "$PY" -m pytest -q -p no:cacheprovider -rA $failed || status=1
  elif [ "$rc" != 0 ]; then
    status=1
  fi
  rm -f "$OUT/.correctness.txt"
  section "pytest -m 'gpu and timing' (alone, sequential)"
  local kexpr=""
  want valid && kexpr="not do_bench"
  # shellcheck disable=SC2086
  timeout -k 10 "$T_TIMING" "$PY" -m pytest -m "gpu and timing" ${kexpr:+-k "$kexpr"} -q -p no:cacheprovider \
      -rA --durations=10 ${GPU_LANE_TEST_PATHS:-tests/graders tests/kernels} || status=1
  fi

  if want bench; then
  section "benchmarks of each genuine example (full shapes, cold L2)"
  for f in kernels/hard/*/examples/genuine_*.py; do
    [ -e "$f" ] || continue
    problem="$(basename "$(dirname "$(dirname "$f")")")"
    echo "--- kaudit bench $f --problem $problem"
    timeout -k 5 "$T_BENCH" "$PY" -m graders.cli bench "$f" --problem "$problem" --device cuda || status=1
  done
  fi

  if want valid; then
  section "timing validation (kaudit vs triton.testing.do_bench)"
  timeout -k 5 "$T_VALID" "$PY" bench/timing_validation.py --json "$OUT/timing_validation.json" || status=1
  fi

  if want regrade && [ -f scripts/gpu_lane_regrade.sh ]; then
    section "regrade lane (scripts/gpu_lane_regrade.sh)"
    OUT="$OUT" bash scripts/gpu_lane_regrade.sh || status=1
  fi

  section "gpu lane done: status=$status"
  return "$status"
}

if [ "${GPU_LANE_APPEND:-0}" = 1 ]; then main 2>&1 | tee -a "$LOG"; else main 2>&1 | tee "$LOG"; fi
exit "${PIPESTATUS[0]}"
