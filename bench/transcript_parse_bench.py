"""Streaming transcript normalization: events/s, wall seconds and peak RSS on a big transcript.

Generates a claude stream-json transcript of about 80 MB / 400k events in a temp dir (thinking,
text, Bash/Edit/Write tool calls with realistic inputs, tool results as strings and as block
lists, usage on messages, a few garbage lines), then streams it once through
`ingest.transcripts.iter_events` (what parse_run does) and reports the figures.

    python bench/transcript_parse_bench.py [--events 400000] [--keep]

Peak RSS is the process's ru_maxrss (it includes the interpreter and the generator's own
buffers: generation writes line by line, so it adds little).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ingest.model import Dialect, TranscriptStats
from ingest.transcripts import iter_events

RUN = "20260801_224338_claude_claude-opus-4-8_01_fp8_gemm"


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB


def generate(path: Path, target_events: int, seed: int = 7) -> tuple[int, int]:
    """Write the transcript; returns (events written, bytes)."""
    rng = random.Random(seed)
    words = ("kernel tile warp block shared memory latency bandwidth tensor core fp8 scale epilogue "
             "pipeline stage swizzle occupancy register spill launch grid stride check benchmark").split()

    def sentence(n: int) -> str:
        return " ".join(rng.choice(words) for _ in range(n))

    events = 0
    call = 0
    with open(path, "w") as f:
        f.write(json.dumps({"type": "system", "subtype": "init", "session_id": "s", "model": "claude-opus-4-8",
                            "cwd": f"/home/kbh/outputs/runs/{RUN}/repo", "tools": ["Bash", "Edit", "Write"]}) + "\n")
        events += 1
        while events < target_events:
            call += 1
            cid = f"toolu_{call:08d}"
            r = rng.random()
            if r < 0.4:
                tool, inp = "Bash", {"command": f"cd repo && python check.py --shape {call % 5} 2>&1 | tail -n 20",
                                     "description": sentence(5)}
            elif r < 0.7:
                tool, inp = "Edit", {"file_path": f"/home/kbh/outputs/runs/{RUN}/repo/solution.py",
                                     "old_string": sentence(8), "new_string": sentence(9)}
            else:
                tool, inp = "Write", {"file_path": f"scratch/k{call % 50}.cu", "content": sentence(16)}
            blocks = [{"type": "thinking", "thinking": sentence(8)}, {"type": "text", "text": sentence(10)},
                      {"type": "tool_use", "id": cid, "name": tool, "input": inp}]
            f.write(json.dumps({"type": "assistant", "message": {"role": "assistant", "content": blocks,
                                "usage": {"input_tokens": 10, "output_tokens": 200}}, "session_id": "s"}) + "\n")
            events += 3
            content: object = sentence(14) if call % 2 else [{"type": "text", "text": sentence(14)}]
            f.write(json.dumps({"type": "user", "message": {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": cid, "content": content, "is_error": call % 17 == 0}]},
                "session_id": "s"}) + "\n")
            events += 1
            if call % 5000 == 0:
                f.write('{"type": "assistant", "message": {"truncated\n')
        f.write(json.dumps({"type": "result", "subtype": "success", "is_error": False, "result": "done",
                            "total_cost_usd": 12.5, "usage": {"input_tokens": 1, "output_tokens": 987654}}) + "\n")
        events += 1
        size = f.tell()
    return events, size


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=400_000)
    ap.add_argument("--keep", action="store_true", help="keep the generated transcript")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="kaudit-transcript-bench-"))
    path = tmp / "transcript.jsonl"
    try:
        t0 = time.perf_counter()
        written, size = generate(path, args.events)
        gen_s = time.perf_counter() - t0
        rss_before = _rss_mb()

        stats = TranscriptStats(source="transcript.jsonl", dialect=Dialect.UNKNOWN)
        cpu0 = time.process_time()
        t0 = time.perf_counter()
        n = 0
        tool_inputs = 0
        for ev in iter_events(path, "transcript.jsonl", stats):
            n += 1
            if ev.tool_input is not None:
                tool_inputs += 1
        wall = time.perf_counter() - t0
        cpu = time.process_time() - cpu0
        rss_peak = _rss_mb()

        print(f"command: python bench/transcript_parse_bench.py --events {args.events}")
        print(f"transcript: {size / 1e6:.1f} MB, {stats.lines} lines, {written} events written "
              f"(generated in {gen_s:.1f} s)")
        print(f"dialect={stats.dialect.value} events={n} tool_calls={stats.tool_calls} "
              f"unparsable_lines={stats.unparsable_lines} output_tokens={stats.output_tokens}")
        print(f"normalize: wall {wall:.2f} s, {n / wall:,.0f} events/s, {size / 1e6 / wall:.1f} MB/s; "
              f"CPU {cpu:.2f} s ({n / cpu:,.0f} events per CPU second)")
        print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        print(f"peak RSS: {rss_peak:.0f} MB (before streaming: {rss_before:.0f} MB)")
        assert n == written and tool_inputs == stats.tool_calls
        if args.keep:
            print(f"kept: {path}")
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
