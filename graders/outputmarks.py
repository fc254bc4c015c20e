"""Lines worth keeping from anywhere in a step's output, not only from its bounded head and tail.

A sandboxed step keeps the last OUTPUT_TAIL_BYTES of its stdout and stderr, and a deck script's
record its head and tail: a failed extension build that a solution prints early and then survives
(it catches the error and goes on through a fallback) can lie in the part left out, and then
graders.regrade.survived_build_fault cannot see it. `LineMarks` is fed the whole stream as it is
read and keeps the lines that match its pattern (bounded in count and length), whatever their
place in the output. Like the tails, the kept lines are the solution's text: operator-only.
"""

from __future__ import annotations

import re

# A failed extension build in a solution's own output: torch.utils.cpp_extension's error, ninja
# stopping, nvcc's fatal errors, a missing header. Seen in a run that still PASSED, it means the
# solution caught the failure and went on through another path (a real clean run of the corpus
# falls back to dequantise + matmul when its CUTLASS headers are not on the host: correct, 14x
# slower than the kernel the run shipped).
BUILD_FAULT = re.compile(
    r"Error building extension '|Error compiling objects for extension|ninja: build stopped|nvcc fatal|"
    r"fatal error: [^\n]*: No such file or directory|error: command '[^'\n]*nvcc' failed|"
    r"CalledProcessError: Command '\['ninja'")

MAX_LINES = 20
MAX_LINE_CHARS = 600
MAX_PENDING_BYTES = 1 << 16  # of a line still without its newline: only its last 64 KiB are scanned


class LineMarks:
    """Feed it chunks of one byte stream; `lines` holds the matching lines seen so far."""

    def __init__(self, pattern: re.Pattern[str] = BUILD_FAULT, max_lines: int = MAX_LINES) -> None:
        self.pattern = pattern
        self.max_lines = max_lines
        self.lines: list[str] = []
        self._pending = b""

    def _scan(self, raw: bytes) -> None:
        if len(self.lines) >= self.max_lines:
            return
        line = raw.decode("utf-8", "replace").rstrip("\r")
        if self.pattern.search(line):
            kept = line.strip()[:MAX_LINE_CHARS]
            if kept not in self.lines:
                self.lines.append(kept)

    def feed(self, data: bytes) -> None:
        if len(self.lines) >= self.max_lines or not data:
            return
        *complete, pending = (self._pending + data).split(b"\n")
        for raw in complete:
            self._scan(raw)
        self._pending = pending[-MAX_PENDING_BYTES:]

    def close(self) -> list[str]:
        """The matching lines, the last unterminated line included."""
        if self._pending:
            self._scan(self._pending)
            self._pending = b""
        return list(self.lines)
