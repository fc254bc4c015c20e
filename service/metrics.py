"""Prometheus metrics (process-global registry: one set of collectors per process)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

REGISTRY = CollectorRegistry(auto_describe=True)

INGESTS = Counter("kaudit_ingests_total", "archives ingested", ["outcome"], registry=REGISTRY)  # created|existing
REJECTIONS = Counter("kaudit_rejections_total", "requests refused (archives, auth, regrades), by reason", ["reason"], registry=REGISTRY)
REQUEST_LATENCY = Histogram(
    "kaudit_request_seconds",
    "HTTP request latency",
    ["method", "route", "status"],
    registry=REGISTRY,
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
JOBS = Gauge("kaudit_jobs", "regrade jobs by state (read at scrape time)", ["state"], registry=REGISTRY)
