"""Direct liveness checks of a Dask run's peers and trainers, on suspicion: when a trainer's
request to a peer times out, when a peer's DHT record is `SUSPECT_AFTER` seconds old (and for one
peer a second in turn), and when a trainer's heartbeat has expired. A DHT read can miss live
records (the node holding them hangs), so silence there is confirmed by asking the process itself
before a peer is evicted or a trainer restarted; and a hung peer is found within one check, not
once its record expires.

A check is answered at once by a live process (a peer's data-plane reader, a worker's event loop),
so its deadline is learnt from the checks' own round trips (RFC 6298, `labkit.swarm.deadline`),
never shorter than `LIVENESS_FLOOR` and never longer than `BOUNDARY_FLOOR`. A trainer's check is a
Dask actor call, which can take seconds on a live worker while another worker hangs (a 2 s floor
restarted live trainers then): its floor is `BOUNDARY_FLOOR`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from labkit.backends.dask.dht import ANNOUNCE_PERIOD
from labkit.runtime.background import in_background
from labkit.swarm.deadline import BOUNDARY_FLOOR, Deadline

SUSPECT_AFTER = 3 * ANNOUNCE_PERIOD  # seconds a record may age (three refreshes missed) before a check
LIVENESS_FLOOR = 2.0  # seconds: the shortest wait for a check's answer (a loaded machine's scheduling pauses)
FLOORS = {"running": BOUNDARY_FLOOR}  # a trainer's check, a Dask actor call: slow while another worker hangs


def answers(check: Callable[[], Any], wait: float) -> bool:
    """Whether `check` gives a true answer within `wait` seconds (any error: no). It runs on a
    thread of its own: a Dask call to a hung worker blocks until the worker dies."""
    try:
        return bool(in_background(check, name="labkit-alive").result(wait))
    except Exception:
        return False


class Probes:
    """Checks running in the background, at most one per name (the watch and a trainer's timeout
    may suspect the same peer at once, and neither waits for the answer), each kind of check
    ("alive", "running") with its deadline learnt from its answers, no shorter than its floor
    (in `floors`, else `LIVENESS_FLOOR`)."""

    def __init__(self, floors: Mapping[str, float] = FLOORS) -> None:
        self._floors = dict(floors)
        self._deadlines: dict[str, Deadline] = {}
        self._running: set[str] = set()
        self._lock = threading.Lock()

    def deadline(self, kind: str) -> Deadline:
        """The learnt deadline of checks of `kind`."""
        with self._lock:
            if kind not in self._deadlines:
                self._deadlines[kind] = Deadline(ceiling=BOUNDARY_FLOOR, floor=self._floors.get(kind, LIVENESS_FLOOR))
            return self._deadlines[kind]

    def start(self, name: str, kind: str, check: Callable[[float], Any], silent: Callable[[float], None],
              answered: Callable[[], None] = lambda: None) -> None:
        """Check `name` unless a check of it is under way: `check(wait)` must give a true answer
        within `wait` seconds (the deadline of `kind`), else `silent(wait)`; `answered()` if it does."""
        with self._lock:
            if name in self._running:
                return
            self._running.add(name)
        threading.Thread(target=self._probe, args=(name, kind, check, silent, answered), name=f"labkit-probe-{name}",
                         daemon=True).start()

    def _probe(self, name: str, kind: str, check: Callable[[float], Any], silent: Callable[[float], None],
               answered: Callable[[], None]) -> None:
        try:
            deadline = self.deadline(kind)
            with self._lock:
                wait = deadline.seconds()
            began = time.monotonic()
            if answers(lambda: check(wait), wait):
                with self._lock:
                    deadline.answered(time.monotonic() - began)
                answered()
            else:
                with self._lock:
                    deadline.expired()
                silent(wait)
        finally:
            with self._lock:
                self._running.discard(name)
