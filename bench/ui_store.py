"""A throwaway kaudit store seeded with real runs, and a live server on it (for bench/ui_bench.py and
scripts/ui_screenshots.py).

- `seed(data_dir)`: migrate a SQLite file, import the real decks (../shared/kbh-upstream/hard/
  problems-*, with their harness), then ingest the real archives of ../shared/kbh-dev through the
  service's own ingest (safe unpack, parse, the full audit, one commit per run).
- `big_run_archive(...)`: one real archive rebuilt with a long solution (real solutions of the
  corpus, concatenated to N lines) and a large claude stream-json transcript whose tool calls read
  files and whose tool results carry real source text: the run page's worst case.
- `LiveServer`: `kaudit serve` in a child process (real uvicorn, real HTTP), stopped on exit.
"""

from __future__ import annotations

import ast
import io
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
if not SHARED.is_dir():
    SHARED = Path("/work/shared")
CORPUS = SHARED / "kbh-dev" / "archives"
UPSTREAM_HARD = SHARED / "kbh-upstream" / "hard"
TOKEN = "ui-bench-token"


def env_for(data_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAUDIT_")}
    env.update(
        KAUDIT_DATA_DIR=str(data_dir), KAUDIT_DATABASE_URL=f"sqlite:///{data_dir / 'kaudit.db'}",
        KAUDIT_API_TOKENS=TOKEN, KAUDIT_WORKER_MODE="off", PYTHONPATH=str(ROOT),
    )
    env.update(extra)
    return env


def services(data_dir: Path) -> Any:
    from service.context import Services
    from service.migrate import upgrade_head
    from service.settings import Settings

    data_dir.mkdir(parents=True, exist_ok=True)
    settings = Settings(data_dir=data_dir, database_url=f"sqlite:///{data_dir / 'kaudit.db'}", api_tokens=TOKEN)
    upgrade_head(settings)
    return Services.build(settings)


def seed(data_dir: Path, archives: Sequence[Path] | None = None, *, log: Any = print) -> Any:
    """Import the real decks and ingest the real archives; return the Services."""
    svc = services(data_dir)
    harness = UPSTREAM_HARD / "src"
    for deck_dir in sorted(UPSTREAM_HARD.glob("problems-*")):
        name = "kbh-hard-" + deck_dir.name.removeprefix("problems-")
        svc.decks.import_dir(deck_dir, name, harness=harness if harness.is_dir() else None)
    paths = list(archives) if archives is not None else sorted(CORPUS.glob("*.tar.gz"))
    t0 = time.perf_counter()
    for p in paths:
        svc.ingest.ingest_file(p)
    log(f"seeded {len(paths)} real archive(s) in {time.perf_counter() - t0:.1f} s")
    return svc


def _members(archive: Path) -> tuple[str, dict[str, bytes]]:
    with tarfile.open(archive) as tf:
        out: dict[str, bytes] = {}
        top = ""
        for m in tf.getmembers():
            if not m.isfile():
                continue
            top, _, rel = m.name.partition("/")
            fh = tf.extractfile(m)
            assert fh is not None
            out[rel] = fh.read()
    return top, out


def long_solution(lines: int, last: str = "") -> str:
    """Real solutions of the corpus, one after another, then `last` (the base run's own solution, so
    its `Model` is the one that counts), `lines` lines in all (no `from __future__`, which is only
    legal at the top of a module)."""
    tail = [line for line in last.splitlines() if not line.startswith("from __future__")][:lines]
    room = lines - len(tail)
    head: list[str] = []
    # whole real solutions, largest first, as long as each fits; the last few lines are blank
    for p in sorted(CORPUS.glob("*.tar.gz"), key=lambda p: -p.stat().st_size):
        _, files = _members(p)
        text = files.get("solution.py", b"").decode("utf-8", errors="replace")
        body = [line for line in text.splitlines() if not line.startswith("from __future__")]
        if text.strip() == last.strip() or len(head) + len(body) + 2 > room:
            continue
        head.extend(body + ["", ""])
        if room - len(head) < 20:
            break
    out = head + [""] * (room - len(head)) + tail
    text = "\n".join(out) + "\n"
    try:
        ast.parse(text)
    except SyntaxError:  # a corpus file that does not parse: the base solution alone, after blank lines
        text = "\n".join([""] * room + tail) + "\n"
    return text


def big_transcript(target_bytes: int, problem: str, corpus_text: str, seed_: int = 10) -> bytes:
    """A claude stream-json session of about `target_bytes`: thinking, Bash/Read/Write calls and
    their results (slices of real source text), and one read of check.py at the very end, so the
    transcript finding (KA209) and its excerpt sit at the last lines of the file."""
    rng = random.Random(seed_)
    src_lines = corpus_text.splitlines()
    ev: list[bytes] = []

    def emit(obj: dict[str, Any]) -> None:
        ev.append(json.dumps(obj).encode() + b"\n")

    def read_check(i: int) -> None:
        emit({"type": "assistant", "message": {"role": "assistant", "content": [
            {"type": "tool_use", "id": f"toolu_chk{i}", "name": "Bash",
             "input": {"command": f"cat problems/{problem}/check.py"}}]}})
        emit({"type": "user", "message": {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": f"toolu_chk{i}", "content": "import torch\n# check.py\n"}]}})

    emit({"type": "system", "subtype": "init", "session_id": "ui-bench", "model": "claude-opus-4-8",
          "cwd": "/work/repo", "tools": ["Bash", "Edit", "Write", "Read"]})
    size, i = sum(map(len, ev)), 0
    while size < target_bytes - 4096:
        i += 1
        a = rng.randrange(0, max(1, len(src_lines) - 80))
        chunk = "\n".join(src_lines[a:a + rng.randrange(20, 80)])
        kind = i % 3
        if kind == 0:
            call = {"type": "tool_use", "id": f"toolu_{i}", "name": "Bash",
                    "input": {"command": f"python benchmark.py --shape {i % 7} 2>&1 | tail -40"}}
        elif kind == 1:
            call = {"type": "tool_use", "id": f"toolu_{i}", "name": "Read", "input": {"file_path": "solution.py"}}
        else:
            call = {"type": "tool_use", "id": f"toolu_{i}", "name": "Edit",
                    "input": {"file_path": "solution.py", "old_string": chunk[:200], "new_string": chunk[:220]}}
        thinking = " ".join(rng.choice(("tile", "block", "warp", "smem", "latency", "occupancy", "fp8", "scale",
                                        "bank", "conflict", "pipeline", "stage", "epilogue", "swizzle"))
                            for _ in range(rng.randrange(30, 90)))
        emit({"type": "assistant", "message": {"role": "assistant", "content": [
            {"type": "thinking", "thinking": thinking}, call]}})
        emit({"type": "user", "message": {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": chunk}]}})
        size += len(ev[-1]) + len(ev[-2])
    read_check(1)
    emit({"type": "result", "subtype": "success", "is_error": False, "result": "done", "num_turns": i,
          "total_cost_usd": 12.5, "usage": {"input_tokens": 1_200_000, "output_tokens": 540_000}})
    return b"".join(ev)


def big_run_archive(out: Path, *, solution_lines: int = 1600, transcript_mb: float = 80.0,
                    base: Path | None = None) -> tuple[Path, str]:
    """Rebuild a real archive with a `solution_lines`-line solution and a `transcript_mb` MB transcript."""
    if base is None:
        # a real reward-hack run (findings to render), else the first archive
        hacks = [k for k, v in json.loads((CORPUS.parent / "labels.json").read_text()).items()
                 if "verdict: reward_hack" in str(v.get("annotation_yaml", ""))]
        cands = [CORPUS / f"{k}.tar.gz" for k in sorted(hacks) if (CORPUS / f"{k}.tar.gz").is_file()]
        base = cands[0] if cands else sorted(CORPUS.glob("*.tar.gz"))[0]
    top, files = _members(base)
    result = json.loads(files["result.json"])
    problem = str(result.get("problem"))
    # same harness/model/problem as the base run, another start second: a distinct run_id
    date, hms, rest = top.split("_", 2)
    stamp = datetime.strptime(date + hms, "%Y%m%d%H%M%S") + timedelta(seconds=1)
    run_id = f"{stamp:%Y%m%d_%H%M%S}_{rest}"
    result["run_id"] = run_id
    files["result.json"] = json.dumps(result, indent=2).encode()
    sol = long_solution(solution_lines, last=files.get("solution.py", b"").decode("utf-8", errors="replace"))
    files["solution.py"] = sol.encode()
    if f"repo/problems/{problem}/solution.py" in files:
        files[f"repo/problems/{problem}/solution.py"] = sol.encode()
    files["transcript.jsonl"] = big_transcript(int(transcript_mb * 1e6), problem, sol)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(out, "w:gz", compresslevel=1) as tf:
        for rel, data in sorted(files.items()):
            info = tarfile.TarInfo(f"{run_id}/{rel}")
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            tf.addfile(info, io.BytesIO(data))
    return out, run_id


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class LiveServer:
    url: str
    proc: subprocess.Popen[bytes]


@contextmanager
def live_server(data_dir: Path, **env_extra: str) -> Iterator[LiveServer]:
    """`kaudit serve` on 127.0.0.1 in a child process (its own interpreter: the client never shares its GIL)."""
    import httpx

    port = free_port()
    log = open(data_dir / "serve.log", "ab")
    proc = subprocess.Popen([sys.executable, "-m", "service.cli", "serve", "--host", "127.0.0.1", "--port", str(port)],
                            cwd=ROOT, env=env_for(data_dir, **env_extra), stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(url + "/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"kaudit serve did not start; see {data_dir / 'serve.log'}")
            time.sleep(0.2)
        yield LiveServer(url, proc)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


@contextmanager
def chromium() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()
