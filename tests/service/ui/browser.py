"""A live kaudit server (uvicorn on 127.0.0.1) and headless Debian Chromium driven by Playwright.

The server is the embedded default: a migrated SQLite file, a local blob dir and the in-process
worker on the CPU. Chromium is /usr/bin/chromium (scripts/bootstrap.sh installs it); Playwright
never downloads a browser of its own.
"""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
    "--disable-sync", "--no-first-run",
]
TOKEN = "browser-token"


def need_chromium() -> None:
    """Skip only on a developer machine without chromium; under scripts/test.sh (KAUDIT_REQUIRE_BROWSER=1,
    which .ci/run goes through) or with CI set, a missing browser or Playwright is a failure, never a skip."""
    required = bool(os.environ.get("CI") or os.environ.get("KAUDIT_REQUIRE_BROWSER"))
    missing = []
    if not (os.path.exists(CHROMIUM) or shutil.which("chromium")):
        missing.append("chromium (/usr/bin/chromium; scripts/bootstrap.sh installs Debian's package)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing.append("the playwright package (pinned in pyproject.toml's dev extra)")
    if missing:
        if required:
            pytest.fail("browser tests required but missing: " + "; ".join(missing))
        pytest.skip("missing " + "; ".join(missing))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class LiveServer:
    url: str
    data_dir: Path
    settings: Any


def serve(tmp: Path, **overrides: Any) -> Iterator[LiveServer]:
    """Run the app with uvicorn in a thread until the generator is closed."""
    import uvicorn

    from service.app import create_app
    from service.settings import Settings
    from tests.service.conftest import migrate

    data = tmp / "data"
    values: dict[str, Any] = {
        "data_dir": data, "database_url": f"sqlite:///{data / 'kaudit.db'}", "api_tokens": TOKEN,
        "worker_mode": "inprocess", "worker_device": "cpu", "worker_poll_interval_s": 0.2,
    }
    values.update(overrides)
    data.mkdir(parents=True, exist_ok=True)
    settings = Settings(**values)
    migrate(settings.database_url)
    port = free_port()
    app = create_app(settings, start_worker=True)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.05)
    try:
        yield LiveServer(f"http://127.0.0.1:{port}", data, settings)
    finally:
        server.should_exit = True
        thread.join(timeout=15)


def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()
