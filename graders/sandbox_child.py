"""Entry point of a sandboxed grading step: `python -P -m graders.sandbox_child`.

Protocol (graders.sandbox): the first stdin line is JSON {nonce, fd, step, params, trusted}. It is
read and stdin closed BEFORE anything of the solution is imported; then a `started` message goes to
the inherited result fd, the step runs, and exactly one `result` message follows. stdout/stderr are
free for the solution and the graders' chatter: the parent never reads results from them.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import traceback
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any


def _jsonable(value: Any) -> Any:
    if is_dataclass(value) and not isinstance(value, type):
        return _jsonable(asdict(value))
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_jsonable(v) for v in value]
    if isinstance(value, float) and value != value:  # NaN is not JSON
        return None
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    return str(value)


def step_env(params: dict[str, Any]) -> dict[str, Any]:
    """Software/GPU facts as the grading child sees them (same sandbox, same CUDA_VISIBLE_DEVICES)."""
    import torch

    info: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(),
        "hostname_in_sandbox": platform.node(),
    }
    try:
        import triton

        info["triton"] = triton.__version__
    except Exception:
        info["triton"] = None
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info["gpu_name"] = props.name
        info["gpu_uuid"] = str(getattr(props, "uuid", "")) or None
        info["l2_bytes"] = int(getattr(props, "L2_cache_size", 0) or 0)
        info["sm_count"] = props.multi_processor_count
        info["capability"] = f"{props.major}.{props.minor}"
    return info


_progress: Any = None  # set by main(): sends a progress message on the result channel


def _stage_progress(stage: str) -> None:
    if _progress is not None:
        _progress({"stage": stage})


def _emitter(lines: list[str], phase: str) -> Any:
    def emit(line: str) -> None:
        lines.append(line)
        if _progress is not None:
            _progress({"phase": phase, "line": line})

    return emit


def step_check(params: dict[str, Any]) -> dict[str, Any]:
    env = step_env(params)  # before the solution: what this sandbox offers (GPU visible? versions)
    if params.get("device") == "cuda" and not env.get("cuda_available"):
        return {"env": env, "passed": False, "lines": [], "framework": None, "no_cuda": True}
    from graders.correctness import run_check, set_stage_sink

    set_stage_sink(_stage_progress)
    lines: list[str] = []
    outcome = run_check(
        Path(params["solution"]),
        Path(params["problem_dir"]),
        device=params["device"],
        shapes=params["shapes"],
        emit=_emitter(lines, "check"),
        record_dir=Path(params["record_dir"]) if params.get("record_dir") else None,
    )
    framework = getattr(outcome, "framework", None)
    return {
        "env": env,
        "passed": bool(outcome.passed),
        "lines": list(getattr(outcome, "lines", None) or lines),
        "framework": getattr(framework, "framework", None) if framework is not None else None,
        "framework_evidence": _jsonable(getattr(framework, "evidence", None)),
        "dispatched_ops": sorted(getattr(outcome, "dispatched_ops", set()) or []),
    }


def step_check_verify(params: dict[str, Any]) -> dict[str, Any]:
    """Trusted: the check's recorded outputs against references computed here (no solution import)."""
    from graders.correctness import set_stage_sink, verify_recorded

    set_stage_sink(_stage_progress)
    return verify_recorded(Path(params["problem_dir"]), Path(params["record_dir"]), device=params["device"],
                           shapes=params["shapes"])


def step_bench(params: dict[str, Any]) -> dict[str, Any]:
    from graders.timing import run_benchmark

    lines: list[str] = []
    outcome = run_benchmark(
        Path(params["solution"]),
        Path(params["problem_dir"]),
        device=params["device"],
        shapes=params["shapes"],
        emit=_emitter(lines, "benchmark"),
        hold=params.get("hold"),
    )
    return {
        "lines": list(getattr(outcome, "lines", None) or lines),
        "shapes": _jsonable(getattr(outcome, "shapes", [])),
        "peak_fraction": getattr(outcome, "peak_fraction", None),
        "sku": getattr(outcome, "sku", None),
    }


def step_probe_run(params: dict[str, Any]) -> dict[str, Any]:
    from graders.probes.runner import run_untrusted

    return _jsonable(run_untrusted(params, _progress))  # type: ignore[no-any-return]


def step_probe_verify(params: dict[str, Any]) -> dict[str, Any]:
    from graders.probes.verify import verify

    return _jsonable(verify(params))  # type: ignore[no-any-return]


def step_official(params: dict[str, Any]) -> dict[str, Any]:
    """Supervise one of the deck's own scripts (graders.official): this child never imports the
    solution; the script runs in a grandchild without the result channel."""
    from graders.official import supervise

    return supervise(params, _progress)


UNTRUSTED_STEPS = {"env": step_env, "check": step_check, "bench": step_bench, "probe_run": step_probe_run,
                   "official": step_official}
TRUSTED_STEPS = {"env": step_env, "probe_verify": step_probe_verify, "check_verify": step_check_verify}


def main() -> None:
    hello = json.loads(sys.stdin.buffer.readline())
    sys.stdin.close()
    nonce = str(hello["nonce"])
    chan = os.fdopen(int(hello["fd"]), "wb", buffering=0)
    step, params, trusted = str(hello["step"]), dict(hello.get("params") or {}), bool(hello.get("trusted"))

    def send(kind: str, **fields: Any) -> None:
        chan.write((json.dumps({"nonce": nonce, "kind": kind, **fields}) + "\n").encode())

    send("started")
    if os.environ.get("TRITON_INTERPRET") == "1":
        from graders import interp_fixes

        interp_fixes.apply()  # before any solution code: a bf16 tl.dot must not multiply bit patterns
    global _progress
    _progress = lambda data: send("progress", data=_jsonable(data))  # noqa: E731
    table = TRUSTED_STEPS if trusted else UNTRUSTED_STEPS
    try:
        if step not in table:
            raise ValueError(f"step {step!r} is not allowed in a {'trusted' if trusted else 'untrusted'} child")
        result = table[step](params)
        message = {"ok": True, "result": _jsonable(result)}
    except BaseException as exc:  # SystemExit from a solution included: report, do not die silently
        # SystemExit/KeyboardInterrupt come from solution code (the graders raise neither): the
        # parent must count them against the solution, never as a grader (infra) error
        message = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:4000],
                   "result": {"traceback": traceback.format_exc()[-6000:],
                              "solution_exit": not isinstance(exc, Exception)}}
    try:
        send("result", **message)
    finally:
        chan.close()
        sys.stdout.flush()
        sys.stderr.flush()
        # skip interpreter teardown: atexit hooks a solution registered must not run after the result
        os._exit(0)


if __name__ == "__main__":
    main()
