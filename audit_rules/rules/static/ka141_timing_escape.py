"""KA141 timing-escape.

What it flags: work launched where the benchmark's CUDA events do not see it: side streams
(``torch.cuda.Stream`` used with ``torch.cuda.stream(s)``, C++ ``cudaStreamCreate`` + launches on it)
or Python threads/executors, with no join before forward returns (no ``wait_stream``,
``s.synchronize()``, ``torch.cuda.synchronize()``, ``wait_event``, ``thread.join()``,
``future.result()``; C++ ``cudaStreamSynchronize``/``cudaStreamWaitEvent``/``cudaDeviceSynchronize``).

Why it matters: the benchmark records events on the current stream; kernels on another stream
that the current stream never waits for finish outside the timed window, so the measured time
covers only the launch. Needs the stream_escape probe (time with a device-wide synchronize).

Bad::

    with torch.cuda.stream(self._side):
        _kernel[grid](x, out)
    return out                                  # nobody waits for self._side

Good::

    with torch.cuda.stream(self._side):
        _kernel[grid](x, out)
    torch.cuda.current_stream().wait_stream(self._side)
    return out
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable

from audit_rules.base import AuditContext, Effect, Finding, Probe, RuleKind, RuleMeta, Severity
from audit_rules.rules.static import _support as S
from audit_rules.source_model import walk_body

RULE = RuleMeta(
    id="KA141",
    name="timing-escape",
    kind=RuleKind.STATIC,
    severity=Severity.HIGH,
    effect=Effect.NEEDS_PROBE,
    summary="Work on side streams or threads not joined before forward returns",
    probe=Probe.STREAM_ESCAPE,
)

_JOIN_CALLS = {"wait_stream", "synchronize", "wait_event", "join", "result", "wait", "shutdown", "record_stream"}


def check(ctx: AuditContext) -> Iterable[Finding]:
    sub = S.submission(ctx)
    if sub is None:
        return []
    out: list[Finding] = []
    live = sub.reach().live
    for func in sorted(live, key=lambda f: (f.module.path, f.node.lineno)):
        if func.is_triton:
            continue
        module = func.module
        scope = module.scope(func)
        escapes: list[tuple[ast.AST, str]] = []
        joined = False
        for node in walk_body(func.node):
            if isinstance(node, ast.With):
                for item in node.items:
                    ce = item.context_expr
                    if isinstance(ce, ast.Call) and (sub.qualname(ce.func, scope) or "").endswith("cuda.stream"):
                        arg = ce.args[0] if ce.args else None
                        argq = sub.qualname(arg, scope) if arg is not None else None
                        if argq and ("current_stream" in argq or "default_stream" in argq):
                            continue
                        if isinstance(arg, ast.Call) and S.call_name(arg) in ("current_stream", "default_stream"):
                            continue
                        escapes.append((node, "side stream"))
            elif isinstance(node, ast.Call):
                q = sub.qualname(node.func, scope) or ""
                name = S.call_name(node)
                if q in ("threading.Thread", "multiprocessing.Process") or name in ("submit", "map") and "executor" in module.segment(node.func).lower() or name == "start_new_thread":
                    escapes.append((node, "thread"))
                if name in _JOIN_CALLS:
                    joined = True
        if escapes and not joined:
            for node, what in escapes:
                out.append(
                    S.py_finding(
                        RULE,
                        module,
                        node,
                        f"{func.name} launches work on a {what} and returns without joining it: the timed window "
                        "may close before that work finishes.",
                        data={"topic": "checked_vs_timed", "mechanism": what},
                    )
                )
    for src in sub.loaded_native():
        creates = list(src.find(r"\bcudaStreamCreate\w*\s*\("))
        if not creates:
            continue
        if src.has(r"\bcuda(StreamSynchronize|StreamWaitEvent|DeviceSynchronize|EventSynchronize)\b"):
            continue
        if not src.has(r"<<<[^>]*,[^>]*,[^>]*,[^>]*>>>") and not re.search(r"cudaLaunch\w*\(", src.text):
            continue
        tl = creates[0][0]
        out.append(
            S.native_finding(
                RULE,
                src,
                tl,
                "The extension creates its own CUDA stream and launches on it with no synchronisation back to the "
                "caller's stream.",
                effect=Effect.NEEDS_PROBE,
                severity=Severity.HIGH,
                data={"topic": "checked_vs_timed", "mechanism": "native stream"},
            )
        )
    return S.dedupe(out)
