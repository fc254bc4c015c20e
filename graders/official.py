"""Official regrade mode: the registered deck's OWN check.py and benchmark.py, as the benchmark runs them.

The benchmark's sequential regrade (KernelBench-Hard's scripts/regrade_sequential.sh) replays the
graded path of a run: in the run's problem folder, with the canonical deck files and harness
library restored and the run's solution.py plus its scratch/ sidecars copied in, it runs

    cd <root>/problems/<problem> && python <root>/src/eval/trusted_entrypoint.py check.py   > check.log 2>&1
    (only when check exited 0 with exactly one standalone `PASS` line)
    cd <root>/problems/<problem> && python <root>/src/eval/trusted_entrypoint.py benchmark.py > benchmark.log 2>&1

and scores `correct` = exit 0 and exactly one line that is exactly `PASS`, `peak_fraction` = the
value of the one `peak_fraction: <number>` line of a benchmark that exited 0 (else null). The
solution's bytecode is purged before each script (a forged .pyc must not cross the
correctness/performance boundary), and the process owns the GPU alone.

kaudit does the same, with these differences (all stricter):

- the deck files and the harness come from the hash-verified deck store (graders.decks), never
  from the archive; they are re-verified and copied fresh before EACH script (a solution that
  rewrote benchmark.py or src/eval/timing.py while check.py ran changes nothing), and the store
  is verified again afterwards (tampering with it is reported);
- both scripts run under kaudit's GPU lock, each in a fresh sandbox child (graders.sandbox:
  bubblewrap when usable, private caches, scrubbed environment, memory cap, timeout). The child
  is only a supervisor: it makes itself non-dumpable, then runs the script in a grandchild that
  never holds the result channel, and returns the grandchild's exit code and output;
- Python reads no bytecode it did not write in this step (PYTHONPYCACHEPREFIX points at a fresh
  folder per script), on top of the benchmark's own purge.

The interpreter is kaudit's (`sys.executable` of the sandbox), not the benchmark's `uv run`
project environment; the provenance records both the interpreter and the harness hash.

Outputs are parsed in the benchmark's log grammar (graders.logformat): the FAIL line (with shape,
seed, case and numbers), the per-shape `shape=<i> variant=solution ... ms=<x>` lines and the
`peak_fraction:` line. Evidence kept with the measurement is bounded (head and tail).

Standard library only (plus graders): this module never imports torch or the solution.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from graders import decks
from graders.logformat import parse_benchmark_log, parse_check_log
from graders.outputmarks import MAX_LINE_CHARS, MAX_LINES, LineMarks

MODES = ("official", "hardened", "both")
ENTRYPOINT = ("eval", "trusted_entrypoint.py")  # under the harness folder
# The benchmark's score gate (regrade_sequential.sh SCORE_RE), byte for byte in meaning.
SCORE_RE = re.compile(r"^peak_fraction:[ \t\n\r\f\v]*([0-9]+([.][0-9]*)?|[.][0-9]+)([eE][+-]?[0-9]+)?[ \t\n\r\f\v]*$")
# What one script's output may cost: captured (for parsing) and kept as evidence (stored).
CAPTURE_HEAD = 256 << 10
CAPTURE_TAIL = (2 << 20) - CAPTURE_HEAD
EVIDENCE_HEAD = 4 << 10
EVIDENCE_TAIL = 12 << 10
SCRIPTS = ("check.py", "benchmark.py")
_CUDA_WORD = re.compile(r"\bcuda\b")
_IMPORTS_SRC = re.compile(r"^\s*(from|import)\s+src\b", re.MULTILINE)
# The deck scripts' own environment missing on the grading host (not the solution's fault).
_ENV_MISSING = re.compile(r"No module named '(torch|yaml|triton|numpy|hypothesis|sortedcontainers|src)(\.[\w.]*)?'")


def classify_env(text: str) -> str | None:
    """`harness_env_missing` when the deck's own imports (torch, PyYAML, triton, hypothesis for the
    harness's property stress, its harness `src`) are missing where it runs; None otherwise."""
    return "harness_env_missing" if _ENV_MISSING.search(text) else None


class OfficialUnavailable(Exception):
    """Official mode cannot run for this deck/device (the message says why)."""


# ---------------------------------------------------------------------------------------------
# Records


@dataclass
class OfficialStep:
    """One deck script as it ran: exit code, wall time and its (bounded) merged stdout+stderr."""

    script: str
    exit_code: int | None
    timed_out: bool
    wall_s: float
    output: str  # evidence: head and tail of the merged output
    output_bytes: int
    truncated: bool  # the evidence (or the capture) left bytes out
    error: str | None = None  # a sandbox-level fault (no_start, grader_error, memory, ...)
    detail: str | None = None
    # lines of a failed extension build from anywhere in the output, the part left out included
    # (graders.outputmarks)
    marks: list[str] = field(default_factory=list)


@dataclass
class OfficialResult:
    """The official mode's outcome for one run."""

    status: str  # graded | fail | infra_failure | not_run
    correct: bool | None
    peak_fraction: float | None
    failure_reason: str | None  # pass | check_failed | check_timeout | benchmark_failed | benchmark_timeout | ...
    fail_line: str | None = None  # the check's last `FAIL: ...` line, verbatim
    failure: dict[str, Any] | None = None  # parsed: kind, shape, seed, case, fields (numbers)
    pass_count: int = 0
    score_markers: int = 0  # `peak_fraction:` lines matching the benchmark's gate
    shapes: list[dict[str, Any]] = field(default_factory=list)  # shape, ms, tflops, gbps, fraction
    check: OfficialStep | None = None
    benchmark: OfficialStep | None = None
    deck: dict[str, Any] = field(default_factory=dict)  # name, content hash, script hashes, entrypoint
    infra_reason: str | None = None
    detail: str | None = None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def not_run(reason: str, deck: dict[str, Any] | None = None) -> OfficialResult:
    return OfficialResult(status="not_run", correct=None, peak_fraction=None, failure_reason=None, detail=reason,
                          deck=dict(deck or {}))


# ---------------------------------------------------------------------------------------------
# Which modes a deck supports


def deck_location(problem_dir: Path) -> decks.DeckLocation | None:
    """The verified registered deck holding `problem_dir` (None outside the deck store)."""
    return decks.verify_problem_dir(problem_dir)


def official_support(problem_dir: Path, device: str) -> tuple[decks.DeckLocation | None, str | None]:
    """(deck, None) when official mode can run here, else (deck or None, the reason it cannot).

    DeckTampered propagates: a deck whose files changed is refused, never graded.
    """
    problem_dir = Path(problem_dir).resolve()
    loc = deck_location(problem_dir)
    if loc is None:
        return None, ("the problem is not in a registered, hash-verified deck (official mode runs the deck's own "
                      "check.py/benchmark.py from `kaudit deck import DIR --name N --harness DIR`)")
    missing = [s for s in SCRIPTS if not (problem_dir / s).is_file()]
    if missing:
        return loc, f"the deck's {problem_dir.name} has no {', '.join(missing)}"
    if loc.harness is None:
        importers = [s for s in SCRIPTS if _IMPORTS_SRC.search((problem_dir / s).read_text(encoding="utf-8",
                                                                                          errors="replace"))]
        if importers:
            return loc, (f"deck {loc.name!r} was imported without its harness library, which its "
                         f"{' and '.join(importers)} import (src.*): import it again with --harness DIR")
    if device != "cuda":
        users = [s for s in SCRIPTS if _CUDA_WORD.search((problem_dir / s).read_text(encoding="utf-8", errors="replace"))]
        if users:
            return loc, (f"the deck's {' and '.join(users)} run on CUDA (they name cuda); --device {device} grades "
                         f"in hardened mode only")
    return loc, None


def hardened_support(problem_dir: Path) -> str | None:
    """None when kaudit's hardened grader can grade this problem, else the reason it cannot."""
    path = Path(problem_dir) / "problem.yaml"
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        return f"{path}: unreadable: {exc}"
    if not isinstance(raw, dict):
        return None  # load_problem reports it
    from graders import kbh

    if kbh.is_kbh_yaml(raw):
        regime = str(raw.get("regime", "compute"))
        if regime not in kbh.HARDENED_REGIMES:
            return (f"regime {regime!r}: kaudit's hardened grader scores roofline regimes "
                    f"{', '.join(kbh.HARDENED_REGIMES)} only; the deck's own check.py/benchmark.py grade it")
    return None


def mode_unsupported(problem_dir: Path, mode: str) -> str | None:
    """Why `mode` cannot grade this problem on any device (None: it can, or `both`)."""
    if mode == "hardened":
        return hardened_support(problem_dir)
    if mode == "official":
        try:
            return official_support(problem_dir, "cuda")[1]
        except decks.DeckTampered as exc:
            return str(exc)
    return None


def default_mode(problem_dir: Path) -> str:
    """`both` when the problem lies in a registered deck with a harness and its own scripts,
    `hardened` otherwise."""
    try:
        loc = deck_location(Path(problem_dir))
    except decks.DeckTampered:
        return "both"  # the regrade refuses it and says why
    if loc is not None and loc.harness is not None and all((Path(problem_dir) / s).is_file() for s in SCRIPTS):
        return "both"
    return "hardened"


def check_mode(mode: str | None) -> str | None:
    if mode is not None and mode not in MODES:
        raise ValueError(f"unknown regrade mode {mode!r} (official, hardened, both)")
    return mode


# ---------------------------------------------------------------------------------------------
# Staging


def _copy_ro(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    if dst.exists() or dst.is_symlink():
        if dst.is_dir() and not dst.is_symlink():
            shutil.rmtree(dst)
        else:
            dst.unlink()
    shutil.copyfile(src, dst)
    os.chmod(dst, 0o444)


def purge_bytecode(root: Path) -> int:
    """Remove every __pycache__ folder and .pyc/.pyo file under `root` (the benchmark's purge)."""
    n = 0
    for dirpath, dirnames, filenames in os.walk(root, topdown=True, followlinks=False):
        for d in list(dirnames):
            if d == "__pycache__":
                shutil.rmtree(Path(dirpath) / d, ignore_errors=True)
                dirnames.remove(d)
                n += 1
        for f in filenames:
            if f.endswith((".pyc", ".pyo")):
                with contextlib.suppress(OSError):
                    (Path(dirpath) / f).unlink()
                    n += 1
    return n


def _manifest(loc: decks.DeckLocation) -> dict[str, Any]:
    import json

    data: dict[str, Any] = json.loads((loc.root.parent / "MANIFEST.json").read_text())
    return data


def restore_trusted(loc: decks.DeckLocation, problem: str, tree: Path) -> dict[str, str]:
    """Re-verify the deck store, then copy the problem's deck files and the whole harness into
    `tree` (replacing whatever is there). Returns {relative path: sha256} of what was placed."""
    loc = decks.verify(loc.root.parent, name=loc.name)  # DeckTampered when a stored file changed
    manifest = _manifest(loc)
    files: dict[str, str] = dict(manifest.get("problems", {}).get(problem) or {})
    if not files:
        raise OfficialUnavailable(f"deck {loc.name!r} holds no problem {problem!r}")
    placed: dict[str, str] = {}
    pdir = tree / "problems" / problem
    for rel, sha in sorted(files.items()):
        _copy_ro(loc.root / problem / rel, pdir / rel)
        placed[f"problems/{problem}/{rel}"] = sha
    if loc.harness is not None and loc.harness_name:
        hdst = tree / loc.harness_name
        if hdst.exists():
            shutil.rmtree(hdst)
        for rel, sha in sorted((manifest.get("harness") or {}).items()):
            _copy_ro(loc.harness / rel, hdst / rel)
            placed[f"{loc.harness_name}/{rel}"] = sha
    return placed


def stage_tree(solution_files: Path, file_list: list[str], loc: decks.DeckLocation, problem: str,
               tree: Path) -> Path:
    """The benchmark's layout: `tree/problems/<problem>/` with the solution and its sidecars
    (as graders.sandbox.prepare_workspace collected them: scratch/ flattened beside solution.py),
    then the trusted deck files over them, and `tree/<harness>/` beside `problems/`."""
    pdir = tree / "problems" / problem
    pdir.mkdir(parents=True, exist_ok=True)
    for rel in file_list:
        src = solution_files / rel
        dst = pdir / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst)
    restore_trusted(loc, problem, tree)
    purge_bytecode(pdir)
    return pdir


def deck_facts(loc: decks.DeckLocation, problem: str) -> dict[str, Any]:
    files = _manifest(loc).get("problems", {}).get(problem) or {}
    entry = loc.harness / Path(*ENTRYPOINT) if loc.harness is not None else None
    return {
        "name": loc.name, "content_sha256": loc.content_sha256, "problem": problem,
        "harness_name": loc.harness_name, "check_sha256": files.get("check.py"),
        "benchmark_sha256": files.get("benchmark.py"), "problem_yaml_sha256": files.get("problem.yaml"),
        "trusted_entrypoint": bool(entry is not None and entry.is_file()),
        "interpreter": sys.executable,
    }


# ---------------------------------------------------------------------------------------------
# Parsing one script's output in the benchmark's grammar


def bounded(text: str, head: int = EVIDENCE_HEAD, tail: int = EVIDENCE_TAIL) -> tuple[str, bool]:
    """The text itself when short, else its head and tail with a marker between (evidence size)."""
    if len(text) <= head + tail:
        return text, False
    cut = len(text) - head - tail
    return f"{text[:head]}\n[... {cut} characters left out ...]\n{text[-tail:]}", True


def pass_count(text: str) -> int:
    """`grep -axc PASS`: lines that are exactly PASS."""
    return sum(1 for ln in text.split("\n") if ln.rstrip("\r") == "PASS")


def score_lines(text: str) -> list[str]:
    return [ln for ln in text.split("\n") if SCORE_RE.match(ln)]


def shapes_of(text: str) -> list[dict[str, Any]]:
    log = parse_benchmark_log(text)
    return [{"shape": s.shape, "ms": s.ms, "tflops": s.tflops, "gbps": s.gbps, "fraction": s.fraction}
            for s in log.shapes]


def fail_of(text: str) -> tuple[str | None, dict[str, Any] | None]:
    failure = parse_check_log(text).failure
    if failure is None:
        return None, None
    return f"FAIL: {failure.message}", {"kind": failure.kind, "shape": failure.shape, "seed": failure.seed,
                                        "case": failure.case, "op": failure.op, "fields": dict(failure.fields)}


# ---------------------------------------------------------------------------------------------
# Orchestration (called by graders.regrade with the GPU lock held)

StepFn = Callable[..., Any]  # graders.regrade._step bound to its run: (sb, name, step, params, timeout_s=)
Classify = Callable[[str], "str | None"]


def _step_record(script: str, res: Any) -> tuple[OfficialStep, str]:
    payload = res.result or {}
    text = str(payload.get("output") or "")
    ev, cut = bounded(text)
    rc = payload.get("rc")
    timed_out = bool(payload.get("timed_out")) or bool(res.timed_out)
    step = OfficialStep(script=script, exit_code=rc if isinstance(rc, int) else None, timed_out=timed_out,
                        wall_s=round(float(payload.get("wall_s") or res.wall_s or 0.0), 3), output=ev,
                        output_bytes=int(payload.get("output_bytes") or len(text.encode())),
                        truncated=cut or bool(payload.get("truncated")), error=res.error if not res.ok else None,
                        detail=(res.detail or None) if not res.ok else None,
                        marks=[str(m)[:MAX_LINE_CHARS] for m in payload.get("marks") or []][:MAX_LINES])
    return step, text


def run_official(sb: Any, step_fn: StepFn, loc: decks.DeckLocation, problem: str, tree: Path, cache: Path,
                 device: str, timeout_s: float, classify: Classify) -> OfficialResult:
    """check.py, then (when it passed) benchmark.py, each from freshly restored trusted files."""
    facts = deck_facts(loc, problem)
    pdir = tree / "problems" / problem
    entry = tree / loc.harness_name / Path(*ENTRYPOINT) if loc.harness_name else None
    notes: list[str] = []
    steps: dict[str, tuple[OfficialStep, str]] = {}
    for script in SCRIPTS:
        if script == "benchmark.py":
            try:
                restore_trusted(loc, problem, tree)
            except decks.DeckTampered as exc:
                return _infra("deck_tampered", str(exc), facts, steps, notes)
        purge_bytecode(tree)
        pyc = cache / f"pycache-{script.split('.')[0]}"
        shutil.rmtree(pyc, ignore_errors=True)
        pyc.mkdir(parents=True)
        (cache / "tmp").mkdir(parents=True, exist_ok=True)
        argv = [str(entry), script] if entry is not None and entry.is_file() else [script]
        params = {"cwd": str(pdir), "argv": argv, "timeout_s": float(timeout_s),
                  "env": {"PYTHONPYCACHEPREFIX": str(pyc), "KBH_GPU_LOCK_HELD": "1",
                          "CUDA_CACHE_PATH": str(cache / "cuda"), "TMPDIR": str(cache / "tmp"),
                          "TEMP": str(cache / "tmp"), "TMP": str(cache / "tmp")}}
        res = step_fn(sb, f"official_{script.split('.')[0]}", "official", params, timeout_s=float(timeout_s) + 60.0)
        rec, text = _step_record(script, res)
        steps[script] = (rec, text)
        if not res.ok and res.error in ("no_start", "setup", "grader_error", "channel_tampered"):
            if res.error == "channel_tampered":
                return _fail("check_failed" if script == "check.py" else "benchmark_failed",
                             f"{script}: grader result channel tampered with: {res.detail}", facts, steps, notes)
            return _infra("sandbox_setup" if res.error != "grader_error" else "grader_error",
                          f"{script}: {res.error}: {res.detail}", facts, steps, notes)
        if script == "check.py":
            n = pass_count(text)
            ok = rec.exit_code == 0 and n == 1 and not rec.timed_out
            if not ok:
                infra = classify(text) or (classify_env(text) if fail_of(text)[0] is None else None)
                if infra and not rec.timed_out:
                    return _infra(infra, f"check.py: {infra}", facts, steps, notes)
                fail_line, failure = fail_of(text)
                reason = "check_timeout" if rec.timed_out else "check_failed"
                if rec.timed_out:
                    detail = f"check.py exceeded {timeout_s:.0f}s"
                elif fail_line:
                    detail = fail_line
                elif res.error:  # memory cap, or the supervisor ended before it reported
                    detail = f"check.py: {res.error}: {res.detail}"
                else:
                    detail = (f"check.py exited {rec.exit_code} with {n} PASS line(s) (the gate: exit 0 and "
                              f"exactly one PASS)")
                out = _fail(reason, detail, facts, steps, notes)
                out.fail_line, out.failure, out.pass_count = fail_line, failure, n
                return out
        else:
            scores = score_lines(text)
            check_rec = steps["check.py"][0]
            result = OfficialResult(status="graded", correct=True, peak_fraction=None, failure_reason="pass",
                                    pass_count=pass_count(steps["check.py"][1]), score_markers=len(scores),
                                    shapes=shapes_of(text), check=check_rec, benchmark=rec, deck=facts, notes=notes)
            if rec.exit_code == 0 and len(scores) == 1 and not rec.timed_out:
                m = SCORE_RE.match(scores[0])
                assert m is not None
                result.peak_fraction = float(scores[0].split(":", 1)[1].strip())
            else:
                infra = classify(text) or classify_env(text)
                if infra and not rec.timed_out:
                    return _infra(infra, f"benchmark.py: {infra}", facts, steps, notes)
                result.failure_reason = "benchmark_timeout" if rec.timed_out else "benchmark_failed"
                result.detail = (f"benchmark.py exceeded {timeout_s:.0f}s" if rec.timed_out else
                                 f"benchmark.py exited {rec.exit_code} with {len(scores)} score line(s) (the gate: "
                                 f"exit 0 and exactly one `peak_fraction:` line)")
            try:
                decks.verify(loc.root.parent, name=loc.name)
            except decks.DeckTampered as exc:
                return _infra("deck_tampered", f"after the run: {exc}", facts, steps, notes)
            return result
    raise AssertionError("unreachable")


def _fill(out: OfficialResult, steps: dict[str, tuple[OfficialStep, str]]) -> OfficialResult:
    if "check.py" in steps:
        out.check = steps["check.py"][0]
    if "benchmark.py" in steps:
        out.benchmark = steps["benchmark.py"][0]
    return out


def _infra(reason: str, detail: str, facts: dict[str, Any], steps: dict[str, tuple[OfficialStep, str]],
           notes: list[str]) -> OfficialResult:
    return _fill(OfficialResult(status="infra_failure", correct=None, peak_fraction=None,
                                failure_reason="harness_error", infra_reason=reason, detail=detail, deck=facts,
                                notes=notes), steps)


def _fail(reason: str, detail: str, facts: dict[str, Any], steps: dict[str, tuple[OfficialStep, str]],
          notes: list[str]) -> OfficialResult:
    return _fill(OfficialResult(status="fail", correct=False, peak_fraction=None, failure_reason=reason,
                                detail=detail, deck=facts, notes=notes), steps)


# ---------------------------------------------------------------------------------------------
# The sandbox child's side (graders.sandbox_child step "official")

_PR_SET_DUMPABLE = 4
_PR_SET_PDEATHSIG = 1


def supervise(params: dict[str, Any], progress: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Run one deck script in a grandchild and return its exit code and bounded output.

    Runs inside the sandbox child, which never imports the solution. It first makes itself
    non-dumpable (the grandchild, same uid, cannot open /proc/<child>/fd or read its memory, so
    it can reach neither the result channel nor the nonce), and the grandchild gets no inherited
    descriptors beyond its stdio. The grandchild gets its own process group in the child's
    session, so the sandbox's memory watch and session kill still cover it.
    """
    import ctypes
    import subprocess
    import threading
    import time

    libc: Any = None
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)

    def die_with_parent() -> None:  # the grandchild must not outlive a killed supervisor
        if libc is not None:
            libc.prctl(_PR_SET_PDEATHSIG, 9, 0, 0, 0)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSAFEPATH")}
    # the host's extra site folders stay importable (e.g. a carried hypothesis); kaudit's own checkout
    # and relative entries do not (the deck's scripts find their harness themselves, as in the benchmark)
    kaudit_root = os.path.realpath(Path(__file__).resolve().parent.parent)
    keep = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
            if p and os.path.isabs(p) and os.path.realpath(p) != kaudit_root]
    if keep:
        env["PYTHONPATH"] = os.pathsep.join(keep)
    env.update({str(k): str(v) for k, v in (params.get("env") or {}).items()})
    argv = [sys.executable, *[str(a) for a in params["argv"]]]
    timeout = float(params.get("timeout_s") or 1800.0)
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, cwd=str(params["cwd"]), env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, close_fds=True, process_group=0,
                            preexec_fn=die_with_parent)
    head = bytearray()
    tail = bytearray()
    total = 0
    marks = LineMarks()
    assert proc.stdout is not None

    def pump() -> None:
        nonlocal total
        pending = b""
        while True:
            data = proc.stdout.read1(65536)  # type: ignore[union-attr]
            if not data:
                break
            total += len(data)
            chunk = data
            marks.feed(data)
            room = CAPTURE_HEAD - len(head)
            if room > 0:
                head.extend(data[:room])
                data = data[room:]
            if data:
                tail.extend(data)
                if len(tail) > CAPTURE_TAIL:
                    del tail[: len(tail) - CAPTURE_TAIL]
            if progress is not None:
                *lines, pending = (pending + chunk).split(b"\n")
                pending = pending[-4096:]
                for line in lines:
                    s = line.decode("utf-8", "replace").strip()
                    if s.startswith(("PASS", "FAIL", "peak_fraction", "shape=")):
                        with contextlib.suppress(Exception):
                            progress({"line": s[:300]})

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    timed_out = False
    try:
        rc: int | None = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        with contextlib.suppress(Exception):
            os.killpg(proc.pid, 9)
        rc = proc.wait()
    reader.join(timeout=10)
    kept = bytes(head) + (b"\n[... output left out ...]\n" if total > len(head) + len(tail) else b"") + bytes(tail)
    return {"rc": rc, "timed_out": timed_out, "wall_s": round(time.monotonic() - t0, 3),
            "output": kept.decode("utf-8", "replace"), "output_bytes": total,
            "truncated": total > len(head) + len(tail), "argv": argv[1:], "marks": marks.close()}
