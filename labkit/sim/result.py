"""What a simulation returns: per-bin work and optimum, stage busy time, events and counters."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from labkit.events import Event


@dataclass
class SimResult:
    """Outcome of one simulated run; `summary.py` turns it into the numbers reports show.

    work[b]: microbatches finished in bin b; optimal[b]: microbatches the same live peers could
    finish perfectly balanced across stages (see `summary.percent_of_optimal`); stage_busy[b, s]
    and peer_seconds[b, s]: peer-seconds of compute, and of serving, at stage s.
    """

    mode: str  # "events" or "fluid"
    bin_seconds: float
    samples_per_microbatch: int
    work: np.ndarray
    optimal: np.ndarray
    stage_busy: np.ndarray
    peer_seconds: np.ndarray
    events: list[Event] = field(default_factory=list)
    counters: dict[str, int] = field(default_factory=dict)  # entered / finished / lost / in_flight
    wall_seconds: float = 0.0
