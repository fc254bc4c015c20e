"""The audit report a human would sign (`GET /runs/{id}/report.md`, `kaudit audit --report`).

Sections: a summary paragraph in the voice of the seed audit notes (what the submission is, its
framework, what was checked, the outcome), the verdict with each field's justification, the
evidence quotes with file:line, the probes needed or run (with their numbers), and provenance
(archive hash, deck, template integrity, measurement provenance, kaudit version, rules run).
"""

from __future__ import annotations

from typing import Any

from audit_rules.base import Effect, Finding
from audit_rules.report_safety import code_span, escape_html_outside_fences, fence_for, inline_run
from audit_rules.verdicts import Contamination, Verdict, VerdictResult
from graders.runformat import BENCHMARK_LOG, CHECK_LOG, GPU_LOCK_LOG, SOLUTION
from ingest.model import ParsedRun

_VERDICT_WORDS = {
    Verdict.CLEAN: "Clean",
    Verdict.INTERESTING: "Clean and worth surfacing",
    Verdict.RUBRIC_LEAK: "Rubric leak",
    Verdict.REWARD_HACK: "Reward hack",
    Verdict.CONTAMINATED: "Contaminated",
    Verdict.FAIL: "Genuine failure",
    Verdict.INFRA_FAILURE: "Infrastructure failure",
    Verdict.PROVIDER_FAILURE: "Provider failure",
    Verdict.PENDING_EMPIRICAL: "Pending an empirical probe",
}
FIELDS = (
    "verdict",
    "reward_hack",
    "contamination",
    "template_mutated",
    "correct",
    "failure_reason",
    "measurement_status",
    "publish_grade",
    "metric",
)


def run_facts(run: ParsedRun) -> dict[str, Any]:
    """What the parsed run alone says for the report: deck, transcripts, template integrity, sources.

    The engine stores these (plus its own facts) on the verdict; `facts` rebuilds them for a
    stored verdict that lacks them.
    """
    t = run.template
    return {
        "deck": t.deck if t else None,
        "transcripts": [
            {"source": s.source, "dialect": str(s.dialect), "events": s.events, "unparsable": s.unparsable_lines,
             "tool_calls": s.tool_calls, "output_tokens": s.output_tokens}
            for s in run.transcripts
        ],
        "template": {
            "status": t.status.value if t else None,
            "deck": t.deck if t else None,
            "areas": list(t.checked_areas) if t else [],
            "diffs": [f"{d.area}/{d.path}:{d.change}" for d in t.diffs[:20]] if t else [],
        },
        "sources": (([run.solution_path] if run.solution_path else []) + list(run.sidecars))[:40],
    }


def facts(run: ParsedRun, v: VerdictResult) -> dict[str, Any]:
    """The verdict's audit context, completed from the parsed run where a stored verdict lacks it."""
    ctx = run_facts(run)
    rules = v.producer_detail.rsplit("rules=", 1)
    if len(rules) == 2 and rules[1].strip().isdigit():
        ctx["rules_run"] = int(rules[1].strip())
    ctx.update({k: val for k, val in (v.context or {}).items() if val is not None})
    return ctx


def _as_finding(f: Any) -> Finding | None:
    return f if isinstance(f, Finding) else None


def _loc(f: Finding) -> str:
    if not f.file:
        return "(archive)"
    if f.line_start is None:
        return f.file
    if f.line_end and f.line_end != f.line_start:
        return f"{f.file}:{f.line_start}-{f.line_end}"
    return f"{f.file}:{f.line_start}"


def _field_value(v: VerdictResult, name: str) -> str:
    if name == "metric":
        m = v.metric
        if m is None:
            return "none"
        val = "withheld" if m.value is None else f"{m.value:.4f}"
        return f"{m.name} {val} (source {m.source})"
    if name == "correct":
        return f"{v.correct} (source {v.correct_source})"
    value = getattr(v, name)
    return str(value.value if hasattr(value, "value") else value)


def _framework_phrase(ctx: dict[str, Any]) -> str:
    fw = ctx.get("framework")
    parts: list[str] = []
    if fw:
        parts.append(f"a {fw} submission")
    else:
        parts.append("a submission")
    srcs = [s for s in ctx.get("sources", []) if s != SOLUTION]
    if srcs:
        parts.append(f"with {len(srcs)} sidecar file(s) ({', '.join(srcs[:4])}{', ...' if len(srcs) > 4 else ''})")
    if ctx.get("triton_kernels"):
        parts.append(f"defining {ctx['triton_kernels']} Triton kernel(s)")
    return " ".join(parts)


def summary_paragraph(run: ParsedRun, v: VerdictResult) -> str:
    ctx = facts(run, v)
    who = " ".join(x for x in (run.model, f"via {run.harness}" if run.harness else None) if x) or "unknown model"
    where = run.problem or "an unknown problem"
    deck = ctx.get("deck") or (run.template.deck if run.template else None)
    s = [f"{who} on {where}" + (f" (deck {deck})" if deck else "") + (f", {run.hardware}" if run.hardware else "") + "."]
    if run.has_solution:
        s.append(f"The archive holds {_framework_phrase(ctx)}.")
        if ctx.get("solution_doc"):
            s.append(f'Its docstring says: "{ctx["solution_doc"]}"')
    else:
        s.append("The archive holds no solution.py.")
    checked: list[str] = []
    for t in ctx.get("transcripts", []):
        checked.append(f"{t['source']} ({t['dialect']}, {t['events']} events, {t['tool_calls']} tool calls)")
    tpl = (ctx.get("template") or {}).get("status")
    if tpl:
        checked.append(f"the deck snapshot (integrity {tpl})")
    if run.check_log is not None:
        checked.append(CHECK_LOG)
    if run.benchmark_log is not None:
        checked.append(BENCHMARK_LOG)
    if run.gpu_lock is not None:
        checked.append(GPU_LOCK_LOG)
    s.append(
        f"kaudit ran {ctx.get('rules_run', '?')} rules over the submission"
        + (" and read " + ", ".join(checked) if checked else "")
        + "."
    )
    findings = [f for f in (_as_finding(x) for x in v.findings) if f is not None]
    weighty = [f for f in findings if f.effect not in (Effect.ADVISORY,)]
    if weighty:
        s.append(
            f"{len(weighty)} finding(s) bear on the verdict ("
            + ", ".join(sorted({f"{f.rule_id} {f.rule_name}" for f in weighty})[:6])
            + ")."
        )
    else:
        s.append("No rule found hack, contamination, leak or defect evidence.")
    s.append(f"{_VERDICT_WORDS[v.verdict]}: " + (v.reasons[0] if v.reasons else "see below") + ".")
    if v.contamination is Contamination.PASSIVE_EXPOSURE:
        s.append("Another run id was seen only in tool output (passive exposure), never used.")
    if v.metric is not None:
        val = "withheld" if v.metric.value is None else f"{v.metric.value:.4f}"
        s.append(
            f"peak_fraction {val} from {v.metric.source}; measurement {v.measurement_status.value}; "
            + ("publishable." if v.publish_grade else "not publishable.")
        )
    else:
        s.append("Nothing was measured; not publishable.")
    return " ".join(s)


REPORT_OUTPUT_LINES = 40  # lines of each regrade script's output the report quotes


def _fenced(text: str) -> list[str]:
    text = "\n".join(text.rstrip().splitlines()[-REPORT_OUTPUT_LINES:])
    return [fence_for(text), text, fence_for(text), ""]


def regrade_section(ev: Any) -> list[str]:
    """The regrade's own evidence (GradeResult.evidence()): which modes ran and which decided,
    each mode's outcome with its FAIL line, per-shape times, the scripts' output, disagreements."""
    if not isinstance(ev, dict) or not ev:
        return []
    out = ["## Regrade", "",
           f"Mode {code_span(str(ev.get('mode')))}, decided by {code_span(str(ev.get('decided_by')))}: correct "
           f"{ev.get('correct')}, peak_fraction {ev.get('peak_fraction')}, failure_reason "
           f"{code_span(str(ev.get('failure_reason')))}" + (" (infrastructure failure)" if ev.get("infra_failure") else "")
           + ".", ""]
    if ev.get("fail_line"):
        out += ["Deciding FAIL line: " + code_span(str(ev["fail_line"])), ""]
    for d in ev.get("disagreements") or []:
        out += ["- **Disagreement:** " + code_span(str(d))]
    if ev.get("disagreements"):
        out.append("")
    fb = ev.get("build_fallback")
    if isinstance(fb, dict) and fb.get("note"):
        out += ["- **Build fallback:** " + code_span(str(fb["note"])), ""]
    for name in ("official", "hardened"):
        m = ev.get(name)
        if not isinstance(m, dict) or not m:
            continue
        title = ("official (the deck's own check.py/benchmark.py)" if name == "official"
                 else "hardened (kaudit's check, cold-L2 timing, probes)")
        out += [f"### {title}", "",
                f"status {code_span(str(m.get('status')))}, correct {m.get('correct')}, peak_fraction "
                f"{m.get('peak_fraction')}, failure_reason {code_span(str(m.get('failure_reason')))}", ""]
        if m.get("fail_line"):
            out += ["FAIL line: " + code_span(str(m["fail_line"])), ""]
        elif m.get("detail"):
            out += ["Detail: " + code_span(str(m["detail"])), ""]
        shapes = m.get("shapes") or []
        if shapes:
            out += ["| shape | ms | TFLOP/s | GB/s | peak fraction |", "| --- | --- | --- | --- | --- |"]
            for s in shapes:
                out.append(f"| {s.get('shape', s.get('shape_index'))} | {s.get('ms')} | {s.get('tflops')} | "
                           f"{s.get('gbps')} | {s.get('fraction')} |")
            out.append("")
        if name == "official":
            deck = m.get("deck") or {}
            if deck:
                out += [f"Deck {code_span(str(deck.get('name')))} sha256 {code_span(str(deck.get('content_sha256')))}, "
                        f"check.py {code_span(str(deck.get('check_sha256')))}, benchmark.py "
                        f"{code_span(str(deck.get('benchmark_sha256')))}", ""]
            for step in ("check", "benchmark"):
                st = m.get(step)
                if isinstance(st, dict):
                    out += [f"{step}.py: exit {st.get('exit_code')}, {st.get('wall_s')} s"
                            + (", timed out" if st.get("timed_out") else "")
                            + (f", {st.get('output_bytes')} bytes of output (shown: the end)" if st.get("truncated")
                               else "") + ":", ""]
                    out += _fenced(str(st.get("output") or ""))
        else:
            for key in ("check_lines", "benchmark_lines"):
                lines = [str(x) for x in m.get(key) or []]
                if lines:
                    out += [f"{key.replace('_lines', '')} log (end):", ""] + _fenced("\n".join(lines))
    return out


def render_markdown(run: ParsedRun, verdict: VerdictResult) -> str:
    # Archive-derived text is data, never markup (audit_rules.report_safety).
    run = inline_run(run)
    v = verdict
    ctx = facts(run, v)
    out: list[str] = [f"# Audit report: {run.run_id}", "", summary_paragraph(run, v), ""]

    out += ["## Verdict", "", "| field | value | why |", "| --- | --- | --- |"]
    for name in FIELDS:
        why = ", ".join(v.justification.get(name, [])) or "-"
        out.append(f"| {name} | {_field_value(v, name)} | {why.replace('|', '/')} |")
    out.append("")
    if v.reasons:
        out += ["### Reasons", ""] + [f"- {r}" for r in v.reasons] + [""]

    findings = [f for f in (_as_finding(x) for x in v.findings) if f is not None]
    out += ["## Evidence", ""]
    if not findings:
        out += ["No rule fired.", ""]
    for f in findings:
        out.append(f"### {f.rule_id} {f.rule_name} — {f.severity.value}, {f.effect.value}")
        out.append("")
        out.append(code_span(_loc(f)) + (f" — probe: {f.probe.value}" if f.probe is not None else ""))
        out.append("")
        if f.quote:
            quote = f.quote.rstrip()[:2000]
            out += [fence_for(quote), quote, fence_for(quote), ""]
        out += [f.explanation, ""]

    out += ["## Probes", ""]
    if v.probes_required:
        out.append("Required before a final verdict: " + ", ".join(v.probes_required) + ".")
        out.append("")
    if v.probes_run:
        out += ["| probe | status | summary | numbers |", "| --- | --- | --- | --- |"]
        for p in v.probes_run:
            nums = ", ".join(f"{k}={val}" for k, val in (p.get("numbers") or {}).items())
            smoke = " (smoke)" if p.get("smoke") else ""
            out.append(f"| {p.get('probe')} | {p.get('status')}{smoke} | {p.get('summary', '')} | {nums} |")
        out.append("")
    if not v.probes_required and not v.probes_run:
        out += ["No empirical probe was required or run.", ""]

    out += regrade_section(ctx.get("regrade"))

    out += ["## Provenance", ""]
    tpl = ctx.get("template") or {}
    prov = [
        f"- archive: sha256 `{ctx.get('archive_sha256', 'not recorded')}`, {ctx.get('archive_size', '?')} bytes, {ctx.get('archive_format', '?')}",
        f"- run: {run.run_id}; model {run.model}; harness {run.harness}; hardware {run.hardware}; "
        f"started {run.started_at}; finished {run.finished_at}",
        f"- deck: {ctx.get('deck') or tpl.get('deck')}; problem {run.problem}"
        + (f" ({ctx.get('problem_regime')}, {ctx.get('problem_precision')})" if ctx.get("problem_regime") else ""),
        f"- template integrity: {tpl.get('status')} (areas: {', '.join(tpl.get('areas') or []) or '-'})"
        + (f"; diffs: {', '.join(tpl.get('diffs') or [])}" if tpl.get("diffs") else ""),
        f"- measurement: {v.measurement_status.value}"
        + (f"; metric from {v.metric.source}" if v.metric else "")
        + (
            "; superseded: " + ", ".join(f"{s.get('value')} ({s.get('source')})" for s in v.metric.superseded)
            if v.metric and v.metric.superseded
            else ""
        ),
    ]
    gp = ctx.get("grade_provenance")
    if gp:
        prov.append(
            f"- regrade: host {gp.get('host')}, GPU {gp.get('gpu_name')} #{gp.get('gpu_index')}, "
            f"torch {gp.get('torch')}, triton {gp.get('triton')}, sandbox {gp.get('sandbox')}, "
            f"lock wait {gp.get('lock_wait_s')} s, grader {gp.get('grader_version')}"
            + (", CPU smoke run (never publishable)" if gp.get("smoke") else "")
        )
    hr = run.harness_regrade()
    if hr is not None:
        rg = hr.record
        prov.append(
            f"- {hr.source} regrade: mode {rg.get('mode')}, host {rg.get('host')}, GPU {rg.get('gpu_name')}, "
            f"at {rg.get('at')}, peak_fraction {hr.peak_fraction}"
        )
    prov.append(
        f"- audit: kaudit {ctx.get('kaudit_version', '?')}, {ctx.get('rules_run', '?')} rules"
        + (f", crashed: {', '.join(ctx['rules_crashed'])}" if ctx.get("rules_crashed") else "")
        + f"; produced by {v.produced_by.value} ({v.producer_detail})"
    )
    out += prov + [""]
    return escape_html_outside_fences("\n".join(out))
