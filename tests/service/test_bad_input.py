"""The bad-input suite: every bad archive (tar and zip variants, a small high-ratio bomb, an
overlapping zip) is refused over HTTP with its reason and a 4xx, and by `kaudit ingest` with exit
code 2 — and nothing is stored: runs/artifacts tables, blob dir and staging stay unchanged.
Runs on SQLite and PostgreSQL (the `database_url` fixture)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from service.app import create_app
from service.cli import app as cli_app
from tests.archive_factory import BAD_ARCHIVES, bad_archive_cases
from tests.service.conftest import TOKEN, staging_leftovers, table_counts
from tests.service.test_api import good_archive, upload

SIZE_REASONS = {"too_many_members", "file_too_large", "total_too_large", "compression_ratio"}


def expected_status(reason: str) -> int:
    if reason in SIZE_REASONS:
        return 413
    if reason == "unsupported_format":
        return 415
    return 400


@pytest.mark.parametrize(("name", "fmt"), bad_archive_cases())
def test_bad_archive_over_http(make_services: Any, tmp_path: Path, name: str, fmt: str) -> None:
    builder, _formats, reason, limits = BAD_ARCHIVES[name]
    svc = make_services(**limits)
    path = builder(tmp_path, fmt)
    # No lifespan (no bundled-deck registration): a bad archive is refused before decks matter.
    client = TestClient(create_app(svc=svc))
    counts, blobs = table_counts(svc), svc.blobs.all_keys()
    r = upload(client, path)
    assert r.status_code == expected_status(reason), r.text
    body = r.json()
    assert body["reason"] == reason, body
    assert body["detail"]
    assert table_counts(svc) == counts
    assert svc.blobs.all_keys() == blobs
    assert staging_leftovers(svc) == []


def test_bad_archive_after_a_good_one_changes_nothing(make_services: Any, tmp_path: Path) -> None:
    svc = make_services()
    with TestClient(create_app(svc=svc)) as client:
        assert upload(client, good_archive(tmp_path)).status_code == 201
        counts, blobs = table_counts(svc), svc.blobs.all_keys()
        assert counts["runs"] == 1 and counts["artifacts"] > 0
        for name in ("symlink", "traversal", "missing_result", "bomb"):
            builder, formats, reason, _limits = BAD_ARCHIVES[name]
            (tmp_path / name).mkdir()
            r = upload(client, builder(tmp_path / name, formats[-1]))
            assert r.json()["reason"] == reason
        assert table_counts(svc) == counts and svc.blobs.all_keys() == blobs


@pytest.mark.parametrize(("name", "fmt"), [("symlink", "zip"), ("traversal", "tar"), ("bomb", "tar.gz"),
                                           ("overlapping", "zip"), ("invalid_json", "tar.gz")])
def test_cli_ingest_bad_archive_exits_2(
    database_url: str, make_services: Any, tmp_path: Path, name: str, fmt: str
) -> None:
    builder, _formats, reason, limits = BAD_ARCHIVES[name]
    svc = make_services(**limits)
    path = builder(tmp_path, fmt)
    env = {
        "KAUDIT_DATABASE_URL": database_url,
        "KAUDIT_DATA_DIR": str(svc.settings.data_dir),
        "KAUDIT_API_TOKENS": TOKEN,
        **{f"KAUDIT_{k.upper()}": str(v) for k, v in limits.items()},
    }
    svc.decks.ensure_bundled()
    counts, blobs = table_counts(svc), svc.blobs.all_keys()
    result = CliRunner().invoke(cli_app, ["ingest", str(path)], env=env)
    assert result.exit_code == 2, result.output
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and f"rejected: {reason}:" in lines[0]
    assert table_counts(svc) == counts and svc.blobs.all_keys() == blobs



def test_cli_bench_refuses_a_negative_window(tmp_path: Path) -> None:
    """`kaudit bench --window-ms -5` is a usage error (exit 2, one line saying why), before any
    deck is resolved or solution imported."""
    sol = tmp_path / "solution.py"
    sol.write_text("raise SystemExit('imported')\n")
    result = CliRunner().invoke(cli_app, ["bench", str(sol), "--problem", "gemm_tiny", "--device", "cpu",
                                          "--window-ms", "-5"])
    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == "--window-ms must be >= 0, got -5.0"
