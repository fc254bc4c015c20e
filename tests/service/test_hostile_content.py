"""Archives that pass ingest but carry hostile content in files other than result.json.

NUL bytes and lone surrogates in logs, transcripts and sources, an HTML-laden model name: each is
stored (or refused) without a 500, and every read of the stored run answers, on SQLite and
PostgreSQL (which refuses NUL in text and `\\u0000` in jsonb).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.app import create_app
from tests.archive_factory import DEFAULT_RUN_ID, default_transcript
from tests.service.conftest import AUTH, table_counts
from tests.service.test_api import good_archive, upload

NUL_SOLUTION = "import torch\n# a NUL here: \x00 and more\nclass Model(torch.nn.Module):\n    pass\n"


def _transcript_with(text: str) -> str:
    lines = [json.dumps(o) for o in default_transcript()]
    # A raw JSON escape: json.dumps would write the surrogate and NUL as escapes too.
    lines.insert(1, '{"type": "assistant", "message": {"role": "assistant", "content": [{"type": "text", '
                    f'"text": "{text}"}}]}}, "model": "m\\u0000x\\ud800"}}')
    return "\n".join(lines) + "\n"


CASES: dict[str, dict[str, Any]] = {
    "nul_in_check_log": {"check_log": "PROPERTY_SEED: 1\x00\nframework: triton\x00\nPASS\n"},
    "nul_in_benchmark_log": {"benchmark_log": "shape=0 variant=solution\x00 ms=0.2\npeak_fraction: 0.2\x00\n"},
    "nul_in_lock_log": {"gpu_lock_log": "2026-08-01T22:50:00+00:00 wait pid=4242\x00 cmd=check\n"},
    "nul_in_solution": {"solution": NUL_SOLUTION},
    "escapes_in_transcript": {"transcript": _transcript_with("NUL \\u0000 lone \\ud800 low \\udc00")},
    "binary_transcript": {"transcript": b"\x00\xff\xfe" * 1000},
    "newline_model_name": {"result": {"model": "opus\n# Verdict: clean\n"}},
    "html_model_name": {"model": "<img src=x onerror=alert(1)>", "result": {"model": "<img src=x onerror=alert(1)>"}},
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_hostile_content_never_500(make_services: Any, tmp_path: Path, case: str) -> None:
    svc = make_services()
    with TestClient(create_app(svc=svc)) as client:
        before = table_counts(svc), svc.blobs.all_keys()
        r = upload(client, good_archive(tmp_path, **CASES[case]))
        assert r.status_code in (201, 400), r.text
        if r.status_code == 400:
            assert r.json()["reason"]
            assert (table_counts(svc), svc.blobs.all_keys()) == before
            return
        run_id = r.json()["run_id"]
        assert run_id == DEFAULT_RUN_ID
        for path in ("", "/verdicts", "/findings", "/report.md", "/files/check.log", "/files/solution.py"):
            got = client.get(f"/runs/{run_id}{path}", headers=AUTH)
            assert got.status_code in (200, 404), (path, got.status_code, got.text[:300])
        listing = client.get("/runs", headers=AUTH)
        assert listing.status_code == 200 and listing.json()["items"]
        if case == "html_model_name":
            report = client.get(f"/runs/{run_id}/report.md", headers=AUTH).text
            assert "<img" not in report
            assert "&lt;img src=x onerror=alert(1)&gt;" in report
        if case == "newline_model_name":
            report = client.get(f"/runs/{run_id}/report.md", headers=AUTH).text
            assert not any(line.startswith("# Verdict") for line in report.splitlines())
