"""gpu_lock.log parsing and run-id parsing."""

from __future__ import annotations

import pytest

from ingest.logs import parse_gpu_lock_log
from ingest.runid import parse_run_id

PROBLEMS = ["01_fp8_gemm", "02_kda_cutlass", "03_paged_attention", "05_topk_bitonic", "06_sonic_moe_swiglu",
            "07_w4a16_gemm"]


def test_gpu_lock_log_derived_figures() -> None:
    text = "\n".join([
        "2026-08-01T10:00:00+00:00 wait pid=10 cmd=check",
        "2026-08-01T10:00:30+00:00 start pid=10 cmd=check args=--shapes all --seed 1",
        "2026-08-01T10:01:00+00:00 wait pid=11 cmd=benchmark",
        "2026-08-01T10:02:00+00:00 end pid=10 cmd=check status=0 elapsed_s=90.0",
        "2026-08-01T10:02:05+00:00 start pid=11 cmd=benchmark",
        "2026-08-01T10:03:05+00:00 end pid=11 cmd=benchmark status=1 elapsed_s=60.0",
        "garbage line",
        "2026-08-01T10:04:00+00:00 wait pid=12 cmd=check",
        "2026-08-01T11:04:00+00:00 lock_timeout pid=12 cmd=check elapsed_s=3600",
        "2026-08-01T11:05:00+00:00 reentrant_after_wait pid=13 cmd=check",
        "2026-08-01T11:05:01+00:00 start pid=13 cmd=check",
    ])
    log = parse_gpu_lock_log(text)
    assert log.acquisitions == 3
    assert log.waits == [30.0, 65.0]
    assert log.wait_seconds == pytest.approx(95.0)
    assert log.max_wait_seconds == pytest.approx(65.0)
    assert log.active_seconds == pytest.approx(150.0)
    assert log.lock_timeouts == 1
    assert log.reentrant
    assert log.unfinished == 1
    assert log.unparsed == ["garbage line"]
    start = log.events[1]
    assert (start.pid, start.cmd, start.args) == (10, "check", "--shapes all --seed 1")
    assert log.events[3].status == 0 and log.events[3].elapsed_s == 90.0


def test_gpu_lock_end_without_timestamps_uses_elapsed() -> None:
    log = parse_gpu_lock_log("bad-time start pid=1 cmd=x\nbad-time end pid=1 cmd=x status=0 elapsed_s=12.5\n")
    assert log.acquisitions == 1 and log.active_seconds == pytest.approx(12.5)


def test_gpu_lock_empty() -> None:
    log = parse_gpu_lock_log("")
    assert (log.acquisitions, log.wait_seconds, log.active_seconds, log.lock_timeouts, log.reentrant) == (
        0, 0.0, 0.0, 0, False)


@pytest.mark.parametrize(
    ("run_id", "ts", "harness", "slug", "problem", "suffix"),
    [
        ("20260801_224338_claude_claude-opus-4-8_02_kda_cutlass", "20260801_224338", "claude", "claude-opus-4-8",
         "02_kda_cutlass", None),
        ("20260801_224338_codex_openai_gpt-5_high_07_w4a16_gemm", "20260801_224338", "codex", "openai_gpt-5_high",
         "07_w4a16_gemm", None),
        ("20260801_224338_zai-claude_z-ai_glm-5_01_fp8_gemm_12345_2", "20260801_224338", "zai-claude",
         "z-ai_glm-5", "01_fp8_gemm", "_12345_2"),
        ("20260801_224338_opencode_x_05_topk_bitonic", "20260801_224338", "opencode", "x", "05_topk_bitonic",
         None),
    ],
)
def test_parse_run_id(run_id: str, ts: str, harness: str, slug: str, problem: str, suffix: str | None) -> None:
    parts = parse_run_id(run_id, PROBLEMS)
    assert (parts.timestamp, parts.harness, parts.model_slug, parts.problem, parts.collision_suffix) == (
        ts, harness, slug, problem, suffix)


def test_parse_run_id_prefers_longest_problem() -> None:
    parts = parse_run_id("20260801_000000_claude_m_x_01_fp8_gemm", ["gemm", "01_fp8_gemm", "fp8_gemm"])
    assert parts.problem == "01_fp8_gemm" and parts.model_slug == "m_x"


def test_parse_run_id_unknown_problem() -> None:
    parts = parse_run_id("20260801_000000_claude_model_99_mystery", PROBLEMS)
    assert parts.problem is None and parts.harness == "claude" and parts.timestamp == "20260801_000000"


def test_parse_run_id_no_timestamp() -> None:
    parts = parse_run_id("myrun", PROBLEMS)
    assert parts.timestamp is None and parts.problem is None
