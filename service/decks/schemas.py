"""Typed API shapes for decks."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict


class DeckFileOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    problem: str
    path: str
    sha256: str
    md5: str
    size: int


class DeckSummary(BaseModel):
    name: str
    source: str
    content_sha256: str
    problems: list[str]
    created_at: datetime
    updated_at: datetime


class DeckDetail(DeckSummary):
    files: list[DeckFileOut]
