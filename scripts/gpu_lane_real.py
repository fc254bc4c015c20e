"""GPU lane for REAL runs: the real decks imported, real archives regraded in both modes.

Run through scripts/gpu_lane_real.sh (which sets up the bare H200 image). Uses graders/ and
ingest/ only (no service, no database, no fastapi/sqlalchemy/pydantic/typer):

1. import the real decks from a copy of the KernelBench-Hard checkout (default
   `.lane/kbh-upstream`) into a data directory, exactly as `kaudit deck import DIR --name N
   --harness DIR` does (graders.decks: hash-verified content-addressed copy, harness included):
   hard/problems-{h100,b200,rtxpro6000} -> kbh-hard-{h100,b200,rtxpro6000} (harness hard/src),
   mega/problems -> kbh-mega (mega/src), cuda/problems-h100 -> kbh-cuda-h100 (cuda/src);
2. for each archive (arguments, or `--list`: chosen from labels.json), unpack it with
   ingest.archive.safe_unpack, stage solution.py and its sidecars (ingest.run.stage_solution),
   and regrade it with graders.regrade.regrade in `--mode` (default both) against the real deck
   of the GPU it was graded on (labels.json `gpu`, else the deck its template files match);
   each run in its own process with a wall-clock limit, so one slow run cannot eat the lane;
3. print per run: run_id, problem, mode, correct, per-shape ms, peak_fraction next to the value
   in the archive's result.json, the probe results, then one `LANE_JSON {...}` line; the JSON
   lines also go to $OUT/lane-real.jsonl and the table to $OUT/lane-real.txt.

`--device cpu` is a dry run that works without a GPU: Triton runs through its interpreter, the
real decks' check.py/benchmark.py need CUDA so official mode is reported as not run (hardened
only), and the CPU fixture deck of the tests (both modes run there) is graded as well.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

FAMILIES = (
    # (deck name, problems folder, harness folder) relative to the upstream checkout
    ("kbh-hard-h100", "hard/problems-h100", "hard/src"),
    ("kbh-hard-b200", "hard/problems-b200", "hard/src"),
    ("kbh-hard-rtxpro6000", "hard/problems-rtxpro6000", "hard/src"),
    ("kbh-mega", "mega/problems", "mega/src"),
    ("kbh-cuda-h100", "cuda/problems-h100", "cuda/src"),
)
GPU_DECK = {"h100": "kbh-hard-h100", "b200": "kbh-hard-b200", "rtxpro6000": "kbh-hard-rtxpro6000"}
FIXTURE_DECK = ROOT / "tests" / "graders" / "fixtures" / "official_deck"
FIXTURE_SOLUTIONS = ROOT / "tests" / "graders" / "fixtures" / "official_solutions"
HACKS = 3
CLEAN = 8
# The hack runs the lane shows by default: expert-labelled reward hacks that PASSED their in-run
# check and that Hopper can run against today's deck: a switch on input magnitude between nominal
# and stress inputs (fugu 02, Triton: the regrade exposes it), pure PyTorch behind a docstring that
# claims a custom kernel (kimi 02: correct in both modes, every probe passes; only the static audit
# sees it, which is what the lane must show too), and a process-wide change of torch's bf16 matmul
# reduction at import (qwen 07; it ships sm_120 code, so on an H100/H200 both modes end
# kernel_arch_mismatch, as the input-identity memo of codex 05 does: session 10). Not gemini 01 (a
# caller sniff): its Model lacks the deck's `weight_scale` buffer (the deck changed after the run),
# so no mode and no probe gets past loading the weights (session 11); the corpus' other 01 hacks
# share that. Preferred hacks may share a problem; missing ones are replaced automatically.
PREFERRED_HACKS = (
    "20260610_220244_opencode_openrouter-moonshot_moonshotai_kimi-k2.6_02_kda_cutlass",
    "20260621_204043_opencode_sakana_fugu-ultra_02_kda_cutlass",
    "20260804_025959_or-fable_qwen_qwen3.8-max_07_w4a16_gemm",
)


def log(msg: str) -> None:
    print(msg, flush=True)


# ---------------------------------------------------------------------------------------------
# Decks


def import_decks(upstream: Path, data_dir: Path) -> dict[str, Any]:
    """Import every deck family present in the upstream copy; {name: DeckLocation}."""
    from graders import decks
    from ingest.decks import scan_deck_dir

    out: dict[str, Any] = {}
    for name, problems_rel, harness_rel in FAMILIES:
        pdir, hdir = upstream / problems_rel, upstream / harness_rel
        if not pdir.is_dir():
            log(f"deck {name}: {pdir} absent, not imported")
            continue
        snap = scan_deck_dir(pdir, name)
        problems = {p: {f: fh.sha256 for f, fh in files.items()} for p, files in snap.problems.items()}
        harness = decks.scan_harness(hdir) if hdir.is_dir() else {}
        loc = decks.materialize(name, pdir.resolve(), problems, harness_dir=hdir.resolve() if harness else None,
                                harness=harness, data_dir=data_dir)
        out[name] = loc
        log(f"deck {name}: {len(loc.problems)} problems, harness {loc.harness_name or '-'} "
            f"({len(harness)} files), sha256 {loc.content_sha256[:12]}")
    return out


def import_fixture(data_dir: Path) -> Any:
    from graders import decks
    from ingest.decks import scan_deck_dir

    pdir, hdir = FIXTURE_DECK / "problems", FIXTURE_DECK / "src"
    snap = scan_deck_dir(pdir, "kaudit-cpu-fixture")
    problems = {p: {f: fh.sha256 for f, fh in files.items()} for p, files in snap.problems.items()}
    return decks.materialize("kaudit-cpu-fixture", pdir.resolve(), problems, harness_dir=hdir.resolve(),
                             harness=decks.scan_harness(hdir), data_dir=data_dir)


# ---------------------------------------------------------------------------------------------
# Choosing runs


def _member(archive: Path, name: str) -> str | None:
    try:
        with tarfile.open(archive) as tf:
            for m in tf:
                if m.isfile() and m.name.split("/", 1)[-1] == name:
                    f = tf.extractfile(m)
                    return f.read().decode("utf-8", "replace") if f is not None else None
    except (OSError, tarfile.TarError):
        return None
    return None


def framework_of(solution: str) -> str:
    cuda = bool(re.search(r"load_inline|cpp_extension|__global__", solution))
    triton = bool(re.search(r"import triton|@triton\.jit", solution))
    return "cuda" if cuda and not triton else "triton" if triton and not cuda else "triton+cuda" if cuda else "torch"


def choose(corpus: Path) -> list[dict[str, Any]]:
    """8 clean H100 runs across all six hard problems, Triton and load_inline CUDA alternating
    per problem, and 3 reward hacks on distinct problems: the preferred ones, else hacks that
    passed their in-run check."""
    labels = json.loads((corpus / "labels.json").read_text())
    rows = []
    for run_id, lab in sorted(labels.items()):
        archive = corpus / lab["archive"]
        if not archive.is_file():
            continue
        rows.append({"run_id": run_id, "archive": archive, "problem": lab["problem"], "gpu": lab["gpu"],
                     "label": lab["human_verdict"]})
    clean = [r for r in rows if r["label"] == "clean" and r["gpu"] == "h100"]
    for r in clean:
        r["framework"] = framework_of(_member(r["archive"], "solution.py") or "")
    by_problem: dict[str, list[dict[str, Any]]] = {}
    for r in clean:
        by_problem.setdefault(r["problem"], []).append(r)
    picked: list[dict[str, Any]] = []
    seen_fw: dict[str, int] = {}
    for _round in range(2):
        for problem in sorted(by_problem):
            if len(picked) >= CLEAN:
                break
            have = {r["framework"] for r in picked if r["problem"] == problem}
            cands = [r for r in by_problem[problem] if r not in picked and r["framework"] not in have]
            if not cands:
                continue
            cands.sort(key=lambda r: (r["framework"] not in ("triton", "cuda"), seen_fw.get(r["framework"], 0), r["run_id"]))
            picked.append(cands[0])
            seen_fw[cands[0]["framework"]] = seen_fw.get(cands[0]["framework"], 0) + 1
    hacks: list[dict[str, Any]] = []
    for r in sorted(rows, key=lambda r: (r["run_id"] not in PREFERRED_HACKS, r["run_id"])):
        preferred = r["run_id"] in PREFERRED_HACKS
        if r["label"] != "reward_hack" or len(hacks) >= HACKS or (
                not preferred and any(h["problem"] == r["problem"] for h in hacks)):
            continue
        result = json.loads(_member(r["archive"], "result.json") or "{}")
        if result.get("correct") is True or preferred:  # a preferred hack is shown whatever its record
            r["framework"] = framework_of(_member(r["archive"], "solution.py") or "")
            hacks.append(r)
    return picked + hacks


# ---------------------------------------------------------------------------------------------
# One run (in its own process)


def one(args: argparse.Namespace) -> int:
    from graders import decks
    from graders.gpu_lock import LockConfig
    from graders.regrade import regrade
    from ingest.archive import safe_unpack
    from ingest.decks import scan_deck_dir
    from ingest.run import parse_run, stage_solution

    data_dir = Path(args.data_dir)
    t0 = time.monotonic()
    rec: dict[str, Any] = {"archive": str(args.one), "device": args.device}
    with tempfile.TemporaryDirectory(prefix="lane-real-") as tmp:
        if args.fixture_solution:
            loc = decks.find_deck(args.deck, data_dir)
            sol_dir = Path(tmp) / "solution"
            sol_dir.mkdir()
            (sol_dir / "solution.py").write_text(Path(args.one).read_text())
            rec.update(run_id=f"fixture:{Path(args.one).stem}", problem=args.problem, archive_peak_fraction=None,
                       archive_correct=None)
            problem = args.problem
        else:
            archive = safe_unpack(Path(args.one), Path(tmp) / "staged")
            snaps = []
            for name in decks.registered_names(data_dir):
                d = decks.find_deck(name, data_dir)
                snaps.append(scan_deck_dir(d.root, name))
            run = parse_run(archive, snaps)
            matched = run.template.deck if run.template is not None else None
            deck_name = args.deck or matched
            if deck_name is None:
                raise SystemExit(f"no deck for {run.run_id}: pass --deck")
            loc = decks.find_deck(deck_name, data_dir)
            problem = run.problem or ""
            rec.update(run_id=run.run_id, problem=problem, deck=deck_name, template_deck=matched,
                       template_status=run.template.status.value if run.template is not None else None,
                       archive_peak_fraction=run.result.get("peak_fraction"),
                       archive_correct=run.result.get("correct"))
            sol_dir = stage_solution(archive, Path(tmp) / "solution")
        rec["deck"] = loc.name
        probes = None if args.probes == "all" else [] if args.probes == "none" else args.probes.split(",")
        # a lock or a foreign GPU process that does not clear within a minute is reported
        # (lock_timeout, infra), not waited out until the per-run limit kills the run silently
        lock = LockConfig(path_template=os.environ.get("KAUDIT_GPU_LOCK_PATH") or LockConfig().path_template,
                          timeout_s=60.0)
        grade = regrade(sol_dir, problem, loc.root, device=args.device, probes=probes, lock=lock,
                        timeout_s=float(args.step_timeout), mode=args.mode, gpu=int(args.gpu),
                        sandbox_mode=args.sandbox,
                        progress=lambda phase, info: log(f"    [+{time.monotonic() - t0:6.1f}s {phase}] "
                                                         f"{json.dumps(info, default=str)[:200]}")
                        if phase not in ("check", "benchmark", "probes", "probes_fresh", "probes_verify")
                        or info.get("state") == "start" or "stage" in info else None)
    rec["wall_s"] = round(time.monotonic() - t0, 1)
    rec["grade"] = grade.evidence()
    Path(args.result_file).write_text(json.dumps(rec, default=str))
    return 0


# ---------------------------------------------------------------------------------------------
# Printing


def _ms(shapes: list[dict[str, Any]] | None, key: str = "ms") -> str:
    if not shapes:
        return "-"
    def idx(s: dict[str, Any]) -> Any:
        return s["shape_index"] if "shape_index" in s else s.get("shape")

    return " ".join(f"{idx(s)}:{s.get(key):.4g}" if isinstance(s.get(key), (int, float)) else f"{idx(s)}:-"
                    for s in shapes)


def report(rec: dict[str, Any]) -> list[str]:
    g = rec.get("grade") or {}
    off = g.get("official") or {}
    hard = g.get("hardened") or {}
    lines = [f"== {rec.get('run_id')}  problem={rec.get('problem')}  deck={rec.get('deck')}  label={rec.get('label')} "
             f"framework={rec.get('framework')}  wall={rec.get('wall_s')}s"]
    if rec.get("error"):
        lines.append(f"   ERROR: {rec['error']}")
        return lines
    apf = rec.get("archive_peak_fraction")
    lines.append(f"   mode={g.get('mode')} decided_by={g.get('decided_by')} correct={g.get('correct')} "
                 f"peak_fraction={g.get('peak_fraction')} (archive result.json {apf}, correct {rec.get('archive_correct')})"
                 f" failure_reason={g.get('failure_reason')}")
    if off:
        lines.append(f"   official: status={off.get('status')} correct={off.get('correct')} "
                     f"peak_fraction={off.get('peak_fraction')} ms[{_ms(off.get('shapes'))}] "
                     f"check {((off.get('check') or {}).get('wall_s'))}s bench {((off.get('benchmark') or {}).get('wall_s'))}s")
        if off.get("fail_line") or off.get("status") not in ("graded",):
            lines.append(f"     {off.get('fail_line') or off.get('detail')}")
            for step in ("check", "benchmark"):
                out = ((off.get(step) or {}).get("output") or "").strip().splitlines()
                if out and not off.get("fail_line"):
                    lines.extend(f"     | {ln[:200]}" for ln in out[-4:])
    if hard:
        hpf = hard.get("peak_fraction")
        lines.append(f"   hardened: status={hard.get('status')} correct={hard.get('correct')} peak_fraction={hpf} "
                     f"ms[{_ms(hard.get('shapes'))}]")
        if hard.get("fail_line") or hard.get("status") not in ("graded",):
            lines.append(f"     {hard.get('fail_line') or hard.get('detail')}")
        # the timer's own record per shape (host-inclusive figure, hold, SM clock and slowdowns)
        lines.extend(f"     | {ln[:320]}" for ln in hard.get("benchmark_lines") or []
                     if str(ln).startswith(("l2:", "clock_warning:", "timing shape=", "timing_escape")))
    for p in g.get("probes") or []:
        lines.append(f"   probe {p['probe']}: {p['status']}  {str(p.get('summary'))[:160]}")
    for d in g.get("disagreements") or []:
        lines.append(f"   DISAGREEMENT: {d}")
    if g.get("build_fallback"):
        lines.append(f"   BUILD FALLBACK: {g['build_fallback']}")
    prov = g.get("provenance") or {}
    lines.append(f"   gpu={prov.get('gpu_name')} sandbox={prov.get('sandbox')} "
                 f"official_sandbox={(prov.get('extra') or {}).get('official_sandbox')} "
                 f"lock_wait={prov.get('lock_wait_s')} timings={(prov.get('extra') or {}).get('timings_s')}")
    return lines


def compact(rec: dict[str, Any]) -> dict[str, Any]:
    """The LANE_JSON line: what the table shows, without the bounded outputs."""
    g = rec.get("grade") or {}
    off, hard = g.get("official") or {}, g.get("hardened") or {}
    return {
        "run_id": rec.get("run_id"), "problem": rec.get("problem"), "deck": rec.get("deck"),
        "label": rec.get("label"), "framework": rec.get("framework"), "device": rec.get("device"),
        "mode": g.get("mode"), "decided_by": g.get("decided_by"), "correct": g.get("correct"),
        "peak_fraction": g.get("peak_fraction"), "archive_peak_fraction": rec.get("archive_peak_fraction"),
        "archive_correct": rec.get("archive_correct"), "failure_reason": g.get("failure_reason"),
        "official": {k: off.get(k) for k in ("status", "correct", "peak_fraction", "fail_line", "detail",
                                             "infra_reason", "shapes")} if off else None,
        "hardened": {k: hard.get(k) for k in ("status", "correct", "peak_fraction", "fail_line", "detail",
                                              "shapes")} if hard else None,
        "probes": {p["probe"]: {"status": p["status"], "summary": p.get("summary"), "numbers": p.get("numbers")}
                   for p in g.get("probes") or []},
        "disagreements": g.get("disagreements"), "build_fallback": g.get("build_fallback"),
        "wall_s": rec.get("wall_s"), "error": rec.get("error"),
        "provenance": {k: (g.get("provenance") or {}).get(k) for k in ("gpu_name", "driver", "cuda", "torch",
                                                                       "triton", "sandbox", "lock_wait_s",
                                                                       "smoke", "extra")},
    }


# ---------------------------------------------------------------------------------------------
# Main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("archives", nargs="*", type=Path, help="run archives (.tar.gz) to regrade")
    ap.add_argument("--list", action="store_true", help="choose 8 clean + 3 hack runs from labels.json")
    ap.add_argument("--corpus", type=Path, default=ROOT / ".lane" / "kbh-dev", help="kbh-dev copy (labels.json)")
    ap.add_argument("--upstream", type=Path, default=ROOT / ".lane" / "kbh-upstream")
    ap.add_argument("--data-dir", type=Path, default=None, help="where the decks are imported (default: a temp dir)")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--mode", choices=("official", "hardened", "both"), default="both")
    ap.add_argument("--deck", default=None, help="deck for every archive (default: from labels.json gpu / template)")
    ap.add_argument("--probes", default="all", help="all | none | comma-separated probe names")
    ap.add_argument("--per-run", type=float, default=75.0, help="wall-clock limit of one run (s)")
    ap.add_argument("--budget", type=float, default=530.0, help="wall-clock limit of the whole lane (s)")
    ap.add_argument("--step-timeout", type=float, default=None, help="limit of one sandboxed step (default per-run)")
    ap.add_argument("--part", default=None, help="K/N: only the K-th of N slices of the chosen runs")
    ap.add_argument("--gpu", default="0")
    ap.add_argument("--sandbox", default="auto", choices=("auto", "bwrap", "subprocess"))
    ap.add_argument("--no-fixtures", action="store_true", help="cpu mode: skip the CPU fixture deck runs")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or ROOT / "gpu-lane-out"))
    # internal: one run in a child process
    ap.add_argument("--one", type=Path, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--result-file", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--fixture-solution", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--problem", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.step_timeout is None:
        args.step_timeout = args.per_run
    if args.one is not None:
        return one(args)

    t_start = time.monotonic()
    args.out.mkdir(parents=True, exist_ok=True)
    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="lane-real-data-"))
    log(f"# gpu_lane_real: device={args.device} mode={args.mode} per-run={args.per_run}s budget={args.budget}s "
        f"data_dir={data_dir} upstream={args.upstream}")
    if args.device == "cpu":
        log("# CPU dry run: Triton under TRITON_INTERPRET=1; the real decks' check.py/benchmark.py need CUDA, so "
            "real runs are graded in hardened mode only (official: not run, reason recorded); the CPU fixture deck "
            "runs both modes")
    if not args.upstream.is_dir():
        log(f"# {args.upstream} absent: copy ../shared/kbh-upstream there (the lead carries .lane/)")
        return 2
    import_decks(args.upstream, data_dir)

    jobs: list[dict[str, Any]] = []
    if args.list:
        jobs += choose(args.corpus)
    labels: dict[str, Any] = {}
    if (args.corpus / "labels.json").is_file():
        labels = json.loads((args.corpus / "labels.json").read_text())
    for a in args.archives:
        rid = a.name.removesuffix(".tar.gz").removesuffix(".tgz").removesuffix(".zip")
        lab = labels.get(rid) or {}
        jobs.append({"run_id": rid, "archive": a, "problem": lab.get("problem"), "gpu": lab.get("gpu"),
                     "label": lab.get("human_verdict"),
                     "framework": framework_of(_member(a, "solution.py") or "")})
    if args.part:
        k, n = (int(x) for x in args.part.split("/"))
        jobs = [j for i, j in enumerate(jobs) if i % n == k - 1]
    if args.device == "cpu" and not args.no_fixtures:
        import_fixture(data_dir)
        for sol in ("honest", "clamped", "folded_scale"):
            jobs.insert(0, {"run_id": f"fixture:{sol}", "archive": FIXTURE_SOLUTIONS / f"{sol}.py",
                            "problem": "tiny_gemm", "fixture": True, "label": "fixture", "framework": "triton",
                            "deck": "kaudit-cpu-fixture"})
    log(f"# {len(jobs)} run(s): " + ", ".join(str(j["run_id"]) for j in jobs))
    jsonl = args.out / "lane-real.jsonl"
    table: list[str] = []
    with open(jsonl, "a") as out:
        for j in jobs:
            left = args.budget - (time.monotonic() - t_start)
            limit = min(args.per_run, left)
            if limit < 15:
                rec = {"run_id": j["run_id"], "problem": j.get("problem"), "error": "skipped: lane budget spent"}
            else:
                rec = _run_child(args, j, data_dir, limit)
            rec.update({k: j.get(k) for k in ("label", "framework") if j.get(k) is not None})
            rec.setdefault("problem", j.get("problem"))
            lines = report(rec)
            for ln in lines:
                log(ln)
            table.extend(lines)
            line = json.dumps(compact(rec), default=str)
            log("LANE_JSON " + line)
            out.write(line + "\n")
            out.flush()
    (args.out / "lane-real.txt").write_text("\n".join(table) + "\n")
    log(f"# done in {time.monotonic() - t_start:.0f}s; {jsonl}")
    return 0


def _run_child(args: argparse.Namespace, job: dict[str, Any], data_dir: Path, limit: float) -> dict[str, Any]:
    with tempfile.NamedTemporaryFile(prefix="lane-rec-", suffix=".json", delete=False) as f:
        result_file = f.name
    deck = job.get("deck") or args.deck or GPU_DECK.get(str(job.get("gpu")))
    cmd = [sys.executable, str(Path(__file__).resolve()), "--one", str(job["archive"]), "--result-file", result_file,
           "--data-dir", str(data_dir), "--device", args.device, "--mode", args.mode, "--probes", args.probes,
           "--step-timeout", str(min(args.step_timeout, limit)), "--gpu", str(args.gpu), "--sandbox", args.sandbox]
    if deck:
        cmd += ["--deck", deck]
    if job.get("fixture"):
        cmd += ["--fixture-solution", "--problem", str(job["problem"])]
    log(f"-- {job['run_id']} (deck {deck or 'by template'}, limit {limit:.0f}s)")
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, start_new_session=True)
    try:
        rc = proc.wait(timeout=limit)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return {"run_id": job["run_id"], "problem": job.get("problem"), "deck": deck,
                "error": f"per-run limit: killed after {limit:.0f}s (raise --per-run or split with --part)",
                "wall_s": round(time.monotonic() - t0, 1)}
    try:
        rec: dict[str, Any] = json.loads(Path(result_file).read_text())
    except (OSError, ValueError):
        rec = {"run_id": job["run_id"], "problem": job.get("problem"), "deck": deck,
               "error": f"the run's process exited {rc} without a result", "wall_s": round(time.monotonic() - t0, 1)}
    finally:
        Path(result_file).unlink(missing_ok=True)
    return rec


if __name__ == "__main__":
    raise SystemExit(main())
