"""Database access for decks (the only module here that touches the session)."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import delete, select
from sqlalchemy.orm import Session, selectinload

from service.models import Deck, DeckFile, DeckHarnessFile


class DeckRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def all(self) -> Sequence[Deck]:
        return self.session.scalars(select(Deck).order_by(Deck.name).options(selectinload(Deck.files))).all()

    def get(self, name: str) -> Deck | None:
        return self.session.scalars(
            select(Deck).where(Deck.name == name).options(selectinload(Deck.files))
        ).one_or_none()

    def add(self, deck: Deck, files: list[DeckFile]) -> Deck:
        self.session.add(deck)
        self.session.flush()
        for f in files:
            f.deck_id = deck.id
        self.session.add_all(files)
        self.session.flush()
        return deck

    def replace_files(self, deck: Deck, files: list[DeckFile]) -> None:
        self.session.execute(delete(DeckFile).where(DeckFile.deck_id == deck.id))
        for f in files:
            f.deck_id = deck.id
        self.session.add_all(files)
        self.session.flush()

    def replace_harness(self, deck: Deck, files: list[DeckHarnessFile]) -> None:
        self.session.execute(delete(DeckHarnessFile).where(DeckHarnessFile.deck_id == deck.id))
        for f in files:
            f.deck_id = deck.id
        self.session.add_all(files)
        self.session.flush()

    def harness_files(self, deck: Deck) -> Sequence[DeckHarnessFile]:
        return self.session.scalars(
            select(DeckHarnessFile).where(DeckHarnessFile.deck_id == deck.id).order_by(DeckHarnessFile.path)
        ).all()
