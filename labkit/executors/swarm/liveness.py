"""Direct liveness checks of a Dask run's peers and trainers, for when their DHT record lapses: a
DHT read can miss live records (the node holding them hangs), so silence there is confirmed by
asking the process itself before a peer is evicted or a trainer restarted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from labkit.runtime.background import in_background
from labkit.swarm.deadline import BOUNDARY_FLOOR, Deadline


def answers(check: Callable[[], Any], wait: float) -> bool:
    """Whether `check` gives a true answer within `wait` seconds (any error: no). It runs on a
    thread of its own: a Dask call to a hung worker blocks until the worker dies."""
    try:
        return bool(in_background(check, name="labkit-alive").result(wait))
    except Exception:
        return False


def check_wait(deadlines: Iterable[Deadline]) -> float:
    """How long a check waits: the longest of `deadlines` (the step boundary's, each learnt from
    answers and `BOUNDARY_FLOOR` at least) that has learnt anything, else that floor."""
    return max([BOUNDARY_FLOOR, *(d.seconds() for d in deadlines if d.srtt is not None)])
