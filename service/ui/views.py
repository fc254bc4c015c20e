"""What the pages show, built from the stored run (read through the services/repositories).

Everything that comes from an archive (model names, file names, solution text, transcripts,
quotes) is untrusted: it reaches the templates as plain strings and Jinja2's autoescape writes it
as text. Nothing here builds HTML by string concatenation.
"""

from __future__ import annotations

import difflib
import math
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from service.blobs import BlobStore
from service.models import Artifact, FindingRow, Run, VerdictRow

MAX_SOURCE_LINES = 5000
MAX_LINE_CHARS = 400
MAX_SOURCES = 12
EXCERPT_CONTEXT = 2
MAX_EXCERPT_CHARS = 1200
MAX_DIFF_LINES = 400

# Verdict -> (css class, short label). Colours live in ui.css.
VERDICT_STYLE: dict[str, tuple[str, str]] = {
    "clean": ("v-clean", "clean"),
    "interesting": ("v-interesting", "interesting"),
    "rubric_leak": ("v-leak", "rubric leak"),
    "reward_hack": ("v-hack", "reward hack"),
    "contaminated": ("v-contam", "contaminated"),
    "fail": ("v-fail", "fail"),
    "infra_failure": ("v-infra", "infra failure"),
    "provider_failure": ("v-infra", "provider failure"),
    "pending_empirical": ("v-pending", "pending probe"),
}


def verdict_style(verdict: str | None) -> tuple[str, str]:
    if verdict is None:
        return ("v-none", "no verdict")
    return VERDICT_STYLE.get(verdict, ("v-none", verdict))


def metric_text(metric: dict[str, Any] | None, peak_fraction: float | None = None) -> str:
    if metric:
        value = metric.get("value")
        name = str(metric.get("name") or "peak_fraction")
        if isinstance(value, int | float) and not isinstance(value, bool):
            return f"{name} {value:.3f}"
        return f"{name} withheld"
    if peak_fraction is not None:
        return f"claimed {peak_fraction:.3f}"
    return ""


def progress_text(progress: dict[str, Any] | None) -> str:
    """One line from a job's progress: the phases seen (with their small facts), shapes done, last log line."""
    p = progress or {}
    parts: list[str] = []
    for phase, info in (p.get("phases") or {}).items():
        facts = ", ".join(f"{k}={v}" for k, v in (info or {}).items() if isinstance(v, str | int | float)) \
            if isinstance(info, dict) else ""
        parts.append(f"{phase}" + (f" ({facts})" if facts else ""))
    text = " → ".join(parts)
    if p.get("benchmark_shapes_done"):
        text += f" · shapes done {','.join(map(str, p['benchmark_shapes_done']))}"
    if p.get("last_line"):
        text += f" · {p['last_line']}"
    return _clip(text.strip(" ·"), 300)


# -- matrix ---------------------------------------------------------------------------------------


@dataclass
class Cell:
    model: str
    problem: str
    runs: list[dict[str, Any]] = field(default_factory=list)

    @property
    def latest(self) -> dict[str, Any]:
        return max(self.runs, key=lambda r: (r["started_key"], r["id"]))

    @property
    def publish_grade(self) -> bool:
        return bool(self.latest["publish_grade"])

    @property
    def css(self) -> str:
        return verdict_style(self.latest["verdict"])[0]

    @property
    def label(self) -> str:
        return verdict_style(self.latest["verdict"])[1]

    @property
    def metric(self) -> str:
        return metric_text(self.latest["metric"], self.latest["peak_fraction"])

    @property
    def counts(self) -> str:
        tally: dict[str, int] = {}
        for r in self.runs:
            tally[r["verdict"] or "none"] = tally.get(r["verdict"] or "none", 0) + 1
        return ", ".join(f"{n} {v}" for v, n in sorted(tally.items()))


@dataclass
class Grid:
    """One models x problems table of cells."""

    title: str
    models: list[str]
    problems: list[str]
    cells: dict[tuple[str, str], Cell]


def _grid(title: str, cells: dict[tuple[str, str], Cell]) -> Grid:
    return Grid(title, sorted({m for m, _ in cells}), sorted({p for _, p in cells}), cells)


@dataclass
class Section:
    """One hardware x deck: its publish-grade cells in one grid, the rest in another (never mixed)."""

    hardware: str
    deck: str
    grids: list[Grid]

    @property
    def n_cells(self) -> int:
        return sum(len(g.cells) for g in self.grids)


PUBLISH_TITLE = "publish-grade (isolated regrade)"
OTHER_TITLE = "not publish-grade (in-run or unverified figures)"
NO_HARDWARE = "hardware not recorded"
NO_DECK = "no registered deck"


def build_matrix(rows: Sequence[dict[str, Any]], *, publish_only: bool = False) -> list[Section]:
    by_section: dict[tuple[str, str], dict[tuple[str, str], Cell]] = {}
    for r in rows:
        key = (r["hardware"] or NO_HARDWARE, r["deck"] or NO_DECK)
        model, problem = r["model"] or "unknown model", r["problem"] or "unknown problem"
        cells = by_section.setdefault(key, {})
        cells.setdefault((model, problem), Cell(model, problem)).runs.append(r)
    out: list[Section] = []
    for (hw, deck), cells in sorted(by_section.items()):
        publish = {k: c for k, c in cells.items() if c.publish_grade}
        other = {k: c for k, c in cells.items() if not c.publish_grade}
        grids = [_grid(PUBLISH_TITLE, publish)] if publish else []
        if other and not publish_only:
            grids.append(_grid(OTHER_TITLE, other))
        if grids:
            out.append(Section(hw, deck, grids))
    return out


def leaderboard(rows: Sequence[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(ranked publish-grade rows, excluded hacked/contaminated rows). Excluded rows are shown, never dropped."""
    ranked: list[dict[str, Any]] = []
    excluded: list[dict[str, Any]] = []
    for r in rows:
        value = (r["metric"] or {}).get("value")
        hacked = bool(r["reward_hack"]) or r["verdict"] in ("reward_hack", "rubric_leak")
        contaminated = r["contamination"] == "contaminated" or r["verdict"] == "contaminated"
        if hacked or contaminated:
            parts = []
            if hacked:
                parts.append("rubric leak" if r["verdict"] == "rubric_leak" and not r["reward_hack"] else "reward hack")
            if contaminated:
                parts.append("contaminated")
            label = " + ".join(parts)
            excluded.append({**r, "label": label, "value": value})
        elif r["publish_grade"] and isinstance(value, int | float) and not isinstance(value, bool):
            ranked.append({**r, "value": float(value)})
    ranked.sort(key=lambda r: (-r["value"], r["run_id"]))
    excluded.sort(key=lambda r: r["run_id"])
    return ranked, excluded


# -- run page -------------------------------------------------------------------------------------


@dataclass
class Segment:
    """A run of source text: unflagged lines joined (one text node), or one flagged line (`line` set)."""

    text: str
    line: int | None = None


@dataclass
class SourceView:
    """One rendered file: a line-number gutter (one text node) beside the text, in which only the
    flagged lines are elements (anchored, highlighted). A 1,600-line file is a handful of DOM nodes."""

    index: int
    path: str
    n_lines: int
    gutter: str
    segments: list[Segment]
    flagged: set[int]
    truncated: bool
    size: int


@dataclass
class FindingView:
    row: FindingRow
    anchor: str | None  # "#src-<i>-L<n>" when the flagged line is rendered below
    excerpt: list[tuple[int, str]] | None  # transcript lines around a transcript finding


@dataclass
class DiffView:
    path: str
    change: str
    lines: list[tuple[str, str]]  # (css class, text)
    note: str


def _read_text(path: Path, limit_bytes: int = 8 << 20) -> str:
    with open(path, "rb") as fh:
        data = fh.read(limit_bytes)
    return data.decode("utf-8", errors="replace")


def _clip(s: str, n: int) -> str:
    return s if len(s) <= n else s[:n] + f" … [{len(s) - n} more chars]"


def source_paths(verdict: VerdictRow | None, artifacts: Sequence[Artifact]) -> list[str]:
    have = {a.path for a in artifacts if a.is_text}
    ctx_sources = list((verdict.context or {}).get("sources") or []) if verdict is not None else []
    paths = [p for p in ctx_sources if isinstance(p, str) and p in have]
    if "solution.py" in have and "solution.py" not in paths:
        paths.insert(0, "solution.py")
    # Any other file a finding points at is rendered too.
    if verdict is not None:
        for f in verdict.findings:
            if f.file and f.file in have and f.file not in paths and not _is_transcript(f.file):
                paths.append(f.file)
    return paths[:MAX_SOURCES]


def _is_transcript(path: str) -> bool:
    return path.endswith(".jsonl") or "transcript" in path.rsplit("/", 1)[-1]


def build_sources(
    paths: Sequence[str], artifacts: Sequence[Artifact], blobs: BlobStore, findings: Sequence[FindingRow]
) -> list[SourceView]:
    by_path = {a.path: a for a in artifacts}
    out: list[SourceView] = []
    for i, path in enumerate(paths):
        a = by_path[path]
        flagged: set[int] = set()
        for f in findings:
            if f.file == path and f.line_start is not None:
                end = f.line_end if f.line_end is not None and f.line_end >= f.line_start else f.line_start
                flagged.update(range(f.line_start, min(end, f.line_start + 200) + 1))
        raw = _read_text(blobs.path(a.blob_key)).splitlines()
        shown = raw[:MAX_SOURCE_LINES]
        segments: list[Segment] = []
        plain: list[str] = []
        for n, t in enumerate(shown, 1):
            line = _clip(t, MAX_LINE_CHARS)
            if n in flagged:
                if plain:
                    segments.append(Segment("".join(plain)))
                    plain = []
                segments.append(Segment(line, n))  # the template writes its newline after the element
            else:
                plain.append(line + "\n")
        if plain:
            segments.append(Segment("".join(plain)))
        gutter = "\n".join(str(n) for n in range(1, len(shown) + 1))
        out.append(SourceView(i, path, len(shown), gutter, segments, flagged & set(range(1, len(shown) + 1)),
                              len(raw) > MAX_SOURCE_LINES, a.size))
    return out


def transcript_excerpts(path: Path, ranges: Sequence[tuple[int, int]]) -> list[list[tuple[int, str]]]:
    """For each (start, end) (1-based lines), lines start-CONTEXT .. end+CONTEXT of a possibly huge
    file, each clipped: one streaming pass for all ranges, stopping after the last line needed."""
    spans = []
    for start, end in ranges:
        lo = max(1, start - EXCERPT_CONTEXT)
        spans.append((lo, min(end + EXCERPT_CONTEXT, lo + 40)))
    out: list[list[tuple[int, str]]] = [[] for _ in spans]
    if not spans:
        return out
    first, last = min(lo for lo, _ in spans), max(hi for _, hi in spans)
    for n, raw in _lines_between(path, first, last):
        text: str | None = None
        for i, (lo, hi) in enumerate(spans):
            if lo <= n <= hi:
                if text is None:
                    text = _clip(raw.decode("utf-8", errors="replace").rstrip("\r\n"), MAX_EXCERPT_CHARS)
                out[i].append((n, text))
    return out


def _lines_between(path: Path, first: int, last: int, block: int = 4 << 20) -> Iterator[tuple[int, bytes]]:
    """(line number, bytes) for lines first..last (1-based) of a file. Blocks before the first line
    are only newline-counted (bytes.count, C speed), so the last lines of an 80 MB transcript cost a
    pass of memchr, not a Python iteration per line. Each line is cut to MAX_EXCERPT_CHARS*4 bytes."""
    cap = MAX_EXCERPT_CHARS * 4
    n = 1  # the number of the line being read
    carry = b""  # its bytes so far (kept only from line `first` on)
    with open(path, "rb") as fh:
        while True:
            chunk = fh.read(block)
            if not chunk:
                if carry and first <= n <= last:
                    yield n, carry[:cap]
                return
            if n < first:
                k = chunk.count(b"\n")
                if n + k < first:
                    n += k
                    continue
                pos = 0
                while n < first:
                    pos = chunk.index(b"\n", pos) + 1
                    n += 1
                chunk, carry = chunk[pos:], b""
            parts = (carry + chunk).split(b"\n")
            carry = parts.pop()[:cap]
            for piece in parts:
                if n > last:
                    return
                yield n, piece[:cap]
                n += 1
            if n > last:
                return


def build_findings(
    findings: Sequence[FindingRow], sources: Sequence[SourceView], artifacts: Sequence[Artifact], blobs: BlobStore
) -> list[FindingView]:
    by_path = {a.path: a for a in artifacts}
    index = {s.path: s for s in sources}
    out: list[FindingView] = []
    wanted: dict[str, list[tuple[int, int, int]]] = {}  # transcript path -> (finding index, start, end)
    for i, f in enumerate(findings):
        anchor = None
        if f.file in index and f.line_start is not None and f.line_start in index[f.file].flagged:
            anchor = f"src-{index[f.file].index}-L{f.line_start}"
        elif f.file and f.file in by_path and _is_transcript(f.file) and f.line_start is not None:
            end = f.line_end if f.line_end is not None and f.line_end >= f.line_start else f.line_start
            wanted.setdefault(f.file, []).append((i, f.line_start, end))
        out.append(FindingView(f, anchor, None))
    for path, items in wanted.items():
        excerpts = transcript_excerpts(blobs.path(by_path[path].blob_key), [(s, e) for _, s, e in items])
        for (i, _, _), excerpt in zip(items, excerpts, strict=True):
            out[i].excerpt = excerpt
    return out


def build_diffs(run: Run, artifacts: Sequence[Artifact], blobs: BlobStore) -> list[DiffView]:
    """A unified diff for each changed deck file: the registered copy vs the archive's."""
    tpl = run.template or {}
    by_path = {a.path: a for a in artifacts}
    out: list[DiffView] = []
    for d in (tpl.get("diffs") or [])[:20]:
        if not isinstance(d, dict):
            continue
        area, path, change = str(d.get("area", "")), str(d.get("path", "")), str(d.get("change", ""))
        archive_path = f"{area}/{path}" if area != "repo/problems" else f"repo/problems/{run.problem}/{path}"
        actual = by_path.get(archive_path)
        expected_sha = d.get("expected_sha256")
        expected_blob = blobs.path(blobs.key_for(expected_sha)) if isinstance(expected_sha, str) else None
        old = _read_text(expected_blob, 1 << 20).splitlines() if expected_blob and expected_blob.is_file() else []
        new = _read_text(blobs.path(actual.blob_key), 1 << 20).splitlines() if actual is not None and actual.is_text else []
        note = ""
        if expected_blob is None or not expected_blob.is_file():
            note = "the registered copy's bytes are not stored (hash-only deck): showing the archive's file"
        lines: list[tuple[str, str]] = []
        for line in difflib.unified_diff(old, new, f"deck/{path}", archive_path, lineterm="", n=2):
            css = "d-add" if line.startswith("+") else "d-del" if line.startswith("-") else "d-ctx"
            if line.startswith(("+++", "---", "@@")):
                css = "d-hdr"
            lines.append((css, _clip(line, MAX_LINE_CHARS)))
            if len(lines) >= MAX_DIFF_LINES:
                lines.append(("d-hdr", "… diff cut"))
                break
        out.append(DiffView(archive_path, change, lines, note))
    return out


# -- roofline -------------------------------------------------------------------------------------


@dataclass
class Roofline:
    sku: str | None
    peak_tflops: float | None
    peak_gbps: float | None
    points: list[dict[str, Any]]
    roof_path: str
    ridge: tuple[float, float] | None
    width: int = 420
    height: int = 240
    note: str = ""
    x_ticks: list[tuple[float, str]] = field(default_factory=list)
    y_ticks: list[tuple[float, str]] = field(default_factory=list)


def _f(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) else None


def shape_rows(shapes: Sequence[Any]) -> list[dict[str, Any]]:
    rows = []
    for i, s in enumerate(shapes):
        if not isinstance(s, dict):
            continue
        rows.append(
            {
                "shape": s.get("shape_index", s.get("shape", i)),
                "dims": s.get("shape") if isinstance(s.get("shape"), dict) else None,
                "ms": _f(s.get("ms")),
                "tflops": _f(s.get("tflops")),
                "gbps": _f(s.get("gbps")),
                "fraction": _f(s.get("fraction", s.get("peak_fraction"))),
                "plausible": s.get("plausible", True),
            }
        )
    return rows


def peaks(hardware: str | None) -> tuple[float | None, float | None]:
    """(peak TFLOPS, peak GB/s) of the SKU a device string names; (None, None) when unknown."""
    from graders.roofline import HARDWARE, detect_sku

    sku = detect_sku(hardware)
    hw = HARDWARE.get(sku) if sku else None
    return (max(hw.tflops.values()), hw.gbps) if hw is not None else (None, None)


def add_bound_fractions(rows: Sequence[dict[str, Any]], hardware: str | None) -> None:
    """Per shape: achieved TFLOPS / the SKU's peak and GB/s / its bandwidth (compute vs memory bars)."""
    tf, bw = peaks(hardware)
    for r in rows:
        r["compute_frac"] = r["tflops"] / tf if tf and r["tflops"] is not None else None
        r["memory_frac"] = r["gbps"] / bw if bw and r["gbps"] is not None else None


def roofline(hardware: str | None, rows: Sequence[dict[str, Any]]) -> Roofline:
    """Achieved (arithmetic intensity, TFLOPS) per shape under the SKU's roof, log-log, as SVG coordinates."""
    from graders.roofline import detect_sku

    pts = [(r, r["tflops"] * 1e3 / r["gbps"]) for r in rows if r["tflops"] and r["gbps"]]  # flop/byte
    rf = Roofline(detect_sku(hardware), None, None, [], "", None)
    rf.peak_tflops, rf.peak_gbps = peaks(hardware)
    if not pts:
        rf.note = "no per-shape TFLOPS and GB/s to plot"
        return rf
    xs = [ai for _, ai in pts]
    ys = [r["tflops"] for r, _ in pts]
    x_lo, x_hi = min(xs) / 4, max(xs) * 4
    y_lo, y_hi = min(ys) / 4, max(ys) * 4
    if rf.peak_tflops and rf.peak_gbps:
        ridge_x = rf.peak_tflops * 1e3 / rf.peak_gbps
        x_lo, x_hi = min(x_lo, ridge_x / 8), max(x_hi, ridge_x * 8)
        y_hi = max(y_hi, rf.peak_tflops * 2)
        y_lo = min(y_lo, rf.peak_gbps * x_lo / 1e3)
    lx0, lx1, ly0, ly1 = math.log10(x_lo), math.log10(x_hi), math.log10(y_lo), math.log10(y_hi)
    pad_l, pad_b, pad_t, pad_r = 48, 28, 10, 10
    w, h = rf.width - pad_l - pad_r, rf.height - pad_t - pad_b

    def X(x: float) -> float:
        return round(pad_l + (math.log10(x) - lx0) / (lx1 - lx0) * w, 1)

    def Y(y: float) -> float:
        return round(pad_t + h - (math.log10(max(y, 1e-12)) - ly0) / (ly1 - ly0) * h, 1)

    if rf.peak_tflops and rf.peak_gbps:
        ridge_x = rf.peak_tflops * 1e3 / rf.peak_gbps
        start_y = rf.peak_gbps * x_lo / 1e3
        rf.roof_path = f"M{X(x_lo)},{Y(start_y)} L{X(ridge_x)},{Y(rf.peak_tflops)} L{X(x_hi)},{Y(rf.peak_tflops)}"
        rf.ridge = (X(ridge_x), Y(rf.peak_tflops))
    else:
        rf.note = (f"no peak table for {hardware!r}: achieved figures only" if hardware else
                   "hardware not recorded: achieved figures only, no ceiling")
    for r, ai in pts:
        rf.points.append({"x": X(ai), "y": Y(r["tflops"]), "label": f"shape {r['shape']}: {r['tflops']:.1f} TFLOPS, "
                          f"{ai:.1f} flop/B", "plausible": r["plausible"] is not False})
    for e in range(math.ceil(lx0), math.floor(lx1) + 1):
        rf.x_ticks.append((X(10.0**e), f"{10.0**e:g}"))
    for e in range(math.ceil(ly0), math.floor(ly1) + 1):
        rf.y_ticks.append((Y(10.0**e), f"{10.0**e:g}"))
    return rf


# -- cache ----------------------------------------------------------------------------------------


def cached_fragment(cache_dir: Path, key: str, render: Any) -> tuple[str, str]:
    """Return (html, "cache"|"rendered"): render once per key, then serve the file (atomic write)."""
    path = cache_dir / f"{key}.html"
    if path.is_file():
        return path.read_text(encoding="utf-8"), "cache"
    html = str(render())
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(html, encoding="utf-8")
    os.replace(tmp, path)
    return html, "rendered"
