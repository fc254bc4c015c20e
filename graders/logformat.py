"""check.log and benchmark.log: the KBH grammar, parsers and writers that round-trip.

Pure stdlib. kaudit's graders WRITE these lines (so a regrade log compares line by line with
the in-run log) and ingest PARSES archives' logs with the same code. Parsers are tolerant:
a line they do not recognise is kept in `lines` (and, for benchmark.log, in `other`), never an
error, because real logs interleave compiler warnings and tracebacks.

check.log (the last line decides)::

    PASS
    FAIL: <reason>
    PROPERTY_SEED: <n>

benchmark.log::

    benchmark_event event=variant_start|variant_end|variant_error shape=<i> variant=<v> ts=<t> [k=v ...]
    shape=<i> variant=solution tflops=<x> gbps=<y> ms=<z>
    shape=<i> solution_peak_fraction=<f>
    peak_fraction: <f>
    RESULT: OK | LOW

gpu_lock.log: see the section at the end (parser and writer).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

FRACTION_FLOOR = 1e-9
RESULT_OK_THRESHOLD = 0.1

# ---------------------------------------------------------------------------------------------
# check.log


@dataclass
class CheckFailure:
    """A parsed `FAIL: ...` line. `kind` is one of the KBH failure families."""

    kind: str  # import_error | forbidden_op | state_dict_mismatch | tolerance | property_stress | other
    message: str  # everything after "FAIL: "
    shape: int | None = None
    seed: int | None = None
    case: str | None = None
    op: str | None = None
    fields: dict[str, str] = field(default_factory=dict)  # key=value pairs found in the message


@dataclass
class CheckLog:
    lines: list[str]
    last_line: str | None  # last non-blank line
    passed: bool  # exactly one PASS line and it is the last line
    pass_count: int
    failure: CheckFailure | None  # the last FAIL line, when any
    property_seed: int | None
    framework_line: str | None  # a `framework: ...` line when the grader printed one


_KV = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(\S+)")
_SHAPE = re.compile(r"^shape (\d+)\b")
_SEED = re.compile(r"\bseed (-?\d+)\b")
_CASE = re.compile(r"\bcase ([^\s:]+)")
_PROPERTY_SEED = re.compile(r"^PROPERTY_SEED:\s*(-?\d+)\s*$")


def _parse_failure(message: str) -> CheckFailure:
    fields = dict(_KV.findall(message))
    low = message.lower()
    shape = seed = None
    case = op = None
    m = _SHAPE.match(message)
    if m:
        shape = int(m.group(1))
        head = message.split("tolerance exceeded", 1)[0].split("property stress", 1)[0]
        sm = _SEED.search(head)
        seed = int(sm.group(1)) if sm else None
        cm = _CASE.search(head)
        case = cm.group(1) if cm else None
    if low.startswith("forbidden op used:"):
        kind = "forbidden_op"
        op = message.split(":", 1)[1].strip() or None
    elif "import error" in low:
        kind = "import_error"
    elif low.startswith("state_dict mismatch"):
        kind = "state_dict_mismatch"
        sm = re.match(r"state_dict mismatch at shape (\d+)", message)
        if sm:
            shape = int(sm.group(1))
    elif "property stress" in low:
        kind = "property_stress"
    elif "tolerance exceeded" in low:
        kind = "tolerance"
    else:
        kind = "other"
    return CheckFailure(kind=kind, message=message, shape=shape, seed=seed, case=case, op=op, fields=fields)


def parse_check_log(text: str) -> CheckLog:
    lines = text.splitlines()
    nonblank = [ln.rstrip() for ln in lines if ln.strip()]
    last = nonblank[-1] if nonblank else None
    pass_count = sum(1 for ln in nonblank if ln.strip() == "PASS")
    failure: CheckFailure | None = None
    seed: int | None = None
    framework: str | None = None
    for ln in nonblank:
        s = ln.strip()
        if s.startswith("FAIL:"):
            failure = _parse_failure(s[5:].strip())
        elif (m := _PROPERTY_SEED.match(s)) is not None:
            seed = int(m.group(1))
        elif s.lower().startswith("framework:") or re.search(r"(^|\s)framework=", s):
            framework = s  # kaudit's `framework: ...` or KBH's `cuda_language: ok framework=cuda_raw ...`
    passed = pass_count == 1 and last is not None and last.strip() == "PASS"
    return CheckLog(
        lines=lines,
        last_line=last,
        passed=passed,
        pass_count=pass_count,
        failure=failure,
        property_seed=seed,
        framework_line=framework,
    )


def check_pass_line() -> str:
    return "PASS"


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, (tuple, list)):
        return "(" + ",".join(_fmt(x) for x in v) + ")"
    return str(v)


def check_fail_line(kind: str, **fields: Any) -> str:
    """One FAIL line of the KBH grammar.

    kinds: `import_error` (error=), `solution_import_error` (error=), `forbidden_op` (op=),
    `state_dict_mismatch` (shape=, detail=), `tolerance` (shape=, shape_desc=, seed=, case=,
    max_abs_diff=, max_rel_diff=, bad=, total=, worst_idx=), `property_stress` (shape=, detail=),
    anything else: `FAIL: <kind>: k=v ...` (or `detail=` verbatim).
    """
    f = dict(fields)
    if kind == "import_error":
        return f"FAIL: import error: {f.get('error', '')}"
    if kind == "solution_import_error":
        return f"FAIL: solution import error: {f.get('error', '')}"
    if kind == "forbidden_op":
        return f"FAIL: forbidden op used: {f['op']}"
    if kind == "state_dict_mismatch":
        return f"FAIL: state_dict mismatch at shape {f['shape']} ({f.get('detail', '')})"
    if kind == "tolerance":
        head = _shape_head(f)
        tail = (
            f"max_abs_diff={_fmt(f['max_abs_diff'])} max_rel_diff={_fmt(f['max_rel_diff'])} "
            f"bad={f['bad']}/{f['total']}"
        )
        if "worst_idx" in f:
            tail += f" worst_idx={_fmt(f['worst_idx'])}"
        return f"FAIL: {head}: tolerance exceeded: {tail}"
    if kind == "property_stress":
        return f"FAIL: {_shape_head(f)} property stress: {f.get('detail', '')}"
    detail = f.pop("detail", None)
    rest = " ".join(f"{k}={_fmt(v)}" for k, v in f.items())
    body = detail if detail is not None else rest
    if detail is not None and rest:
        body = f"{detail} {rest}"
    return f"FAIL: {kind}: {body}".rstrip()


def _shape_head(f: dict[str, Any]) -> str:
    head = f"shape {f['shape']}"
    if f.get("shape_desc") is not None:
        head += f" {_fmt(f['shape_desc'])}"
    if f.get("seed") is not None:
        head += f" seed {f['seed']}"
    if f.get("case") is not None:
        head += f" case {f['case']}"
    return head


def property_seed_line(n: int) -> str:
    return f"PROPERTY_SEED: {n}"


# ---------------------------------------------------------------------------------------------
# benchmark.log


@dataclass
class BenchShape:
    shape: int
    ms: float | None = None
    tflops: float | None = None
    gbps: float | None = None
    fraction: float | None = None  # solution_peak_fraction
    # every variant line of this shape (solution, reference, sota, compiled, ...):
    # variant -> {"ms": .., "tflops": .., "gbps": .., "peak_fraction": ..}
    variants: dict[str, dict[str, float]] = field(default_factory=dict)


@dataclass
class BenchEvent:
    event: str  # variant_start | variant_end | variant_error
    shape: int | None
    variant: str | None
    ts: str | None
    fields: dict[str, str] = field(default_factory=dict)  # every key=value (incl. elapsed_s, ms)


@dataclass
class BenchmarkLog:
    shapes: list[BenchShape]  # in shape order
    peak_fraction: float | None  # as logged
    result: str | None  # OK | LOW
    events: list[BenchEvent]
    errors: list[str]  # variant_error events and Traceback/error lines
    lines: list[str] = field(default_factory=list)
    other: list[str] = field(default_factory=list)  # lines the grammar does not cover

    def fractions(self) -> list[float]:
        return [s.fraction for s in self.shapes if s.fraction is not None]

    def recomputed_peak_fraction(self) -> float | None:
        fr = self.fractions()
        return geomean_fraction(fr) if fr else None


def _num(v: str | None) -> float | None:
    if v is None:
        return None
    try:
        return float(v)
    except ValueError:
        return None


def parse_benchmark_log(text: str) -> BenchmarkLog:
    lines = text.splitlines()
    shapes: dict[int, BenchShape] = {}
    events: list[BenchEvent] = []
    errors: list[str] = []
    other: list[str] = []
    peak: float | None = None
    result: str | None = None
    for raw in lines:
        s = raw.strip()
        if not s:
            continue
        if s.startswith("benchmark_event"):
            kv = dict(_KV.findall(s))
            ev = BenchEvent(
                event=kv.get("event", ""),
                shape=_int(kv.get("shape")),
                variant=kv.get("variant"),
                ts=kv.get("ts"),
                fields=kv,
            )
            events.append(ev)
            if ev.event == "variant_error":
                errors.append(s)
            continue
        if s.startswith("peak_fraction:"):
            peak = _num(s.split(":", 1)[1].strip())
            continue
        if s.startswith("RESULT:"):
            result = s.split(":", 1)[1].strip() or None
            continue
        if s.startswith("shape="):
            kv = dict(_KV.findall(s))
            idx = _int(kv.get("shape"))
            if idx is not None:
                sh = shapes.setdefault(idx, BenchShape(shape=idx))
                fraction_keys = [k for k in kv if k.endswith("_peak_fraction")]
                if fraction_keys:
                    for k in fraction_keys:
                        val = _num(kv[k])
                        variant = k[: -len("_peak_fraction")]
                        if val is not None:
                            sh.variants.setdefault(variant, {})["peak_fraction"] = val
                        if variant == "solution":
                            sh.fraction = val
                    continue
                variant = kv.get("variant", "solution")
                figures = {k: v for k in ("ms", "tflops", "gbps") if k in kv and (v := _num(kv[k])) is not None}
                if figures:
                    sh.variants.setdefault(variant, {}).update(figures)
                    if variant == "solution":
                        sh.ms = figures.get("ms", sh.ms)
                        sh.tflops = figures.get("tflops", sh.tflops)
                        sh.gbps = figures.get("gbps", sh.gbps)
                    continue
        if s.startswith("Traceback") or re.match(r"^[A-Za-z_.]*(Error|Exception)\b", s):
            errors.append(s)
        other.append(raw)
    return BenchmarkLog(
        shapes=[shapes[k] for k in sorted(shapes)],
        peak_fraction=peak,
        result=result,
        events=events,
        errors=errors,
        lines=lines,
        other=other,
    )


def _int(v: str | None) -> int | None:
    if v is None:
        return None
    try:
        return int(v)
    except ValueError:
        return None


def bench_event_line(event: str, shape: int, variant: str, ts: str | float, **fields: Any) -> str:
    extra = "".join(f" {k}={_fmt(v)}" for k, v in fields.items() if v is not None)
    return f"benchmark_event event={event} shape={shape} variant={variant} ts={_fmt(ts)}{extra}"


def bench_shape_line(shape: int, tflops: float, gbps: float, ms: float, variant: str = "solution") -> str:
    return f"shape={shape} variant={variant} tflops={tflops:.3f} gbps={gbps:.3f} ms={ms:.4f}"


def bench_fraction_line(shape: int, fraction: float) -> str:
    return f"shape={shape} solution_peak_fraction={fraction:.4f}"


def peak_fraction_line(f: float) -> str:
    return f"peak_fraction: {f:.4f}"


def result_line(f: float) -> str:
    """`RESULT: OK` when the peak fraction is at least 0.1, else `RESULT: LOW` (informational)."""
    return f"RESULT: {'OK' if f >= RESULT_OK_THRESHOLD else 'LOW'}"


def geomean_fraction(fractions: Iterable[float]) -> float:
    """Geometric mean with each fraction floored at 1e-9 (a zero or negative shape cannot NaN it)."""
    vals = [max(float(x), FRACTION_FLOOR) if math.isfinite(float(x)) else FRACTION_FLOOR for x in fractions]
    if not vals:
        return FRACTION_FLOOR
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


# ---------------------------------------------------------------------------------------------
# gpu_lock.log (the harness's GPU-lock events; kaudit's own lock writes the same lines)
#
#     <iso-time> wait|start|end|lock_timeout|reentrant_after_wait pid=<n> cmd=<c> [args=...] [status=<n> elapsed_s=<x>]
#
# Derived: acquisitions (start lines), wait seconds (wait -> start of the same pid), active
# seconds (start -> end of the same pid), lock timeouts (lock starvation: an infrastructure
# failure, not the model's fault) and reentrant acquisitions after a wait. Unknown lines are
# kept, never fatal.

EVENTS = ("wait", "start", "end", "lock_timeout", "reentrant_after_wait")
_KEYS = ("pid", "cmd", "args", "status", "elapsed_s")
_LOCK_LINE = re.compile(r"^(\S+)\s+(" + "|".join(EVENTS) + r")\b\s*(.*)$")
_KEY_AT = re.compile(r"(?:^|\s)(" + "|".join(_KEYS) + r")=")


@dataclass(frozen=True)
class GpuLockEvent:
    line: int  # 1-based
    time: str
    event: str
    pid: int | None
    cmd: str | None
    args: str | None
    status: int | None
    elapsed_s: float | None
    fields: dict[str, str]


@dataclass
class GpuLockLog:
    events: list[GpuLockEvent]
    acquisitions: int  # start lines
    wait_seconds: float  # sum over wait -> start pairs
    active_seconds: float  # sum over start -> end pairs
    lock_timeouts: int
    reentrant: bool  # any reentrant_after_wait line
    waits: list[float] = field(default_factory=list)  # each wait, in order
    max_wait_seconds: float = 0.0
    unfinished: int = 0  # start lines with no end (the holder died or the log was cut)
    unparsed: list[str] = field(default_factory=list)


def _split_fields(rest: str) -> dict[str, str]:
    """`pid=1 cmd=python check.py args=--x y status=0` -> fields; values may hold spaces."""
    marks = [(m.group(1), m.start(1), m.end()) for m in _KEY_AT.finditer(rest)]
    out: dict[str, str] = {}
    for i, (key, _kstart, vstart) in enumerate(marks):
        vend = marks[i + 1][1] if i + 1 < len(marks) else len(rest)
        out[key] = rest[vstart:vend].strip()
    return out


def _parse_time(s: str) -> datetime | None:
    try:
        return datetime.fromisoformat(s.replace("Z", "+00:00"))
    except ValueError:
        return None


def _lock_int(v: str | None) -> int | None:
    try:
        return int(v) if v is not None else None
    except ValueError:
        return None


def _lock_float(v: str | None) -> float | None:
    try:
        return float(v) if v is not None else None
    except ValueError:
        return None


def parse_gpu_lock_log(text: str) -> GpuLockLog:
    events: list[GpuLockEvent] = []
    unparsed: list[str] = []
    for no, raw in enumerate(text.splitlines(), start=1):
        s = raw.strip()
        if not s:
            continue
        m = _LOCK_LINE.match(s)
        if not m:
            unparsed.append(raw)
            continue
        fields = _split_fields(m.group(3))
        events.append(
            GpuLockEvent(
                line=no,
                time=m.group(1),
                event=m.group(2),
                pid=_lock_int(fields.get("pid")),
                cmd=fields.get("cmd"),
                args=fields.get("args"),
                status=_lock_int(fields.get("status")),
                elapsed_s=_lock_float(fields.get("elapsed_s")),
                fields=fields,
            )
        )

    waiting: dict[int | None, datetime | None] = {}
    holding: dict[int | None, datetime | None] = {}
    waits: list[float] = []
    active = 0.0
    for ev in events:
        t = _parse_time(ev.time)
        if ev.event == "wait":
            waiting[ev.pid] = t
        elif ev.event == "start":
            if ev.pid in waiting:
                w = waiting.pop(ev.pid)
                if w is not None and t is not None:
                    waits.append(max((t - w).total_seconds(), 0.0))
            holding[ev.pid] = t
        elif ev.event == "end":
            if ev.pid in holding:
                st = holding.pop(ev.pid)
                if st is not None and t is not None:
                    active += max((t - st).total_seconds(), 0.0)
                elif ev.elapsed_s is not None:
                    active += ev.elapsed_s
            elif ev.elapsed_s is not None:
                active += ev.elapsed_s
        elif ev.event == "lock_timeout":
            waiting.pop(ev.pid, None)
    return GpuLockLog(
        events=events,
        acquisitions=sum(1 for e in events if e.event == "start"),
        wait_seconds=sum(waits),
        active_seconds=active,
        lock_timeouts=sum(1 for e in events if e.event == "lock_timeout"),
        reentrant=any(e.event == "reentrant_after_wait" for e in events),
        waits=waits,
        max_wait_seconds=max(waits, default=0.0),
        unfinished=len(holding),
        unparsed=unparsed,
    )


def gpu_lock_line(event: str, *, pid: int, cmd: str, time: str, extra: str = "") -> str:
    """One gpu_lock.log line (what graders.gpu_lock appends; parse_gpu_lock_log reads it back)."""
    if event not in EVENTS:
        raise ValueError(f"unknown gpu_lock.log event {event!r}")
    return f"{time} {event} pid={pid} cmd={cmd}{(' ' + extra) if extra else ''}\n"
