"""gpu_lock.log: parsed with the shared log grammar (graders.logformat), re-exported here."""

from __future__ import annotations

from graders.logformat import EVENTS, GpuLockEvent, GpuLockLog, parse_gpu_lock_log

__all__ = ["EVENTS", "GpuLockEvent", "GpuLockLog", "parse_gpu_lock_log"]
