#!/usr/bin/env bash
# The regrade part of the GPU lane (run on the lent H200, alone or from scripts/gpu_lane.sh).
#
#   OUT=/path bash scripts/gpu_lane_regrade.sh
#
# Bare image: python3 with torch, triton, pytest, PyYAML. The service parts (worker path) need the
# wheels the lead carries in .whl/; they are installed into /tmp/site when present, otherwise the
# worker-path test skips and says why. Regrades of the example solutions run through the real lock
# and sandbox (bubblewrap when installable: apt-get is tried, the fallback is recorded in provenance).
# Writes $OUT/gpu-regrade.jsonl (one record per regrade) and $OUT/gpu-regrade.txt (the summary table).
# GPU_LANE_REGRADE_TIMEOUT (default 540 s) bounds the pytest run; GPU_LANE_REGRADE_K passes a -k
# expression so the lane can be split over several device calls (e.g. "genuine or overhead", then
# "stale or live", then "l2 or worker"); GPU_LANE_REGRADE_TESTS names the tests (node ids, run in that
# order) instead of the whole file; KAUDIT_GPU_LOCK_PATH points the lock at the harness's.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu-lane-out}"
mkdir -p "$OUT"
PY="${PYTHON:-python3}"
T_REGRADE="${GPU_LANE_REGRADE_TIMEOUT:-540}"
export PYTHONPATH=".${PYTHONPATH:+:$PYTHONPATH}"
unset TRITON_INTERPRET

if compgen -G ".whl/*.whl" > /dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH="$PYTHONPATH:/tmp/site"
  # say why the worker-path test would skip (an ImportError of the carried service wheels)
  "$PY" -c "import sqlalchemy, fastapi, alembic, pydantic_settings; print('service wheels: importable')" 2>&1 | tail -2
fi
if ! command -v bwrap > /dev/null 2>&1; then
  # The device image has no registry access: the lead carries Debian's bubblewrap .deb in .whl/deb/.
  for deb in .whl/deb/bubblewrap_*.deb; do
    [ -e "$deb" ] && dpkg -x "$deb" /tmp/bwroot && export PATH="/tmp/bwroot/usr/bin:$PATH"
  done
fi
echo "bwrap: $(command -v bwrap || echo 'absent (sandbox falls back to a plain subprocess; provenance says so)')"

export KAUDIT_GPU_RESULTS="$OUT/gpu-regrade.jsonl"
[ "${GPU_LANE_APPEND:-0}" = "1" ] || rm -f "$KAUDIT_GPU_RESULTS"
status=0
# GPU_LANE_REGRADE_TESTS: node ids to run, in this order (default: the whole file)
# shellcheck disable=SC2086
timeout "$T_REGRADE" "$PY" -m pytest -q -rA -m gpu -p no:cacheprovider ${GPU_LANE_REGRADE_TESTS:-tests/regrade/test_gpu_regrade.py} \
  ${GPU_LANE_REGRADE_K:+-k "$GPU_LANE_REGRADE_K"} > "$OUT/gpu-regrade-pytest.txt" 2>&1 || status=1
tail -80 "$OUT/gpu-regrade-pytest.txt"

"$PY" - "$KAUDIT_GPU_RESULTS" <<'PYEOF' | tee "$OUT/gpu-regrade.txt"
import json, sys
from pathlib import Path
path = Path(sys.argv[1])
rows = [json.loads(l) for l in path.read_text().splitlines() if l.strip()] if path.exists() else []
print(f"{'example':32} {'correct':8} {'peak':>8} {'wall_s':>8} {'sandbox':10} probes / notes")
for r in rows:
    if "job_state" in r:
        res = r.get("result") or {}
        print(f"{r['example']:32} {str(res.get('correct')):8} {str(res.get('peak_fraction')):>8} "
              f"{str(res.get('wall_s')):>8} {str(res.get('sandbox')):10} job={r['job_state']} "
              f"attempts={r.get('attempts')} verdict={res.get('verdict')} reward_hack={res.get('reward_hack')} "
              f"{r.get('error') or ''}"
              + (f" unfinished after {r['unfinished_after_s']}s, progress={json.dumps(r.get('progress'))[:200]}"
                 if "unfinished_after_s" in r else ""))
        continue
    prov = r.get("provenance") or {}
    probes = " ".join(f"{k}={v['status']}" for k, v in r.get("probes", {}).items())
    extra = f" overhead={r['overhead']} (bare {r['bare_wall_s']}s)" if "overhead" in r else ""
    pf = r.get("peak_fraction")
    print(f"{r['example']:32} {str(r.get('correct')):8} {pf if pf is None else round(pf, 4)!s:>8} "
          f"{r.get('wall_s')!s:>8} {str(prov.get('sandbox'))[:10]:10} {probes}{extra}"
          f"{' INFRA ' + str(r.get('detail')) if r.get('infra_failure') else ''}")
    for k, v in r.get("probes", {}).items():
        if v["status"] != "passed":
            print(f"    {k}: {v['summary'][:220]}")
    if prov:
        print(f"    gpu={prov.get('gpu_name')} uuid={prov.get('gpu_uuid')} driver={prov.get('driver')} "
              f"cuda={prov.get('cuda')} torch={prov.get('torch')} triton={prov.get('triton')} "
              f"lock_wait={prov.get('lock_wait_s')} lock_hold={prov.get('lock_hold_s')} "
              f"timings={prov.get('extra', {}).get('timings_s')}")
PYEOF
exit $status
