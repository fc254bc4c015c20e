"""Runs: ingest, the stored run record, its verdict history, artifacts and measurements."""
