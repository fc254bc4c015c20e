"""Regrade jobs: the row, its states and enqueueing (service.worker executes them)."""
