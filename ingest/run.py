"""parse_run: everything ingest reads from one unpacked archive, before any audit rule runs.

result.json is authoritative where it has a field; the run id is the fallback (problem,
harness). Logs are parsed with the shared grammar (graders.logformat), transcripts are
streamed once each for their stats, and template integrity is computed here, whatever the
harness claimed.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from graders.logformat import parse_benchmark_log, parse_check_log
from graders.runformat import (
    BENCHMARK_CONTENDED_LOG,
    BENCHMARK_LOG,
    CHECK_CONTENDED_LOG,
    CHECK_LOG,
    GPU_LOCK_LOG,
    RESULT,
    RESULT_REGRADE,
    SCRATCH_DIR,
    SOLUTION,
    is_source_name,
    split_embedded_sidecars,
)
from ingest.logs import parse_gpu_lock_log
from ingest.model import DeckSnapshot, Dialect, ParsedRun, TranscriptStats, UnpackedArchive
from ingest.runid import parse_run_id
from ingest.strict_json import loads_strict
from ingest.template import check_template_integrity
from ingest.transcripts import TRANSCRIPT_FILES, iter_events

MAX_SOURCE_BYTES = 8 << 20  # a "source" larger than this is data, not something the static model reads
# Folders whose files are never the submission's sources (caches, the agent's home, the deck).
_NOT_SOURCE_TOPS = frozenset(
    {"template_files", "trusted_src", "repo", "cache", "bin", "cbin", "tmp", "agent_home"}
)


def _str(v: Any) -> str | None:
    return v if isinstance(v, str) and v != "" else None


def _is_source_path(path: str) -> bool:
    p = PurePosixPath(path)
    if not is_source_name(p.name) or path == SOLUTION:
        return False
    parts = p.parts
    if "__pycache__" in parts:
        return False
    if len(parts) == 1:
        return True  # root-level sidecar
    return parts[0] == SCRATCH_DIR


def sidecar_paths(archive: UnpackedArchive) -> list[str]:
    """Text sources under scratch/ and at the root (other than solution.py) the solution may load."""
    return sorted(
        p for p, sf in archive.files.items() if _is_source_path(p) and sf.is_text and sf.size <= MAX_SOURCE_BYTES
    )


# Sidecars appended to solution.py in public archives: graders.runformat.split_embedded_sidecars
# (the banner grammar lives there with the other run-format facts).


def solution_sources(archive: UnpackedArchive) -> dict[str, str]:
    """solution.py and every sidecar source, keyed by archive path (what the static model reads).

    Sidecars appended to solution.py (see `split_embedded_sidecars`) are returned under
    `scratch/<name>` unless the archive holds that file itself.
    """
    out: dict[str, str] = {}
    for p in sidecar_paths(archive):
        out[p] = archive.read_text(p)
    if archive.has(SOLUTION):
        own, embedded = split_embedded_sidecars(archive.read_text(SOLUTION))
        out[SOLUTION] = own
        for name, body in embedded.items():
            if name not in out and f"scratch/{name}" not in out:
                out[f"scratch/{name}"] = body
    return dict(sorted(out.items(), key=lambda kv: (kv[0] != SOLUTION, kv[0])))


def stage_solution(archive: UnpackedArchive, dest: Path) -> Path:
    """Write solution.py and its sidecar sources into `dest` for a regrade.

    Used by the audit's regrade and the GPU lane (graders + ingest only). A scratch/ sidecar is
    placed both beside solution.py and under scratch/, the two places a KBH solution looks for
    what it loads; root-level sidecars keep their place. Sidecars
    appended to solution.py in a public archive are split out first (ingest.run.solution_sources),
    so the staged solution.py is Python again.
    """
    dest.mkdir(parents=True, exist_ok=True)
    real = set(sidecar_paths(archive))
    sources = solution_sources(archive)
    split = any(p not in real and p != SOLUTION for p in sources)  # sidecars were appended to solution.py
    for path, text in sources.items():
        targets = [dest / path]
        if path.startswith(f"{SCRATCH_DIR}/"):
            targets.append(dest / path[len(SCRATCH_DIR) + 1 :])
        for target in targets:
            target.parent.mkdir(parents=True, exist_ok=True)
            if target.exists():
                continue
            if path in real or (path == SOLUTION and not split):
                shutil.copyfile(archive.files[path].staged_path, target)  # byte-exact
            else:
                target.write_text(text, encoding="utf-8")
    return dest


def _known_problems(decks: Sequence[DeckSnapshot]) -> list[str]:
    return sorted({p for d in decks for p in d.problems})


def _hardware(result: dict[str, Any]) -> str | None:
    regrade = result.get("regrade")
    if isinstance(regrade, dict) and _str(regrade.get("gpu_name")):
        return str(regrade["gpu_name"])
    legacy = result.get("legacy")
    if isinstance(legacy, dict) and _str(legacy.get("gpu_name")):
        return str(legacy["gpu_name"])
    for key in ("gpu_name", "hardware", "gpu"):
        if _str(result.get(key)):
            return str(result[key])
    return None


def _read_log(archive: UnpackedArchive, name: str, warnings: list[str]) -> str | None:
    if not archive.has(name):
        return None
    sf = archive.files[name]
    if not sf.is_text:
        warnings.append(f"{name} is not UTF-8 text; parsed with replacement characters")
    return archive.read_text(name)


def transcript_paths(archive: UnpackedArchive) -> list[str]:
    """Transcript-like files at the run root, in TRANSCRIPT_FILES order."""
    return [name for name in TRANSCRIPT_FILES if archive.has(name)]


def parse_run(archive: UnpackedArchive, decks: Sequence[DeckSnapshot]) -> ParsedRun:
    result_raw = archive.read_text(RESULT).lstrip("\ufeff")
    result: dict[str, Any] = loads_strict(result_raw)  # safe_unpack validated it as a JSON object
    warnings: list[str] = []

    run_id = _str(result.get("run_id")) or archive.root_prefix or archive.archive_sha256[:16]
    if not _str(result.get("run_id")):
        warnings.append("result.json has no run_id; using the archive folder name")
    id_parts = parse_run_id(run_id, _known_problems(decks))
    problem = _str(result.get("problem")) or id_parts.problem
    harness = _str(result.get("harness")) or id_parts.harness
    model = _str(result.get("model")) or id_parts.model_slug
    effort = result.get("reasoning_effort")
    reasoning_effort = effort if isinstance(effort, str) else None

    solution_path = SOLUTION if archive.has(SOLUTION) else None
    has_solution_claim = result.get("has_solution")
    if isinstance(has_solution_claim, bool) and has_solution_claim != (solution_path is not None):
        warnings.append(
            f"result.json has_solution={has_solution_claim} but solution.py is "
            f"{'present' if solution_path else 'absent'}"
        )

    check_text = _read_log(archive, CHECK_LOG, warnings)
    check_c_text = _read_log(archive, CHECK_CONTENDED_LOG, warnings)
    bench_text = _read_log(archive, BENCHMARK_LOG, warnings)
    bench_c_text = _read_log(archive, BENCHMARK_CONTENDED_LOG, warnings)
    lock_text = _read_log(archive, GPU_LOCK_LOG, warnings)

    transcripts: list[TranscriptStats] = []
    for name in transcript_paths(archive):
        stats = TranscriptStats(source=name, dialect=Dialect.UNKNOWN)
        for _ in iter_events(archive.files[name].staged_path, name, stats):
            pass
        if stats.unparsable_lines:
            warnings.append(f"{name}: {stats.unparsable_lines} line(s) did not parse and were skipped")
        transcripts.append(stats)

    regrade_record: dict[str, Any] | None = None
    if archive.has(RESULT_REGRADE):
        try:
            loaded = loads_strict(archive.read_bytes(RESULT_REGRADE).decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):
            loaded = None  # hostile values (NaN, NUL, ...) too: never stored
        if isinstance(loaded, dict):
            regrade_record = loaded
        else:
            warnings.append("result.regrade.json is not a UTF-8 JSON object; ignored")

    claim = result.get("template_mutated")
    template = check_template_integrity(archive, problem, decks, claim if isinstance(claim, bool) else None)

    return ParsedRun(
        run_id=run_id,
        result=result,
        id_parts=id_parts,
        problem=problem,
        harness=harness,
        model=model,
        reasoning_effort=reasoning_effort,
        hardware=_hardware(result) or (
            _str(regrade_record.get("gpu_name")) if isinstance(regrade_record, dict) else None
        ),
        started_at=_str(result.get("started_at")),
        finished_at=_str(result.get("finished_at")),
        has_solution=solution_path is not None,
        solution_path=solution_path,
        sidecars=sidecar_paths(archive),
        check_log=parse_check_log(check_text) if check_text is not None else None,
        check_contended_log=parse_check_log(check_c_text) if check_c_text is not None else None,
        benchmark_log=parse_benchmark_log(bench_text) if bench_text is not None else None,
        benchmark_contended_log=parse_benchmark_log(bench_c_text) if bench_c_text is not None else None,
        gpu_lock=parse_gpu_lock_log(lock_text) if lock_text is not None else None,
        transcripts=transcripts,
        template=template,
        warnings=warnings,
        regrade_record=regrade_record,
    )
