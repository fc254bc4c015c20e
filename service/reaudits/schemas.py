"""Typed API shapes for re-audits."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class ReauditRequest(BaseModel):
    """The filters of `kaudit reaudit`, as a JSON body (unknown keys are refused, not ignored)."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    model: str | None = None
    harness: str | None = None
    problem: str | None = None
    deck: str | None = None
    hardware: str | None = Field(default=None, description="GPU name; a short name (H100) matches its SKUs")
    verdict: str | None = Field(default=None, description="current verdict")
    reward_hack: bool | None = None
    contamination: str | None = None
    publish_grade: bool | None = None
    started_from: datetime | None = Field(default=None, description="started_at >= (ISO-8601)")
    started_to: datetime | None = Field(default=None, description="started_at < (ISO-8601)")
    run_ids: list[str] | None = Field(default=None, max_length=100_000, description="only these runs")
    since_version: str | None = Field(
        default=None, max_length=64,
        description="only runs whose current verdict was recorded under this rule set (version+hash, hash, "
                    "version, or 'none' for rows older than the column)")
    jobs: int = Field(default=2, ge=1, le=16, description="worker processes")
    rules: list[str] | None = Field(default=None, max_length=500,
                                    description="rule ids to run instead of every rule (a what-if)")
    dry_run: bool = Field(default=False, description="compute and serve the diff, append no verdict")


class ReauditOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    state: str = Field(description="running | succeeded | failed")
    params: dict[str, Any]
    ruleset: str = Field(description="the rule-set version that judged (<kaudit version>+<hash>)")
    total: int = Field(description="runs selected")
    done: int
    changed: int
    errors: int
    summary: dict[str, Any]
    error: str | None
    created_at: datetime
    finished_at: datetime | None
    links: dict[str, str] = Field(default_factory=dict)


class ReauditDetail(ReauditOut):
    diff: list[dict[str, Any]] = Field(description="per moved run: from, to, the rules responsible, "
                                                   "decisive and other findings added and removed")
