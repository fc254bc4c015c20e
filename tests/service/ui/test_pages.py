"""The HTML pages over real HTTP (ASGI) on SQLite and PostgreSQL: matrix, run page, jobs, docs, escaping."""

from __future__ import annotations

import re
from pathlib import Path

from fastapi.testclient import TestClient

from service.context import Services
from tests.archive_factory import DEFAULT_RUN_ID
from tests.service.conftest import AUTH
from tests.service.test_api import good_archive, upload

HACK_SOLUTION = '''"""Looks like a kernel; returns the reference."""
import torch


class Model(torch.nn.Module):
    def forward(self, x):
        import reference
        return reference.Model().forward(x)
'''

PAYLOAD = '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=2">'


def test_matrix_shows_the_run_and_filters(client: TestClient, tmp_path: Path) -> None:
    assert upload(client, good_archive(tmp_path)).status_code == 201
    page = client.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert "claude-opus-4-8" in page.text and "01_fp8_gemm" in page.text
    assert f"/ui/runs/{DEFAULT_RUN_ID}" in page.text
    assert page.headers["x-kaudit-page"] == "rendered"
    assert client.get("/").headers["x-kaudit-page"] == "cache"
    none = client.get("/", params={"harness": "codex"})
    assert f"/ui/runs/{DEFAULT_RUN_ID}" not in none.text
    bad = client.get("/", params={"verdict": "bogus"})
    assert bad.status_code == 422 and "reward_hack" in bad.text


def test_run_page_sections_and_cache(client: TestClient, tmp_path: Path) -> None:
    assert upload(client, good_archive(tmp_path, solution=HACK_SOLUTION)).status_code == 201
    first = client.get(f"/ui/runs/{DEFAULT_RUN_ID}")
    assert first.status_code == 200, first.text
    assert first.headers["x-kaudit-evidence"] == "rendered"
    for section in ('id="verdict"', 'id="figures"', 'id="provenance"', 'id="findings"', 'id="sources"',
                    'id="history"', 'id="regrade-form"', "<svg"):
        assert section in first.text, section
    # solution lines are rendered with anchors; a finding in solution.py links to its highlighted line
    assert 'id="src-0-L1"' in first.text
    hl = re.findall(r'<span id="(src-0-L\d+)" class="hl">', first.text)
    jumps = re.findall(r'<a class="jump" href="#(src-0-L\d+)">', first.text)
    assert hl and jumps and set(jumps) <= set(hl)
    second = client.get(f"/ui/runs/{DEFAULT_RUN_ID}")
    assert second.headers["x-kaudit-evidence"] == "cache" and second.text == first.text
    assert client.get("/ui/runs/nope").status_code == 404


def test_hostile_archive_is_escaped(client: TestClient, tmp_path: Path) -> None:
    transcript = (
        '{"type":"assistant","message":{"role":"assistant","content":[{"type":"text","text":"' + PAYLOAD.replace('"', '\\"') + '"}]}}\n'
    )
    arc = good_archive(
        tmp_path, solution=HACK_SOLUTION + "# " + PAYLOAD + "\n", transcript=transcript,
        model="evil" + PAYLOAD, extra_files={"scratch/<img src=x onerror=alert(1)>.py": PAYLOAD},
    )
    assert upload(client, arc).status_code == 201
    for url in ("/", f"/ui/runs/{DEFAULT_RUN_ID}", "/ui/leaderboard", "/ui/jobs"):
        page = client.get(url)
        assert page.status_code == 200, url
        assert "<script>window" not in page.text and "<img src=x" not in page.text, url
    run = client.get(f"/ui/runs/{DEFAULT_RUN_ID}").text
    assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in run


def test_jobs_api_and_page(client: TestClient, svc: Services, tmp_path: Path) -> None:
    assert upload(client, good_archive(tmp_path)).status_code == 201
    job = client.post(f"/runs/{DEFAULT_RUN_ID}/regrade", headers=AUTH).json()["job"]
    listed = client.get("/jobs", params={"run_id": DEFAULT_RUN_ID}).json()
    assert [j["id"] for j in listed] == [job["id"]]
    assert client.get("/jobs", params={"state": "succeeded"}).json() == []
    assert client.get("/jobs", params={"state": "bogus"}).status_code == 422
    assert [j["id"] for j in client.get(f"/runs/{DEFAULT_RUN_ID}").json()["jobs"]] == [job["id"]]
    page = client.get("/ui/jobs")
    assert page.status_code == 200 and DEFAULT_RUN_ID in page.text and "queued" in page.text
    assert client.get("/ui/jobs", params={"state": "bogus"}).status_code == 422


def test_docs_are_served_locally(client: TestClient) -> None:
    docs = client.get("/docs")
    assert docs.status_code == 200 and "/ui/docs-assets/swagger-ui-bundle.js" in docs.text
    assert "cdn" not in docs.text.lower() and "https://" not in docs.text.split("<body>")[0].replace("https://fastapi", "")
    assert client.get("/ui/docs-assets/swagger-ui-bundle.js").status_code == 200
    redoc = client.get("/redoc")
    assert redoc.status_code == 200 and "/ui/docs-assets/redoc.standalone.js" in redoc.text
    assert "fonts.googleapis" not in redoc.text
    assert client.get("/ui/docs-assets/redoc.standalone.js").status_code == 200
