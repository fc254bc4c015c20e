"""The HTML pages over real HTTP (ASGI) on SQLite and PostgreSQL: matrix, run page, jobs, docs, escaping."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
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
    # the solution is rendered whole (gutter of line numbers beside it); the flagged lines are anchored
    # elements and a finding in solution.py links to its highlighted line
    assert '<pre class="gutter" aria-hidden="true">1\n2\n3\n' in first.text
    assert "class Model(torch.nn.Module):" in first.text
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


def _evidence_archive(tmp_path: Path) -> Path:
    from tests.archive_factory import default_transcript
    from tests.service.test_api import BUNDLED_PROBLEM_DIR

    transcript = default_transcript()
    transcript[1]["message"]["content"][1]["input"]["command"] = "cat problems/01_fp8_gemm/check.py"
    check = (BUNDLED_PROBLEM_DIR / "check.py").read_text() + "\nTOLERANCE_OVERRIDE = 1.0  # loosened\n"
    return good_archive(
        tmp_path, solution=HACK_SOLUTION, transcript=transcript,
        result={"gpu_name": "NVIDIA RTX PRO 6000 Blackwell Server Edition"},
        extra_files={"template_files/check.py": check},
    )


def test_run_page_evidence_diff_excerpt_roofline_provenance(client: TestClient, tmp_path: Path) -> None:
    assert upload(client, _evidence_archive(tmp_path)).status_code == 201
    page = client.get(f"/ui/runs/{DEFAULT_RUN_ID}").text
    # template integrity: the changed deck file as a unified diff, the added line marked
    assert 'id="template-diffs"' in page and "template_files/check.py" in page
    assert '<span class="d-add">+TOLERANCE_OVERRIDE = 1.0  # loosened</span>' in page
    # the transcript finding (KA209 read check.py, transcript line 2) carries its excerpt, the line highlighted
    excerpt = re.search(r'<div class="excerpt">.*?</div>\s*</pre>|<div class="excerpt">.*?</pre>', page, re.S)
    assert excerpt is not None
    hl = re.findall(r'<span class="xl hl"><span class="no">(\d+)</span>([^<]*)</span>', excerpt.group(0))
    assert [n for n, _ in hl] == ["2"] and "cat problems/01_fp8_gemm/check.py" in hl[0][1]
    assert re.findall(r'<span class="no">(\d+)</span>', excerpt.group(0)) == ["1", "2", "3", "4"]
    # provenance: the in-run step with gpu_lock.log's wait and hold; no regrade yet; no probe yet
    assert re.search(r"2 acquisition\(s\), wait 12\.0 s,\s+hold 120\.0 s", page)
    assert "isolated regrade</b>:" in page and "none yet" in page
    # roofline under the RTX PRO 6000 ceiling: the roof path, one point per shape, compute/memory bars
    assert "Roofline of RTX PRO 6000" in page and re.search(r'<path d="M[\d.]+,[\d.]+ L', page)
    assert page.count("<circle ") == 2 and page.count('<meter class="bound"') == 4
    # verdict history lists the current verdict row
    assert re.search(r'<tr class="current"><td>\d+</td>', page)


def test_matrix_and_leaderboard_over_http(client: TestClient, tmp_path: Path) -> None:
    hack_id, clean_id = DEFAULT_RUN_ID, "20260802_100000_claude_claude-sonnet-5_01_fp8_gemm"
    assert upload(client, good_archive(tmp_path / "a", solution=HACK_SOLUTION)).status_code == 201
    assert upload(client, good_archive(tmp_path / "b", run_id=clean_id, model="claude-sonnet-5")).status_code == 201
    matrix = client.get("/").text
    # nothing has an isolated regrade: every cell is in the not-publish-grade grid, none in the publish one
    assert 'class="grid grid-other"' in matrix and 'class="grid grid-publish"' not in matrix
    assert "publish-grade only" in matrix
    only = client.get("/", params={"publish": "1"}).text
    assert 'class="cell' not in only and "No runs match" in only
    board = client.get("/ui/leaderboard").text
    ranked = board.split('id="ranked"')[1].split("</table>")[0]
    excluded = board.split('id="excluded"')[1].split("</table>")[0]
    assert "No publish-grade run yet" in ranked and hack_id not in ranked and clean_id not in ranked
    assert hack_id in excluded and "reward hack</span>" in excluded and clean_id not in excluded


def test_build_matrix_keeps_publish_grade_apart() -> None:
    from datetime import UTC, datetime

    from service.ui.views import OTHER_TITLE, PUBLISH_TITLE, build_matrix, leaderboard

    def row(i: int, model: str, problem: str, verdict: str, publish: bool, **kw: object) -> dict[str, object]:
        base: dict[str, object] = {
            "id": i, "run_id": f"r{i}", "model": model, "problem": problem, "hardware": "NVIDIA H200",
            "deck": "hard", "harness": "claude", "verdict": verdict, "publish_grade": publish,
            "reward_hack": verdict == "reward_hack", "contamination": "clean",
            "started_key": datetime(2026, 8, 1, 0, i, tzinfo=UTC), "peak_fraction": 0.3,
            "metric": {"name": "peak_fraction", "value": 0.1 * i},
        }
        return {**base, **kw}

    rows = [row(1, "m1", "p1", "clean", True), row(2, "m1", "p2", "clean", False),
            row(3, "m2", "p1", "reward_hack", False), row(4, "m2", "p2", "clean", True),
            row(5, "m3", "p1", "clean", False, contamination="contaminated"), row(6, "m3", "p2", "rubric_leak", False)]
    [section] = build_matrix(rows)
    publish, other = section.grids
    assert (publish.title, other.title) == (PUBLISH_TITLE, OTHER_TITLE)
    assert set(publish.cells) == {("m1", "p1"), ("m2", "p2")}
    assert set(other.cells) == {("m1", "p2"), ("m2", "p1"), ("m3", "p1"), ("m3", "p2")}
    [only] = build_matrix(rows, publish_only=True)
    assert [g.title for g in only.grids] == [PUBLISH_TITLE]
    # a later non-publish run of a cell moves the cell out of the publish grid (the cell is its latest run)
    [later] = build_matrix([*rows, row(7, "m1", "p1", "clean", False)])
    assert ("m1", "p1") not in later.grids[0].cells
    ranked, excluded = leaderboard(rows)
    assert [r["run_id"] for r in ranked] == ["r4", "r1"]
    assert {r["run_id"]: r["label"] for r in excluded} == {"r3": "reward hack", "r5": "contaminated", "r6": "rubric leak"}


@pytest.mark.slow
@pytest.mark.backends("sqlite")  # a CPU regrade end to end: once, on one backend
def test_run_page_after_a_real_cpu_regrade(make_services: Any, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A real (CPU smoke) regrade through the worker: the chain gains its isolated-regrade step with
    the lock wait and hold, the figures its per-shape table, the history a second verdict row."""
    from fastapi.testclient import TestClient as _Client

    from service.app import create_app
    from service.worker.engine import JobProcessor

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    svc: Services = make_services(worker_device="cpu", worker_max_attempts=1)
    with _Client(create_app(svc=svc)) as client:
        arc = good_archive(tmp_path, result={"gpu_name": "NVIDIA RTX PRO 6000 Blackwell Server Edition"})
        assert upload(client, arc).status_code == 201
        job_id = client.post(f"/runs/{DEFAULT_RUN_ID}/regrade", headers=AUTH).json()["job"]["id"]
        assert JobProcessor(svc.settings, svc.db, gpu=0).run_once(svc.settings.worker_gpu_pool) == job_id
        job = client.get(f"/jobs/{job_id}").json()
        assert job["state"] == "succeeded", job
        detail = client.get(f"/runs/{DEFAULT_RUN_ID}").json()
        regrade = [m for m in detail["measurements"] if m["source"] == f"regrade:{job_id}"]
        assert len(regrade) == 1
        prov = regrade[0]["provenance"]
        page = client.get(f"/ui/runs/{DEFAULT_RUN_ID}").text
    step = page.split('<li class="step-regrade">')[1].split('<li class="step-probes">')[0]
    assert f"regrade:{job_id}" in step and regrade[0]["status"] in step
    # the CPU smoke path takes no GPU lock (its provenance says None): the page shows "-", not a number
    def fmt(v: float | None) -> str:
        return "-" if v is None else f"{v:.2f}"

    assert f"lock wait {fmt(prov['lock_wait_s'])} s, hold {fmt(prov['lock_hold_s'])} s" in step
    assert "smoke (never ranks)" in step and "none yet" not in step
    assert "device cpu" in step and f"grader {prov['grader_version']}" in step and f"sandbox {prov['sandbox']}" in step
    assert page.count('<tr class="current">') == 1 and len(re.findall(r"<tr(?: class=\"current\")?><td>\d+</td><td>20", page)) == 2
    assert f"<td>{job_id}</td><td><span class=\"chip st-succeeded\">succeeded</span>" in page
    # the roofline stays on the in-run GPU figures under the RTX PRO 6000 ceiling; the CPU smoke
    # figures get a table but no bars against a GPU's peaks
    assert regrade[0]["shapes"] and "Roofline of RTX PRO 6000" in page
    assert page.count('<meter class="bound"') == 4
