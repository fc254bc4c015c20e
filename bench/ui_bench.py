"""UI benchmark: `/` and a worst-case run page, server time and rendered time in headless Chromium.

    python bench/ui_bench.py                      # 99 real runs + the big run, 50 server samples, 20 browser loads
    python bench/ui_bench.py --lines 1600 --transcript-mb 80 --requests 50 --loads 20 --json out.json

1. A throwaway store (SQLite + blob dir) seeded through the service's own ingest: the real decks and
   the 99 real archives of ../shared/kbh-dev (bench/ui_store.py), plus one "big" run rebuilt from a
   real reward-hack archive with a --lines solution (real solutions concatenated) and a
   --transcript-mb claude transcript whose one transcript finding sits at its last lines.
2. `kaudit serve` in a child process (real uvicorn, real HTTP, worker off).
3. Server: per page, --requests sequential GETs with httpx: the client's wall time and the app's
   own time (Server-Timing). "cold" is the first request after a fresh start with the run page's
   evidence cache deleted (--cold restarts), "warm" the steady state.
4. Browser: headless Debian Chromium (Playwright) loads each page --loads times; "rendered" is
   Navigation Timing's loadEventEnd from the navigation's start (request, HTML parsed, CSS and JS
   loaded and run, layout done); "DOM ready" its domContentLoadedEventEnd. A near-empty page (the
   jobs page filtered to nothing, same CSS/JS) is measured the same way as the machine's floor.
5. Page weight: the HTML, its CSS and JS; "without source text" subtracts the source files' own
   text (escaped, as sent) inside the rendered <pre class="src"> blocks and nothing else.
Targets (issue 10): p95 rendered < 200 ms for both pages; weight without source text < 300 KB.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import httpx  # noqa: E402
import ui_store  # noqa: E402

TARGET_MS = 200.0
TARGET_KB = 300.0


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


def summary(xs: list[float]) -> dict[str, float]:
    return {"n": len(xs), "p50": round(statistics.median(xs), 1), "p95": round(pct(xs, 0.95), 1),
            "max": round(max(xs), 1)}


def app_ms(r: httpx.Response) -> float:
    m = re.search(r"app;dur=([\d.]+)", r.headers.get("server-timing", ""))
    return float(m.group(1)) if m else float("nan")


def source_text_bytes(html: str) -> int:
    """Bytes of the source files' own text inside <pre class="src"> (line-number cells and tags excluded)."""
    total = 0
    for block in re.findall(r'<pre class="src">(.*?)</pre>', html, re.S):
        block = re.sub(r"<i>\d+</i>", "", block)
        text = re.sub(r"<[^>]+>", "", block)
        total += len(text.replace("\n", "").encode())
    return total


def server_samples(url: str, n: int) -> dict[str, Any]:
    client, app = [], []
    with httpx.Client(timeout=60) as c:
        for _ in range(n):
            t = time.perf_counter()
            r = c.get(url)
            client.append((time.perf_counter() - t) * 1e3)
            r.raise_for_status()
            app.append(app_ms(r))
    return {"client_ms": summary(client), "app_ms": summary(app)}


def browser_samples(browser: Any, url: str, n: int) -> dict[str, Any]:
    ctx = browser.new_context(viewport={"width": 1400, "height": 900})
    page = ctx.new_page()
    loads, fcp, dom = [], [], []
    page.goto(url)  # warm the browser's own caches (CSS/JS), as an operator's second view
    for _ in range(n):
        page.goto(url, wait_until="load")
        nav = page.evaluate("""() => { const n = performance.getEntriesByType('navigation')[0];
            const p = performance.getEntriesByName('first-contentful-paint')[0];
            return {load: n.loadEventEnd, dom: n.domContentLoadedEventEnd, fcp: p ? p.startTime : null}; }""")
        loads.append(nav["load"])
        dom.append(nav["dom"])
        if nav["fcp"] is not None:
            fcp.append(nav["fcp"])
    ctx.close()
    out = {"rendered_ms": summary(loads), "dom_ready_ms": summary(dom)}
    if fcp:
        out["first_paint_ms"] = summary(fcp)
    return out


def weight(base: str, path: str) -> dict[str, Any]:
    html = httpx.get(base + path, timeout=60).text
    css = httpx.get(base + "/ui/static/ui.css").content
    js = httpx.get(base + "/ui/static/ui.js").content
    html_b = len(html.encode())
    src = source_text_bytes(html)
    return {"html_kb": round(html_b / 1024, 1), "css_js_kb": round((len(css) + len(js)) / 1024, 1),
            "source_text_kb": round(src / 1024, 1),
            "without_source_kb": round((html_b - src + len(css) + len(js)) / 1024, 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lines", type=int, default=1600)
    ap.add_argument("--transcript-mb", type=float, default=80.0)
    ap.add_argument("--requests", type=int, default=50)
    ap.add_argument("--loads", type=int, default=20)
    ap.add_argument("--cold", type=int, default=5, help="fresh server starts for the cold numbers")
    ap.add_argument("--archives", type=int, default=None, help="ingest only the first N real archives")
    ap.add_argument("--keep", type=Path, default=None, help="use/keep this data dir (seeded once)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="kaudit-ui-bench-"))
    data = args.keep or tmp / "data"
    result: dict[str, Any] = {"lines": args.lines, "transcript_mb": args.transcript_mb}
    try:
        marker = data / "ui-bench.json"
        if marker.is_file():
            meta = json.loads(marker.read_text())
        else:
            t = time.perf_counter()
            archives = sorted(ui_store.CORPUS.glob("*.tar.gz"))[: args.archives] if args.archives else None
            svc = ui_store.seed(data, archives)
            big, run_id = ui_store.big_run_archive(tmp / "big.tar.gz", solution_lines=args.lines,
                                                   transcript_mb=args.transcript_mb)
            t_big = time.perf_counter()
            outcome = svc.ingest.ingest_file(big)
            meta = {"run_id": run_id, "big_archive_bytes": big.stat().st_size,
                    "big_ingest_s": round(time.perf_counter() - t_big, 1), "verdict": outcome.run.verdict,
                    "seed_s": round(time.perf_counter() - t, 1)}
            svc.db.dispose()
            marker.write_text(json.dumps(meta))
        result.update(meta)
        run_page = f"/ui/runs/{meta['run_id']}"
        evidence_cache = data / "cache" / "ui"
        print(f"store: {data} · big run {meta['run_id']} (verdict {meta['verdict']})", flush=True)

        cold: dict[str, list[float]] = {"/": [], run_page: []}
        for _ in range(args.cold):
            shutil.rmtree(evidence_cache, ignore_errors=True)
            with ui_store.live_server(data) as srv, httpx.Client(timeout=120) as c:
                for path in ("/", run_page):
                    r = c.get(srv.url + path)
                    r.raise_for_status()
                    cold[path].append(app_ms(r))
        result["cold_app_ms"] = {p: summary(v) for p, v in cold.items()}

        with ui_store.live_server(data) as srv:
            # "baseline": the near-empty jobs page (same CSS/JS): what any page costs on this machine now
            pages = {"baseline /ui/jobs (empty)": "/ui/jobs?state=cancelled", "matrix /": "/", "run page": run_page}
            for name, path in pages.items():
                result[name] = {"server": server_samples(srv.url + path, args.requests), "weight": weight(srv.url, path)}
            with ui_store.chromium() as browser:
                for name, path in pages.items():
                    result[name]["browser"] = browser_samples(browser, srv.url + path, args.loads)
    finally:
        if args.keep is None:
            shutil.rmtree(tmp, ignore_errors=True)

    ok = True
    print("\n| page | cold app p50/p95 | warm app p50/p95 | client p95 | rendered p50/p95 (Chromium) | "
          "DOM ready p95 | HTML KB | without source KB |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    rows: list[tuple[str, str | None]] = [("baseline /ui/jobs (empty)", None), ("matrix /", "/"), ("run page", run_page)]
    for name, maybe_path in rows:
        r = result[name]
        cold_row: dict[str, Any] = result["cold_app_ms"][maybe_path] if maybe_path else {"p50": "-", "p95": "-"}
        s, b, w = r["server"], r["browser"], r["weight"]
        fp = b["dom_ready_ms"]["p95"]
        print(f"| {name} | {cold_row['p50']} / {cold_row['p95']} | {s['app_ms']['p50']} / {s['app_ms']['p95']} | "
              f"{s['client_ms']['p95']} | {b['rendered_ms']['p50']} / {b['rendered_ms']['p95']} | {fp} | "
              f"{w['html_kb']} | {w['without_source_kb']} |")
        if maybe_path:
            ok = ok and b["rendered_ms"]["p95"] < TARGET_MS and w["without_source_kb"] < TARGET_KB
    result["loadavg"] = os.getloadavg()
    print(f"\nload average during the run: {result['loadavg'][0]:.1f} (1 min), {os.cpu_count()} CPUs")
    print(f"targets: rendered p95 < {TARGET_MS:.0f} ms, weight without source text < {TARGET_KB:.0f} KB: "
          f"{'met' if ok else 'MISSED'}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
