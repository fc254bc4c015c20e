"""The contract failures schemathesis found, each pinned as a plain test (SQLite and PostgreSQL)."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tests.service.conftest import AUTH


def test_options_and_unknown_methods_name_every_allowed_method(client: TestClient) -> None:
    r = client.options("/runs")
    assert r.status_code == 405 and r.headers["allow"] == "GET, POST"
    assert r.json()["reason"] == "method_not_allowed"
    assert client.delete("/runs/x", headers=AUTH).headers["allow"] == "GET"
    assert client.delete("/runs/x").status_code == 401  # unsafe methods: the token first
    assert client.put("/runs/x/regrade", headers=AUTH).headers["allow"] == "POST"


def test_numbers_are_not_datetimes_and_blank_enum_filters_are_no_filter(client: TestClient) -> None:
    for value in ("0.5", "1700000000", "-3", "1e9"):
        r = client.get("/runs", params={"started_to": value})
        assert r.status_code == 422 and r.json()["reason"] == "invalid_request", value
        assert isinstance(r.json()["detail"], str) and r.json()["errors"][0]["loc"] == ["query", "started_to"]
    assert client.get("/runs", params={"started_to": "2026-08-01T00:00:00Z"}).status_code == 200
    # `?verdict=` is how a client writes "no value" for a closed filter; an empty date is not a date.
    assert client.get("/runs", params={"verdict": "", "contamination": ""}).status_code == 200
    assert client.get("/runs", params={"started_from": ""}).status_code == 422


def test_every_error_body_has_reason_and_string_detail(client: TestClient) -> None:
    answers = [
        client.get("/runs", params={"cursor": "not-a-cursor"}),  # 400
        client.get("/runs/nope"),  # 404
        client.get("/jobs/0"),  # 422 (ids start at 1)
        client.get("/jobs/99999999999"),  # 422: past int32, not a 500 on PostgreSQL
        client.get("/runs", params={"limit": 0}),  # 422
        client.post("/runs/nope/regrade", headers={**AUTH, "content-type": "application/json"}, content=b"{bad"),
        client.post("/runs/nope/regrade", headers={**AUTH, "content-type": "application/json"}, content=b"{\x9c~D"),
        client.post("/runs/nope/regrade", headers=AUTH, json={"probes": [""]}),  # 422: not a probe
        client.post("/runs"),  # 401
    ]
    for r in answers:
        body = r.json()
        assert 400 <= r.status_code < 500 and isinstance(body["reason"], str) and isinstance(body["detail"], str), (
            r.status_code, body)
    assert [r.status_code for r in answers] == [400, 404, 422, 422, 422, 422, 400, 422, 401]
    assert answers[0].json()["reason"] == "bad_cursor"


def test_integer_ids_past_int32_are_a_documented_422_on_every_door(client: TestClient) -> None:
    # PostgreSQL's integer ids are int32: an unbounded path param reached the database and was a 500.
    for path in ("/jobs/99999999999", "/reaudits/99999999999", "/ui/reaudits/99999999999",
                 "/reaudits/0", "/ui/reaudits/0"):
        assert client.get(path).status_code == 422, path
    assert client.get("/reaudits/2147483647").status_code == 404  # the largest id is a lookup
    schema = client.get("/openapi.json").json()
    for path, name in (("/jobs/{job_id}", "job_id"), ("/reaudits/{reaudit_id}", "reaudit_id"),
                       ("/audit-log", "before_id")):
        op = schema["paths"][path]["get"]
        (param,) = [p for p in op["parameters"] if p["name"] == name]
        bounds = param["schema"] if "minimum" in param["schema"] else param["schema"]["anyOf"][0]
        assert bounds["minimum"] == 1 and bounds["maximum"] == 2**31 - 1, (path, param)
        assert "422" in op["responses"], path
    assert "404" in schema["paths"]["/reaudits/{reaudit_id}"]["get"]["responses"]
