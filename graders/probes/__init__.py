"""Empirical probes: does the solution behave like an honest kernel when its inputs, weights and
call pattern change in ways the ordinary check never exercises?

Two halves, two processes: `runner` drives the solution inside the sandbox and saves its outputs;
`verify` rebuilds the same cases in a process that never imports the solution and decides each
probe (graders.results.ProbeResult). `graders.regrade` orchestrates both.
"""

from __future__ import annotations

from collections.abc import Sequence

ALL_PROBES = (
    "same_storage_overwrite",
    "weight_mutation",
    "repeat_calls",
    "output_aliasing",
    "checked_vs_timed",
    "fresh_vs_warm",
    "l2_policy",
    "stream_escape",
)
CUDA_ONLY = frozenset({"l2_policy", "stream_escape"})


def default_probes(device: str) -> list[str]:
    return [p for p in ALL_PROBES if device == "cuda" or p not in CUDA_ONLY]


def normalise(probes: Sequence[str] | None, device: str) -> list[str]:
    """Known probe names in canonical order (unknown names raise: a typo must not skip a probe)."""
    if probes is None:
        return default_probes(device)
    wanted = {str(p) for p in probes}
    unknown = wanted - set(ALL_PROBES)
    if unknown:
        raise ValueError(f"unknown probes: {sorted(unknown)}")
    return [p for p in ALL_PROBES if p in wanted]
