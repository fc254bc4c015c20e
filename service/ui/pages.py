"""HTML pages: `/` (verdict matrix), `/ui/leaderboard`, `/ui/runs/{run_id}`, `/ui/jobs`, local API docs.

Thin like the REST endpoints: read through the services/repositories, build view objects
(service.ui.views), render a Jinja2 template with autoescape ON. A run is untrusted input, so
every page also carries a Content-Security-Policy that allows only this server's own script and
stylesheet (no inline script can run even if something slipped through escaping).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, HTTPException, Query, Request, status
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles
from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
from markupsafe import Markup

from audit_rules.verdicts import Verdict
from service.auth import require_read
from service.context import Services
from service.runs.endpoints import services
from service.runs.repository import RunFilters
from service.ui import views
from service.ui.repository import UiRepository

HERE = Path(__file__).resolve().parent
router = APIRouter(include_in_schema=False)

env = Environment(
    loader=FileSystemLoader(str(HERE / "templates")),
    autoescape=select_autoescape(default=True, default_for_string=True),
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
env.globals["verdict_style"] = views.verdict_style
env.globals["metric_text"] = views.metric_text
env.globals["progress_text"] = views.progress_text

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"}
JOB_STATES = ("queued", "running", "succeeded", "failed", "cancelled")


def render(name: str, status_code: int = 200, **ctx: Any) -> HTMLResponse:
    from audit_rules import kaudit_version

    html = env.get_template(name).render(kaudit_version=kaudit_version(), **ctx)
    return HTMLResponse(html, status_code=status_code, headers=HEADERS)


class PageCache:
    """Small in-process LRU of rendered pages keyed on the data version (max verdict id) + query."""

    def __init__(self, size: int = 64) -> None:
        self.size = size
        self.items: OrderedDict[tuple[Any, ...], str] = OrderedDict()
        self.lock = threading.Lock()

    def get(self, key: tuple[Any, ...]) -> str | None:
        with self.lock:
            html = self.items.get(key)
            if html is not None:
                self.items.move_to_end(key)
            return html

    def put(self, key: tuple[Any, ...], html: str) -> None:
        with self.lock:
            self.items[key] = html
            self.items.move_to_end(key)
            while len(self.items) > self.size:
                self.items.popitem(last=False)


def _cache(request: Request) -> PageCache:
    cache = getattr(request.app.state, "ui_cache", None)
    if cache is None:
        cache = request.app.state.ui_cache = PageCache()
    return cache





def _clean(value: str | None) -> str | None:
    return value.strip() or None if value is not None else None


def _check_enum(name: str, value: str | None, allowed: tuple[str, ...]) -> None:
    if value is not None and value not in allowed:
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT, detail=f"unknown {name} {value!r}; allowed: {', '.join(allowed)}"
        )


VERDICTS = tuple(v.value for v in Verdict)


@router.get("/", response_class=HTMLResponse, dependencies=[Depends(require_read)])
def matrix_page(
    request: Request,
    svc: Annotated[Services, Depends(services)],
    harness: str | None = None,
    hardware: str | None = None,
    deck: str | None = None,
    verdict: str | None = None,
    publish: Annotated[str | None, Query(description="'1': publish-grade cells only")] = None,
) -> HTMLResponse:
    harness, hardware, deck, verdict = _clean(harness), _clean(hardware), _clean(deck), _clean(verdict)
    _check_enum("verdict", verdict, VERDICTS)
    publish_only = publish == "1"
    with svc.db.read_session() as session:
        repo = UiRepository(session)
        version = repo.data_version()
        key = ("matrix", version, harness, hardware, deck, verdict, publish_only)
        cached = _cache(request).get(key)
        if cached is not None:
            return HTMLResponse(cached, headers={**HEADERS, "X-Kaudit-Page": "cache"})
        filters = RunFilters(harness=harness, hardware=hardware, deck=deck, verdict=verdict)
        rows = repo.matrix_rows(filters)
        facets = repo.facets()
    sections = views.build_matrix(rows, publish_only=publish_only)
    response = render(
        "matrix.html", sections=sections, facets=facets, verdicts=VERDICTS, total=len(rows),
        f={"harness": harness, "hardware": hardware, "deck": deck, "verdict": verdict, "publish": publish_only},
    )
    _cache(request).put(key, bytes(response.body).decode())
    response.headers["X-Kaudit-Page"] = "rendered"
    return response


@router.get("/ui/runs-of", response_class=HTMLResponse, dependencies=[Depends(require_read)])
def runs_of_page(
    svc: Annotated[Services, Depends(services)],
    model: str, problem: str, hardware: str | None = None, deck: str | None = None,
) -> HTMLResponse:
    """The runs behind one matrix cell, newest first."""
    hw = None if hardware in (None, views.NO_HARDWARE) else hardware
    dk = None if deck in (None, views.NO_DECK) else deck
    with svc.db.read_session() as session:
        rows = UiRepository(session).matrix_rows(
            RunFilters(model=model, problem=problem, hardware_in=(hw,) if hw else None, deck=dk)
        )
    # The cell's section is exact: "hardware not recorded" / "no registered deck" mean NULL there.
    if hardware is not None:
        rows = [r for r in rows if (r["hardware"] or views.NO_HARDWARE) == hardware]
    if deck is not None:
        rows = [r for r in rows if (r["deck"] or views.NO_DECK) == deck]
    rows.sort(key=lambda r: (r["started_key"], r["id"]), reverse=True)
    return render("runs_of.html", rows=rows, f={"model": model, "problem": problem, "hardware": hardware, "deck": deck})


@router.get("/ui/leaderboard", response_class=HTMLResponse, dependencies=[Depends(require_read)])
def leaderboard_page(
    svc: Annotated[Services, Depends(services)],
    hardware: str | None = None,
    deck: str | None = None,
    problem: str | None = None,
) -> HTMLResponse:
    hardware, deck, problem = _clean(hardware), _clean(deck), _clean(problem)
    with svc.db.read_session() as session:
        repo = UiRepository(session)
        rows = repo.matrix_rows(RunFilters(hardware=hardware, deck=deck, problem=problem))
        facets = repo.facets()
    ranked, excluded = views.leaderboard(rows)
    return render("leaderboard.html", ranked=ranked, excluded=excluded, facets=facets,
                  f={"hardware": hardware, "deck": deck, "problem": problem})


@router.get("/ui/jobs", response_class=HTMLResponse, dependencies=[Depends(require_read)])
def jobs_page(
    svc: Annotated[Services, Depends(services)], run_id: str | None = None, state: str | None = None
) -> HTMLResponse:
    run_id, state = _clean(run_id), _clean(state)
    _check_enum("state", state, JOB_STATES)
    jobs = svc.jobs.listing(run_id=run_id, state=state, limit=200)
    return render("jobs.html", jobs=jobs, states=JOB_STATES, f={"run_id": run_id, "state": state})


@router.get("/ui/runs/{run_id}", response_class=HTMLResponse, dependencies=[Depends(require_read)])
def run_page(run_id: str, svc: Annotated[Services, Depends(services)]) -> HTMLResponse:
    from audit_rules import kaudit_version

    data = svc.runs.detail(run_id)
    if data is None:
        return render("missing.html", status_code=404, what=f"no run {run_id}")
    history = svc.runs.verdicts(run_id) or []
    run, verdict = data.run, data.verdict
    findings = list(verdict.findings) if verdict is not None else []

    def evidence() -> Markup:
        paths = views.source_paths(verdict, data.artifacts)
        sources = views.build_sources(paths, data.artifacts, svc.blobs, findings)
        fviews = views.build_findings(findings, sources, data.artifacts, svc.blobs)
        diffs = views.build_diffs(run, data.artifacts, svc.blobs)
        return Markup(env.get_template("_evidence.html").render(
            run=run, sources=sources, findings=fviews, diffs=diffs))

    # Rows are append-only: the evidence is a pure function of (verdict row, archive, kaudit version).
    key = f"{verdict.id if verdict else 0}-{run.archive_sha256[:16]}-{kaudit_version()}"
    fragment, source = views.cached_fragment(svc.settings.report_cache_dir.parent / "ui", key, evidence)
    shape_lists = [views.shape_rows(m.shapes or []) for m in data.measurements]

    def smoke(m: Any) -> bool:
        pv = m.provenance or {}
        return bool(pv.get("smoke")) or pv.get("device") == "cpu"

    def device_of(m: Any) -> str | None:
        """The device whose ceiling a measurement is held against: none for a CPU smoke regrade."""
        return None if smoke(m) else m.gpu_name or (run.hardware if m.source == "in_run" else None)

    for m, rows in zip(data.measurements, shape_lists, strict=True):
        views.add_bound_fractions(rows, device_of(m))
    measurements: list[dict[str, Any]] = [
        {"m": m, "shapes": rows} for m, rows in zip(data.measurements, shape_lists, strict=True)
    ]
    # The roofline plots the newest GPU measurement with per-shape numbers (a CPU smoke regrade only
    # when nothing else has shapes) against the ceiling of the device that measured it.
    order = sorted((i for i in range(len(shape_lists)) if shape_lists[i]),
                   key=lambda i: (not smoke(data.measurements[i]), i))
    best_i = order[-1] if order else None
    best: list[dict[str, Any]] = shape_lists[best_i] if best_i is not None else []
    device = device_of(data.measurements[best_i]) if best_i is not None else run.hardware
    rf = views.roofline(device, best)
    if best_i is not None and smoke(data.measurements[best_i]):
        rf.note = "a CPU smoke regrade (interpreter, reduced shapes): no GPU ceiling applies"
    lock = (run.logs or {}).get("gpu_lock") or {}
    response = render(
        "run.html", run=run, verdict=verdict, history=history, jobs=data.jobs, measurements=measurements,
        regrades=[x for x in measurements if x["m"].source != "in_run"],
        probes=data.probe_results, roofline=rf, lock=lock, evidence=Markup(fragment),
        transcripts=run.transcripts or [], template=run.template or {}, n_findings=len(findings),
        artifacts=data.artifacts[:500],
    )
    response.headers["X-Kaudit-Evidence"] = source
    return response


def mount(app: FastAPI) -> None:
    """Wire the pages, their static files, and Swagger UI / ReDoc from locally shipped assets."""
    import fastapi_offline

    app.include_router(router)
    for name in env.list_templates():  # compile every template once at start, not on a first request
        env.get_template(name)
    app.mount("/ui/static", StaticFiles(directory=str(HERE / "static")), name="ui-static")
    docs_assets = Path(fastapi_offline.__file__).resolve().parent / "static"
    app.mount("/ui/docs-assets", StaticFiles(directory=str(docs_assets)), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    def swagger() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url="/openapi.json", title="kaudit - Swagger UI",
            swagger_js_url="/ui/docs-assets/swagger-ui-bundle.js", swagger_css_url="/ui/docs-assets/swagger-ui.css",
            swagger_favicon_url="/ui/docs-assets/favicon.png",
        )

    @app.get("/redoc", include_in_schema=False)
    def redoc() -> HTMLResponse:
        return get_redoc_html(
            openapi_url="/openapi.json", title="kaudit - ReDoc", redoc_js_url="/ui/docs-assets/redoc.standalone.js",
            redoc_favicon_url="/ui/docs-assets/favicon.png", with_google_fonts=False,
        )


__all__ = ["mount", "router"]
