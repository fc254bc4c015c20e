"""GPU lane diagnostic: kaudit's hardened check + bench (graders.cli) of real archives with the real H100 deck imported.

Run on the device from the repo root with .lane/ carried (see scripts/gpu_lane_real.sh for the inputs):
    python3 scripts/gpu_lane_hardened_diag.py RUN_ID...
"""
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.getcwd())
from graders import decks as deck_store
from ingest.decks import scan_deck_dir
from ingest.run import split_embedded_sidecars

lane = Path(".lane")
data = Path(tempfile.mkdtemp(prefix="kdata"))
os.environ["KAUDIT_DATA_DIR"] = str(data)
src = lane / "kbh-upstream/hard/problems-h100"
snap = scan_deck_dir(src, "kbh-hard-h100")
problems = {p: {f: fh.sha256 for f, fh in files.items()} for p, files in snap.problems.items()}
harness = lane / "kbh-upstream/hard/src"
loc = deck_store.materialize("kbh-hard-h100", src.resolve(), problems, harness_dir=harness.resolve(),
                             harness=deck_store.scan_harness(harness), data_dir=data)
print("deck", loc.root, flush=True)
runs = sys.argv[1:]
for r in runs:
    arch = next((lane / "kbh-dev/archives").glob(r + ".*"))
    d = Path(tempfile.mkdtemp(prefix="run"))
    with tarfile.open(arch) as t:
        t.extractall(d, filter="data")
    top = next(d.iterdir())
    res = json.loads((top / "result.json").read_text())
    text = (top / "solution.py").read_text()
    sol, side = split_embedded_sidecars(text)
    stage = d / "stage"
    stage.mkdir()
    (stage / "solution.py").write_text(sol)
    for n, t in side.items():
        (stage / n).parent.mkdir(parents=True, exist_ok=True)
        (stage / n).write_text(t)
    for p in (top / "scratch").rglob("*") if (top / "scratch").is_dir() else []:
        if p.is_file():
            for tgt in (stage / p.relative_to(top), stage / p.name):
                tgt.parent.mkdir(parents=True, exist_ok=True)
                tgt.write_bytes(p.read_bytes())
    prob = res["problem"]
    for cmd in ("check", "bench"):
        t0 = time.time()
        try:
            out = subprocess.run([sys.executable, "-m", "graders.cli", cmd, str(stage / "solution.py"), "--problem", prob,
                                  "--deck", "kbh-hard-h100", "--device", "cuda"], capture_output=True, text=True, timeout=150,
                                 cwd=os.getcwd())
            tail = (out.stdout + out.stderr)[-1500:]
            rc = out.returncode
        except subprocess.TimeoutExpired as e:
            rc, tail = "timeout", str(e)[-500:]
        print(f"=== {r} {prob} {cmd} rc={rc} {time.time()-t0:.1f}s result.json peak_fraction={res.get('peak_fraction')}\n{tail}", flush=True)
