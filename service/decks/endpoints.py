"""GET /decks, GET /decks/{name}."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, status

from service.auth import require_read
from service.context import Services
from service.decks.schemas import DeckDetail, DeckFileOut, DeckSummary
from service.models import Deck
from service.runs.endpoints import services

router = APIRouter(tags=["decks"])


def _summary(deck: Deck) -> dict[str, object]:
    return {
        "name": deck.name,
        "source": deck.source,
        "content_sha256": deck.content_sha256,
        "problems": sorted({f.problem for f in deck.files}),
        "created_at": deck.created_at,
        "updated_at": deck.updated_at,
    }


@router.get("/decks", response_model=list[DeckSummary], dependencies=[Depends(require_read)])
def list_decks(svc: Annotated[Services, Depends(services)]) -> list[DeckSummary]:
    return [DeckSummary.model_validate(_summary(d)) for d in svc.decks.list()]


@router.get("/decks/{name}", response_model=DeckDetail, dependencies=[Depends(require_read)])
def get_deck(name: str, svc: Annotated[Services, Depends(services)]) -> DeckDetail:
    deck = svc.decks.get(name)
    if deck is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, detail=f"no deck {name}")
    files = [DeckFileOut.model_validate(f) for f in sorted(deck.files, key=lambda f: (f.problem, f.path))]
    return DeckDetail.model_validate({**_summary(deck), "files": files})
