"""Benchmark: the transcript rules over an 80 MB / 400k-event claude transcript, streamed.

Generates a realistic claude stream-json session (thinking, text, Bash/Read/Edit/Write tool
calls, tool results with compiler output, ps listings naming sibling runs, check runs, usage
lines), packs it into a real run archive, runs ingest (safe_unpack + parse_run) and then the
audit engine's `run_rules` over every registered transcript rule -- the transcript is streamed
once through `ingest.transcripts.iter_events` and fed to every Checker. Reports wall seconds of
the audit (and of ingest, separately) and the process's peak RSS.

Target (issue 4): audit <= 10 s and <= 400 MB RSS on the 2-core dev box.

    python bench/transcript_audit_bench.py                 # 80 MB / ~400k events
    python bench/transcript_audit_bench.py --mb 8 --events 0   # quick run
    python bench/transcript_audit_bench.py --keep /tmp/t   # keep the generated transcript
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import resource
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

OWN = "20260801_224338_claude_claude-opus-4-8_01_fp8_gemm"
SIBLINGS = (
    "20260801_223901_kimi_kimi-k3_07_w4a16_gemm",
    "20260801_224102_codex_gpt-5.6-sol_03_paged_attention",
    "20260801_224510_opencode_glm-5.2_05_topk_bitonic",
)
WS = f"/home/agent/kbh/outputs/runs/{OWN}/repo/problems/01_fp8_gemm"

THOUGHTS = (
    "The K=4127 shape is off the 16-byte alignment, so TMA descriptors need a padded copy of x; pad once per call "
    "into a workspace keyed on the shape and keep the weight padding keyed on weight._version.",
    "Per-shape fractions so far: 0.41, 0.33, 0.025, 0.58. The skinny M=32 shape is bandwidth bound; split-K with "
    "fp32 atomics should help there, at the cost of a finalize kernel.",
    "The benchmark flushes L2 before each trial, so every operand comes from HBM; the kernel must stream K tiles "
    "with a deep enough pipeline to hide the latency. Four stages of 128x128x128 fp8 tiles fit in shared memory.",
    "Compile error: the epilogue indexes acc with a runtime index, which spills to local memory. Unroll the store "
    "loop with tl.static_range instead.",
    "Numeric stress scales x by 8; the fp32 accumulator is fine, but the bf16 output of large values needs the "
    "scale applied before the cast, exactly as the reference does.",
)
TEXTS = (
    "Let me check the current state of the solution and run the checker.",
    "The checker passes. Now I'll benchmark the four shapes.",
    "I'll try a persistent kernel with grouped rasterization next.",
    "Reverting the last change: it regressed the skinny shape.",
)
COMMANDS = (
    "python check.py 2>&1 | tail -5",
    "python benchmark.py 2>&1 | tail -12",
    "nvidia-smi --query-gpu=name,memory.used,utilization.gpu --format=csv",
    "ps -eo pid,etime,args | grep -v grep | grep python | head",
    "sed -n '1,80p' solution.py",
    "ls -la && cat framework.txt 2>/dev/null",
    f"cd {WS} && python scratch/bench_shapes.py --shape 2 --iters 50",
    "grep -n 'BLOCK_K\\|num_stages' solution.py",
    "python -c 'import torch, triton; print(torch.__version__, triton.__version__)'",
    "sed -i 's/num_stages=3/num_stages=4/' solution.py && python check.py 2>&1 | tail -2",
)
BENCH_OUT = "\n".join(
    [f"shape={i} variant=solution tflops={700 - i * 90:.3f} gbps={500 + i:.3f} ms={0.17 + i * 0.05:.4f}" for i in range(4)]
    + [f"shape={i} solution_peak_fraction={0.41 - i * 0.05:.4f}" for i in range(4)]
    + ["peak_fraction: 0.2870", "RESULT: OK"]
)
COMPILE_ERR = (
    "/tmp/torch_extensions/fp8_gemm/cuda.cu(212): error: identifier \"BK\" is undefined\n"
    "          for (int k0 = 0; k0 < K; k0 += BK) {\n1 error detected in the compilation of \"cuda.cu\".\n"
    "ninja: build stopped: subcommand failed."
)


def _solution(version: int) -> str:
    body = "\n".join(
        f"    acc{j} = tl.dot(a, b, acc{j})  # stage {j} of version {version}" for j in range(60)
    )
    return (
        '"""FP8 GEMM: persistent Triton kernel."""\nimport torch\nimport triton\nimport triton.language as tl\n\n'
        "@triton.jit\ndef _kernel(a_ptr, b_ptr, c_ptr, M, N, K):\n" + body + "\n"
    )


def _line(obj: dict[str, Any]) -> str:
    return json.dumps(obj, separators=(",", ":")) + "\n"


def generate(path: Path, target_bytes: int, min_events: int = 0, seed: int = 7) -> tuple[int, int]:
    """Write a claude stream-json transcript of at least `target_bytes` and `min_events`; (lines, events)."""
    rnd = random.Random(seed)
    n = 0
    events = 0
    with open(path, "w", encoding="utf-8") as f:
        size = f.write(_line({"type": "system", "subtype": "init", "cwd": WS, "session_id": "bench", "model": "claude-opus-4-8",
                              "tools": ["Bash", "Read", "Edit", "Write"]}))
        n += 1
        events += 1
        turn = 0
        while size < target_bytes or events < min_events:
            turn += 1
            mid = f"msg_{turn:07d}"

            def assistant(block: dict[str, Any], usage: bool = False, mid: str = mid) -> str:
                msg: dict[str, Any] = {"id": mid, "role": "assistant", "content": [block]}
                if usage:
                    msg["usage"] = {"input_tokens": 12, "output_tokens": rnd.randint(50, 900),
                                    "cache_read_input_tokens": 90000}
                return _line({"type": "assistant", "message": msg})

            def tool_result(tid: str, content: str, err: bool = False) -> str:
                return _line({"type": "user", "message": {"role": "user", "content": [
                    {"tool_use_id": tid, "type": "tool_result", "content": content, "is_error": err}]}})

            out: list[str] = []
            if rnd.random() < 0.35:
                out.append(assistant({"type": "thinking", "thinking": rnd.choice(THOUGHTS)[: rnd.randint(20, 140)],
                                      "signature": "sig"}, usage=True))
            if rnd.random() < 0.4:
                out.append(assistant({"type": "text", "text": rnd.choice(TEXTS)[: rnd.randint(10, 70)]}))
            tid = f"toolu_{turn:08d}"
            r = rnd.random()
            if r < 0.62:
                cmd = rnd.choice(COMMANDS)
                out.append(assistant({"type": "tool_use", "id": tid, "name": "Bash", "input": {"command": cmd}}))
                if "check.py" in cmd:
                    res = "PASS" if rnd.random() < 0.8 else COMPILE_ERR
                elif "benchmark.py" in cmd:
                    res = BENCH_OUT if rnd.random() < 0.3 else "peak_fraction: 0.2870"
                elif cmd.startswith("ps "):
                    res = "\n".join(f"{4000 + i} 0{i}:12:09 python check.py --run-dir /home/agent/kbh/outputs/runs/{s}"
                                    for i, s in enumerate(SIBLINGS))
                else:
                    res = "ok"
                out.append(tool_result(tid, res, err=res is COMPILE_ERR))
            elif r < 0.8:
                out.append(assistant({"type": "tool_use", "id": tid, "name": "Read", "input": {"file_path": "solution.py"}}))
                out.append(tool_result(tid, _solution(turn)[: rnd.randint(20, 120)]))
            elif r < 0.985:
                fpath = f"{WS}/solution.py" if rnd.random() < 0.2 else "solution.py"
                out.append(assistant({"type": "tool_use", "id": tid, "name": "Edit", "input": {
                    "file_path": fpath, "old_string": "num_warps=4", "new_string": "num_warps=8"}}))
                out.append(tool_result(tid, "The file has been updated."))
            else:
                out.append(assistant({"type": "tool_use", "id": tid, "name": "Write", "input": {
                    "file_path": f"{WS}/solution.py", "content": _solution(turn)[: rnd.randint(400, 2000)]}}))
                out.append(tool_result(tid, "File created successfully."))
            for ln in out:
                size += f.write(ln)
            n += len(out)
            events += len(out)
        size += f.write(_line({"type": "result", "subtype": "success", "is_error": False, "result": "done",
                               "num_turns": turn, "usage": {"input_tokens": 10_000_000, "output_tokens": 1_800_000}}))
        n += 1
        events += 1
    return n, events


def build_archive(work: Path, transcript: Path) -> Path:
    result = {"run_id": OWN, "problem": "01_fp8_gemm", "harness": "claude", "model": "claude-opus-4-8",
              "has_solution": True, "correct": True, "check_exit_code": 0, "peak_fraction": 0.287,
              "usage": {"output_tokens": 1_800_000}}
    tar_path = work / "run.tar"
    with tarfile.open(tar_path, "w") as tf:
        for name, data in (("result.json", json.dumps(result).encode()), ("solution.py", _solution(0).encode()),
                           ("check.log", b"PASS\n")):
            info = tarfile.TarInfo(f"{OWN}/{name}")
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
        tf.add(transcript, arcname=f"{OWN}/transcript.jsonl")
    return tar_path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, default=80.0, help="transcript size in MB (default 80)")
    ap.add_argument("--events", type=int, default=400_000, help="at least this many events (default 400k)")
    ap.add_argument("--keep", type=Path, default=None, help="keep the generated transcript here")
    args = ap.parse_args()

    from audit_rules.engine import build_context, run_rules
    from audit_rules.rules.transcript import RULES as TRANSCRIPT_RULES
    from ingest.archive import safe_unpack
    from ingest.decks import bundled_decks
    from ingest.run import parse_run

    with tempfile.TemporaryDirectory(prefix="kaudit-bench-") as tmp:
        work = Path(tmp)
        tpath = (args.keep or work) / "transcript.jsonl"
        tpath.parent.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        lines, events = generate(tpath, int(args.mb * 1_000_000), args.events)
        gen_s = time.perf_counter() - t0
        size = tpath.stat().st_size
        tar = build_archive(work, tpath)
        decks = bundled_decks()
        rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        t1 = time.perf_counter()
        archive = safe_unpack(tar, work / "staged")
        run = parse_run(archive, decks)
        ingest_s = time.perf_counter() - t1
        ctx = build_context(archive, run, decks)
        t2 = time.perf_counter()
        c2 = time.process_time()
        findings = run_rules(ctx, TRANSCRIPT_RULES)
        audit_s = time.perf_counter() - t2
        audit_cpu = time.process_time() - c2
        # The normalizer alone (ingest's iter_events), to separate its share from the rules'.
        from ingest.transcripts import iter_events

        c3 = time.process_time()
        for _ in iter_events(archive.files["transcript.jsonl"].staged_path, "transcript.jsonl"):
            pass
        normalize_cpu = time.process_time() - c3
        peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    by_rule: dict[str, int] = {}
    for f in findings:
        by_rule[f.rule_id] = by_rule.get(f.rule_id, 0) + 1
    report = {
        "transcript_mb": round(size / 1e6, 1),
        "lines": lines,
        "events": events,
        "transcript_rules": len(TRANSCRIPT_RULES),
        "generate_s": round(gen_s, 2),
        "ingest_s(safe_unpack+parse_run)": round(ingest_s, 2),
        "audit_s(run_rules, transcript rules, streamed)": round(audit_s, 2),
        "audit_cpu_s": round(audit_cpu, 2),
        "of_which_normalizer_cpu_s(iter_events alone)": round(normalize_cpu, 2),
        "load_avg_1min": round(os.getloadavg()[0], 2),
        "peak_rss_mb(process)": round(peak_mb, 1),
        "rss_before_ingest_mb": round(rss_before, 1),
        "findings": by_rule,
        "target": "audit <= 10 s, peak RSS <= 400 MB",
        "met": audit_s <= 10.0 and peak_mb <= 400.0,
    }
    print(json.dumps(report, indent=2))
    return 0 if report["met"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
