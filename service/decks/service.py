"""Register decks (bundled and imported) and hand them to ingest as DeckSnapshots."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from sqlalchemy.exc import IntegrityError

from graders import decks as deck_store
from ingest.decks import bundled_decks, scan_deck_dir
from ingest.model import DeckSnapshot, FileHash
from service.blobs import BlobStore
from service.db import Database
from service.decks.repository import DeckRepository
from service.models import Deck, DeckFile, DeckHarnessFile, utcnow

log = logging.getLogger(__name__)


class DeckConflict(Exception):
    """A deck of that name is registered with different files (import with replace to update)."""


def content_sha256(snapshot: DeckSnapshot, harness: dict[str, str] | None = None,
                   harness_name: str | None = None) -> str:
    """The deck's identity (graders.decks.content_hash): its files, then its harness, if any."""
    problems = {p: {path: fh.sha256 for path, fh in files.items()} for p, files in snapshot.problems.items()}
    return deck_store.content_hash(problems, harness, harness_name)


def snapshot_of(deck: Deck) -> DeckSnapshot:
    problems: dict[str, dict[str, FileHash]] = {}
    for f in deck.files:
        problems.setdefault(f.problem, {})[f.path] = FileHash(sha256=f.sha256, md5=f.md5, size=f.size)
    root = Path(deck.root_path) if deck.root_path and Path(deck.root_path).is_dir() else None
    return DeckSnapshot(name=deck.name, problems=problems, root=root)


class DeckService:
    def __init__(self, db: Database, blobs: BlobStore, data_dir: Path | None = None) -> None:
        self.db = db
        self.blobs = blobs
        self.data_dir = data_dir  # where imported decks are materialized (None: keep the source path)
        self._bundled_done = False
        self._lock = threading.Lock()

    def _rows(self, snapshot: DeckSnapshot) -> list[DeckFile]:
        rows: list[DeckFile] = []
        for problem, files in sorted(snapshot.problems.items()):
            for path, fh in sorted(files.items()):
                blob_key = None
                if snapshot.root is not None:
                    src = snapshot.root / problem / path
                    if src.is_file():
                        blob_key, _ = self.blobs.put_file(src, fh.sha256)
                rows.append(
                    DeckFile(problem=problem, path=path, sha256=fh.sha256, md5=fh.md5, size=fh.size, blob_key=blob_key)
                )
        return rows

    def register(self, snapshot: DeckSnapshot, *, source: str, replace: bool = False,
                 harness: dict[str, str] | None = None, harness_name: str | None = None) -> tuple[Deck, bool]:
        """Register (idempotently) a deck snapshot (and its harness files). Returns (deck, changed)."""
        digest = content_sha256(snapshot, harness, harness_name)
        harness_rows = [DeckHarnessFile(path=p, sha256=sha, size=0) for p, sha in sorted((harness or {}).items())]
        with self.db.session() as session, session.begin():
            repo = DeckRepository(session)
            existing = repo.get(snapshot.name)
            if existing is not None:
                if existing.content_sha256 == digest:
                    return existing, False
                if not replace:
                    raise DeckConflict(
                        f"deck {snapshot.name!r} is already registered with different files "
                        f"({existing.content_sha256[:12]} vs {digest[:12]}); use --replace to update it"
                    )
                log.warning("deck %s: files changed, replacing the registered copy", snapshot.name)
                repo.replace_files(existing, self._rows(snapshot))
                repo.replace_harness(existing, harness_rows)
                existing.harness_name = harness_name
                existing.content_sha256 = digest
                existing.source = source
                existing.root_path = str(snapshot.root) if snapshot.root else existing.root_path
                existing.updated_at = utcnow()
                return existing, True
            deck = Deck(
                name=snapshot.name,
                source=source,
                root_path=str(snapshot.root) if snapshot.root else None,
                content_sha256=digest,
                harness_name=harness_name,
            )
            repo.add(deck, self._rows(snapshot))
            repo.replace_harness(deck, harness_rows)
            return deck, True

    def import_dir(self, path: Path, name: str, *, replace: bool = False,
                   harness: Path | None = None) -> tuple[Deck, bool]:
        """Hash the deck (and harness), copy both into the content-addressed store under
        data_dir/decks (graders.decks), and register the copy: graders, the worker and the
        audit read the verified copy, never the folder it came from."""
        snapshot = scan_deck_dir(path, name)
        if not snapshot.problems:
            raise FileNotFoundError(f"{path} holds no problem folder with deck files")
        harness_files = deck_store.scan_harness(harness) if harness is not None else {}
        harness_name = Path(harness).resolve().name if harness is not None else None
        problems = {p: {f: fh.sha256 for f, fh in files.items()} for p, files in snapshot.problems.items()}
        if self.data_dir is not None:
            loc = deck_store.materialize(name, Path(path).resolve(), problems,
                                         harness_dir=Path(harness).resolve() if harness is not None else None,
                                         harness=harness_files, data_dir=self.data_dir)
            snapshot = DeckSnapshot(name=name, problems=snapshot.problems, root=loc.root)
        return self.register(snapshot, source="imported", replace=replace, harness=harness_files,
                             harness_name=harness_name)

    def ensure_bundled(self) -> None:
        """Register the bundled deck(s) under kernels/ once per process (idempotent, race-safe)."""
        if self._bundled_done:
            return
        with self._lock:
            if self._bundled_done:
                return
            for snap in bundled_decks():
                try:
                    self.register(snap, source="bundled", replace=True)
                except IntegrityError:  # another process registered it at the same moment
                    pass
            self._bundled_done = True

    def snapshots(self) -> list[DeckSnapshot]:
        """Every registered deck plus the bundled ones (always, even if the DB is unreachable for writes)."""
        self.ensure_bundled()
        with self.db.session() as session:
            snaps = [snapshot_of(d) for d in DeckRepository(session).all()]
        names = {s.name for s in snaps}
        snaps.extend(s for s in bundled_decks() if s.name not in names)
        return snaps

    def list(self) -> list[Deck]:
        self.ensure_bundled()
        with self.db.session() as session:
            return list(DeckRepository(session).all())

    def get(self, name: str) -> Deck | None:
        self.ensure_bundled()
        with self.db.session() as session:
            return DeckRepository(session).get(name)
