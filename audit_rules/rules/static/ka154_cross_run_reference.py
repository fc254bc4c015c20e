"""KA154 cross-run-reference-in-code.

What it flags: the submitted code itself naming another run's artefacts, found without any
transcript (public archives carry none):

* a string in the code (a path to read, load, import or `exec`) holding another run's id or a
  path under `outputs/runs/<other run>/`, in Python or in the C++/CUDA sources it builds
  (`#include "/workspace/outputs/runs/<id>/kernel.cuh"`): contamination;
* a pattern that reaches every run at once: the runs folder listed (`os.listdir(RUNS)`,
  `Path(RUNS).iterdir()`, `glob(os.path.join(RUNS, "*"))`, the path followed through the names it
  is built from), `outputs/runs/*`, or a wildcard folder in front of a run artefact
  (`glob("../*/solution.py")`, `"runs/*/result.json"`): contamination (the code lists them to
  use them). The runs folder as a base the code joins its OWN run id onto is not flagged;
* another run's id only in a comment or a docstring: passive exposure (the agent saw the id; the
  code does not use it).

The run's own id (result.json's `run_id`, the archive's top folder) is never flagged.

Why it matters: the spec counts another run id in a tool input, path or patch as contamination,
and writing solution.py is such a patch. A solution that loads a sibling run's kernel source or
execs its solution.py at import imports another agent's answer; the benchmark's own lint and the
transcript rules (KA201) cannot see that when the archive has no transcript.

Bad::

    _SRC = open("/workspace/outputs/runs/20260610_101744_codex_gpt-5.5_05_topk_bitonic/solution.py").read()
    exec(_SRC)

Good::

    _SRC = open(os.path.join(os.path.dirname(__file__), "topk.cu")).read()   # its own sidecar
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterable

from audit_rules.base import AuditContext, Effect, Finding, RuleKind, RuleMeta, Severity
from audit_rules.rules.static import _support as S
from audit_rules.source_model import PyModule, Submission
from audit_rules.transcript_text import RUNS_DIR_RE, RunIdentity, artifact_kind, run_identity

RULE = RuleMeta(
    id="KA154",
    name="cross-run-reference-in-code",
    kind=RuleKind.STATIC,
    severity=Severity.CRITICAL,
    effect=Effect.CONTAMINATION,
    summary="The code names another run's artefacts (its id, outputs/runs/<id>/..., or a glob over runs)",
    probe=None,
)

_ARTEFACT = r"(?:solution\.py|result(?:\.\w+)?\.json|check\.log|benchmark\.log|transcript[\w.-]*|scratch/[\w./-]+)"
# a wildcard folder in front of a run artefact: every sibling run's copy at once
_SIBLING_GLOB = re.compile(r"(?:^|/)[^/]*[*?][^/]*/(?:[^/]*/)*" + _ARTEFACT + r"$")


# a run id ends in its problem (`..._05_topk_bitonic`): a dated folder name of the solution's own
# (`20260101_120000_build_cache`) has the shape of an id but names no run
_PROBLEM_TAIL = re.compile(r"_\d\d_[a-z]")


def _foreign(ident: RunIdentity, text: str) -> list[str]:
    return [t for t in ident.foreign(text) if t in ident.known_others or _PROBLEM_TAIL.search(t)]


def _runs_folder(text: str) -> tuple[str, str] | None:
    """("all_runs", pattern) for `outputs/runs/*...`, ("runs_folder", path) for the runs folder
    itself (every run only where it is listed: _listings), None when `text` names neither."""
    for m in RUNS_DIR_RE.finditer(text):
        first = (m.group(1) or "").strip("/").split("/", 1)[0]
        if any(c in first for c in "*?["):
            return "all_runs", m.group(0)
        if not first:
            return "runs_folder", m.group(0)
    return None


def _what(ident: RunIdentity, text: str) -> tuple[str, str] | None:
    """(kind, detail) when `text` reaches another run: ("foreign", id), ("all_runs", pattern),
    ("sibling_glob", pattern), or ("runs_folder", path) for the runs folder itself; None otherwise."""
    foreign = _foreign(ident, text)
    if foreign:
        return "foreign", foreign[0]
    if (runs := _runs_folder(text)) is not None:
        return runs
    stripped = text.strip()
    if "\n" not in stripped and _SIBLING_GLOB.search(stripped):
        return "sibling_glob", stripped
    return None


def _comments(module: PyModule) -> Iterable[tuple[int, str]]:
    try:
        for tok in tokenize.generate_tokens(io.StringIO(module.source).readline):
            if tok.type == tokenize.COMMENT:
                yield tok.start[0], tok.string
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return


_LISTERS = frozenset({"listdir", "scandir", "walk", "glob", "iglob", "rglob", "iterdir"})


def _listings(sub: Submission) -> Iterable[tuple[PyModule, ast.Call, str]]:
    """(module, call, path) for every listing of the runs folder itself: `os.listdir(RUNS)`,
    `Path(RUNS).iterdir()`, `glob.glob(os.path.join(RUNS, "*"))`, the path followed through the
    names it is built from. A runs folder the code only joins its own run id onto lists nothing."""
    for module, func, call, q in sub.iter_calls():
        name = call.func.attr if isinstance(call.func, ast.Attribute) else (q or "").rsplit(".", 1)[-1]
        if name not in _LISTERS:
            continue
        exprs: list[ast.expr] = [*call.args[:1], *[k.value for k in call.keywords if k.arg in ("path", "top", "pathname")]]
        if isinstance(call.func, ast.Attribute) and not (q or "").startswith(("os.", "glob.")):
            exprs.append(call.func.value)  # Path(RUNS).iterdir() / .glob("*")
        hits = (runs for e in exprs for text in S.path_strings(sub, module, func, e)
                if (runs := _runs_folder(text)) is not None)
        if (first := next(hits, None)) is not None:
            yield module, call, first[1]


_QUIET_CALLS = frozenset({"print", "logging.info", "logging.debug", "logging.warning", "warnings.warn"})


def _in_message(sub: Submission, module: PyModule, node: ast.AST) -> bool:
    """The string sits in a printed or logged message (not a path the code opens or lists)."""
    cur = module.parents.get(node)
    while cur is not None and not isinstance(cur, ast.stmt):
        if isinstance(cur, ast.Call):
            return (sub.qualname(cur.func, module.scope(None)) or "") in _QUIET_CALLS
        cur = module.parents.get(cur)
    return False


def _explain(kind: str, detail: str, where: str) -> str:
    if kind == "foreign":
        return (f"{where} names another run, {detail}: the code reaches that run's artefacts (the spec's "
                "contamination: another run id in a path or patch).")
    if kind == "all_runs":
        return f"{where} reaches every run's folder at once ({detail!r}): other runs' artefacts, not its own."
    return f"{where} globs a run artefact through a wildcard folder ({detail!r}): every sibling run's copy of it."


def check(ctx: AuditContext) -> Iterable[Finding]:
    sub = S.submission(ctx)
    if sub is None:
        return []
    ident = run_identity(ctx.run, ctx.archive, ctx.other_run_ids)
    native_texts = [src.text for src in sub.native]
    out: list[Finding] = []
    for module in sub.modules.values():
        docs = {id(doc) for _, doc in S.docstrings(module.tree)}
        for node in ast.walk(module.tree):
            if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
                continue
            if len(node.value) > 200 and any(node.value.strip() in t for t in native_texts):
                continue  # an inline C++ source: read line by line below, where its lines are
            hit = _what(ident, node.value)
            if hit is None:
                continue
            kind, detail = hit
            if id(node) in docs:
                if kind == "foreign":
                    out.append(S.py_finding(
                        RULE, module, node, f"A docstring names another run, {detail}: seen, not used by the code.",
                        effect=Effect.PASSIVE_EXPOSURE, severity=Severity.MEDIUM,
                        data={"topic": "contamination", "run_id": detail, "artifact_kind": "mention"}))
                continue
            if kind != "foreign" and _in_message(sub, module, node):
                continue  # "results go under outputs/runs" in a printed message opens nothing
            if kind == "runs_folder":
                continue  # the runs folder itself: a finding only where it is listed (_listings)
            rest = node.value.split(detail, 1)[-1]
            reached = (artifact_kind(rest) if rest.strip("/") else "run_folder") if kind == "foreign" else (
                "listing" if kind == "all_runs" else "solution")
            out.append(S.py_finding(
                RULE, module, node, _explain(kind, detail, "A string in the code"),
                data={"topic": "contamination", "match": kind, "run_id": detail if kind == "foreign" else None,
                      "artifact_kind": reached}))
        for line, text in _comments(module):
            foreign = _foreign(ident, text)
            if foreign:
                out.append(S.py_finding(
                    RULE, module, module.tree, f"A comment names another run, {foreign[0]}: seen, not used by the code.",
                    effect=Effect.PASSIVE_EXPOSURE, severity=Severity.MEDIUM, line=line,
                    data={"topic": "contamination", "run_id": foreign[0], "artifact_kind": "mention"}))
    for module, call, path in _listings(sub):
        out.append(S.py_finding(
            RULE, module, call, _explain("all_runs", path, "A listing in the code"),
            data={"topic": "contamination", "match": "all_runs", "run_id": None, "artifact_kind": "listing"}))
    for src in sub.native:
        for i, raw in enumerate(src.text.split("\n"), start=1):
            code, _, comment = raw.partition("//")
            hit = _what(ident, code)
            if hit is not None and hit[0] != "runs_folder":
                kind, detail = hit
                out.append(S.native_finding(
                    RULE, src, i, _explain(kind, detail, f"The {src.kind} source"),
                    data={"topic": "contamination", "match": kind, "run_id": detail if kind == "foreign" else None,
                          "artifact_kind": "solution"}))
            elif seen := _foreign(ident, comment):
                out.append(S.native_finding(
                    RULE, src, i, f"A {src.kind} comment names another run, {seen[0]}: seen, not used by the code.",
                    effect=Effect.PASSIVE_EXPOSURE, severity=Severity.MEDIUM,
                    data={"topic": "contamination", "run_id": seen[0], "artifact_kind": "mention"}))
    return S.dedupe(out)
