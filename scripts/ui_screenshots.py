"""Screenshots of the pages, from real runs, for docs/ui/.

    python scripts/ui_screenshots.py [--out docs/ui] [--archives N]

A throwaway store is seeded through the service's own ingest + audit (bench/ui_store.py: the real
decks of ../shared/kbh-upstream and the real archives of ../shared/kbh-dev), then `kaudit serve`
runs on it with the in-process worker, and headless Debian Chromium (Playwright) takes:

- matrix.png       `/`: every real run, per deck (the archives record no hardware)
- run.png          `/ui/runs/<id>` of a real reward-hack run down to its sources: verdict, regrade
                   button pressed with the operator token and the job's live state in the status
                   line, figures, provenance chain, findings
- run-source.png   the same page after following the first finding's link: the flagged solution
                   line highlighted in the rendered source
- jobs.png         `/ui/jobs` after regrades were asked for (on a host without a GPU they end
                   honestly as infra failures: "no CUDA device")
- leaderboard.png  `/ui/leaderboard`: no publish-grade run (no isolated regrade here), the
                   hacked runs as labelled, excluded rows
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import httpx  # noqa: E402
import ui_store  # noqa: E402


def pick_run(svc: object) -> str:
    """The real reward-hack run whose current findings point at the most solution lines."""
    from sqlalchemy import select

    from service.models import FindingRow, Run

    with svc.db.read_session() as s:  # type: ignore[attr-defined]
        rows = s.execute(
            select(Run.run_id, FindingRow.file, FindingRow.line_start)
            .join(FindingRow, FindingRow.verdict_id == Run.current_verdict_id)
            .where(Run.verdict == "reward_hack")
        ).all()
    score: dict[str, int] = {}
    for run_id, file, line in rows:
        score.setdefault(run_id, 0)
        if file == "solution.py" and line is not None:
            score[run_id] += 1
    if not score:
        raise SystemExit("no reward_hack run among the seeded archives")
    return max(sorted(score), key=lambda r: score[r])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "ui")
    ap.add_argument("--archives", type=int, default=None, help="only the first N real archives")
    ap.add_argument("--width", type=int, default=1400)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="kaudit-ui-shots-"))
    try:
        data = tmp / "data"
        archives = sorted(ui_store.CORPUS.glob("*.tar.gz"))[: args.archives] if args.archives else None
        svc = ui_store.seed(data, archives)
        run_id = pick_run(svc)
        others = [r for r in ("20260804_025959_or-fable_qwen_qwen3.8-max_07_w4a16_gemm",) if r != run_id]
        svc.db.dispose()
        auth = {"Authorization": f"Bearer {ui_store.TOKEN}"}
        # The in-process worker with the default device (cuda): on this GPU-less host a regrade ends
        # as the infra failure it is; on a GPU host it would grade.
        with ui_store.live_server(data, KAUDIT_WORKER_MODE="inprocess", KAUDIT_WORKER_POLL_INTERVAL_S="0.3") as srv, \
                ui_store.chromium() as browser:
            for rid in others:
                httpx.post(f"{srv.url}/runs/{rid}/regrade", json={}, headers=auth, timeout=30).raise_for_status()
            page = browser.new_page(viewport={"width": args.width, "height": 900})

            page.goto(srv.url + "/")
            page.screenshot(path=str(args.out / "matrix.png"), full_page=True)

            page.goto(f"{srv.url}/ui/runs/{run_id}")
            page.fill("#regrade-form input[name=token]", ui_store.TOKEN)
            page.click("#regrade-button")
            page.wait_for_function("() => ['running', 'succeeded', 'failed', 'queued'].includes("
                                   "document.getElementById('regrade-status').dataset.state)", timeout=60000)
            time.sleep(3)  # let the poller show a later state
            page.evaluate("window.scrollTo(0, 0)")
            top = page.evaluate("document.getElementById('sources').getBoundingClientRect().top + window.scrollY")
            page.screenshot(path=str(args.out / "run.png"), full_page=True,
                            clip={"x": 0, "y": 0, "width": args.width, "height": min(int(top) + 40, 3200)})
            # the first finding's link: the page jumps to the flagged solution line, highlighted
            page.locator("a.jump").first.click()
            page.wait_for_timeout(300)
            page.screenshot(path=str(args.out / "run-source.png"))

            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                jobs = httpx.get(srv.url + "/jobs", timeout=30).json()
                if jobs and all(j["attempts"] >= 1 for j in jobs):
                    break
                time.sleep(1)
            page.goto(srv.url + "/ui/jobs")
            page.screenshot(path=str(args.out / "jobs.png"), full_page=True)

            page.goto(srv.url + "/ui/leaderboard")
            page.screenshot(path=str(args.out / "leaderboard.png"), full_page=True)
        print(f"run page: {run_id}")
        for name in ("matrix.png", "run.png", "run-source.png", "jobs.png", "leaderboard.png"):
            p = args.out / name
            print(f"{p} {p.stat().st_size // 1024} KB")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
