"""The pages in a real browser (headless Debian Chromium via Playwright) against a live uvicorn server.

Select with `-m browser`; they run in CI like every other test (bootstrap installs chromium).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from tests.archive_factory import DEFAULT_RUN_ID
from tests.service.test_api import good_archive
from tests.service.ui.browser import TOKEN, LiveServer, browser, need_chromium, serve
from tests.service.ui.test_pages import HACK_SOLUTION

pytestmark = pytest.mark.browser

PAYLOAD = '<script>window.__pwned=1;alert(1)</script><img src=x onerror="window.__pwned=2;alert(2)">'
HOSTILE_RUN = "20260801_224338_claude_evil_01_fp8_gemm"


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    need_chromium()
    yield from serve(tmp_path_factory.mktemp("live"))


@pytest.fixture(scope="module")
def chromium(live: LiveServer) -> Iterator[Any]:
    yield from browser()


@pytest.fixture
def page(chromium: Any) -> Iterator[Any]:
    ctx = chromium.new_context(viewport={"width": 1280, "height": 900})
    pg = ctx.new_page()
    pg.dialogs = []  # type: ignore[attr-defined]
    pg.on("dialog", lambda d: (pg.dialogs.append(d.message), d.dismiss()))  # type: ignore[attr-defined]
    yield pg
    ctx.close()


def post_archive(live: LiveServer, path: Path) -> httpx.Response:
    with open(path, "rb") as fh:
        return httpx.post(f"{live.url}/runs", files={"archive": (path.name, fh)},
                          headers={"Authorization": f"Bearer {TOKEN}"}, timeout=120)


def test_upload_matrix_run_page_and_regrade(live: LiveServer, page: Any, tmp_path: Path) -> None:
    r = post_archive(live, good_archive(tmp_path, solution=HACK_SOLUTION))
    assert r.status_code in (200, 201), r.text
    page.goto(live.url + "/")
    cell = page.locator('td.cell[data-model="claude-opus-4-8"][data-problem="01_fp8_gemm"]')
    assert cell.count() == 1
    label = cell.locator(".label").inner_text()
    assert label and label != "no verdict"
    cell.locator("a").click()
    page.wait_for_url(f"**/ui/runs/{DEFAULT_RUN_ID}")
    assert page.locator("h1.runid").inner_text() == DEFAULT_RUN_ID
    # a finding links to its flagged solution line, which is highlighted
    jump = page.locator("a.jump").first
    anchor = jump.get_attribute("href")
    assert anchor and anchor.startswith("#src-0-L")
    line = page.locator(anchor)
    assert "hl" in (line.get_attribute("class") or "")
    bg = line.evaluate("el => getComputedStyle(el).backgroundColor")
    assert bg not in ("rgba(0, 0, 0, 0)", "transparent")
    jump.click()
    assert page.evaluate("location.hash") == anchor
    # regrade with the operator token; the status line follows the job through the JSON API
    page.evaluate("""() => { window.__states = [];
        const el = document.getElementById('regrade-status');
        new MutationObserver(() => { const s = el.dataset.state;
            if (s && window.__states[window.__states.length - 1] !== s) window.__states.push(s); })
          .observe(el, {attributes: true, attributeFilter: ['data-state']}); }""")
    page.fill("#regrade-form input[name=token]", TOKEN)
    page.click("#regrade-button")
    page.wait_for_function("() => window.__states.length >= 2", timeout=60000)
    states = page.evaluate("window.__states")
    assert states[0] == "queued" and states[1] in ("running", "succeeded", "failed"), states
    assert "job " in page.locator("#regrade-status").inner_text()
    page.goto(live.url + "/ui/jobs")
    assert page.locator("#jobs tbody tr").filter(has_text=DEFAULT_RUN_ID).count() >= 1
    assert page.dialogs == []


def test_hostile_archive_renders_inert(live: LiveServer, page: Any, tmp_path: Path) -> None:
    import json

    from tests.service.test_api import BUNDLED_PROBLEM_DIR

    # the payload in every place an archive reaches a page: model name, solution (flagged lines),
    # a file name, the transcript (a finding's excerpt: the agent reads check.py), a changed deck
    # file (the template diff)
    events = [
        {"type": "system", "subtype": "init", "session_id": "s", "model": "evil"},
        {"type": "assistant", "message": {"role": "assistant", "content": [{"type": "text", "text": PAYLOAD}]}},
        {"type": "assistant", "message": {"role": "assistant", "content": [
            {"type": "tool_use", "id": "t1", "name": "Bash",
             "input": {"command": "cat problems/01_fp8_gemm/check.py # " + PAYLOAD}}]}},
    ]
    transcript = "".join(json.dumps(e) + "\n" for e in events)
    check = (BUNDLED_PROBLEM_DIR / "check.py").read_text() + "\n# " + PAYLOAD + "\n"
    arc = good_archive(
        tmp_path, run_id=HOSTILE_RUN, model="evil" + PAYLOAD, transcript=transcript,
        solution=HACK_SOLUTION + "# " + PAYLOAD + "\n",
        extra_files={'scratch/<img src=x onerror="window.__pwned=3">.py': PAYLOAD + "\n",
                     "template_files/check.py": check},
    )
    r = post_archive(live, arc)
    assert r.status_code in (200, 201), r.text
    for url in ("/", f"/ui/runs/{HOSTILE_RUN}", "/ui/leaderboard", "/ui/jobs", f"/ui/jobs?run_id={HOSTILE_RUN}",
                "/ui/runs-of?model=" + quote("evil" + PAYLOAD) + "&problem=01_fp8_gemm"):
        page.goto(live.url + url)
        page.wait_for_load_state("load")
        assert page.evaluate("typeof window.__pwned") == "undefined", url
        # only the page's own script element exists; the payload is text
        assert page.evaluate("Array.from(document.scripts).map(s => s.getAttribute('src'))") == ["/ui/static/ui.js"], url
        assert page.locator("img").count() == 0, url
        assert page.evaluate("document.querySelectorAll('[onerror]').length") == 0, url
    page.goto(live.url + f"/ui/runs/{HOSTILE_RUN}")
    body = page.locator("body").inner_text()
    assert "<script>window.__pwned=1" in body and 'scratch/<img src=x onerror="window.__pwned=3">.py' in body
    # the transcript excerpt and the deck diff carry the payload, as text
    assert "onerror=" in page.locator(".excerpt").first.inner_text()
    assert "<script>" in (page.locator("#template-diffs .d-add").last.text_content() or "")
    assert page.dialogs == []
