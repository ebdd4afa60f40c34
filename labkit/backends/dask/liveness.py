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

Under every executor the fleet also watches each worker's heartbeat to the scheduler
(`WorkerBeats`): a worker silent `SUSPECT_AFTER` longer than the typical worker is asked directly
(a `Client.run`, through the scheduler), and one that does not answer is hung, lost like a
worker that left.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable, Collection, Mapping
from typing import Any

from labkit.backends.dask.dht import ANNOUNCE_PERIOD
from labkit.runtime.background import in_background
from labkit.swarm.deadline import BOUNDARY_FLOOR, Deadline

SUSPECT_AFTER = 3 * ANNOUNCE_PERIOD  # seconds a record may age (three refreshes missed) before a check
LIVENESS_FLOOR = 2.0  # seconds: the shortest wait for a check's answer (a loaded machine's scheduling pauses)
# a trainer's check (a Dask actor call) and a worker's (through the scheduler): slow while another worker hangs
FLOORS = {"running": BOUNDARY_FLOOR, "worker": BOUNDARY_FLOOR}


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


def worker_answer() -> bool:
    """A worker's answer to a direct check (`Client.run` runs it in the worker's event loop, which
    answers while the worker computes; a hung process never does)."""
    return True


class WorkerBeats:
    """How long each worker's heartbeat has not reached the scheduler, by this process's clock: the
    scheduler's `last_seen` is on its own clock (another machine's, perhaps), so it is only ever
    compared with itself, and its changes are timed here."""

    def __init__(self) -> None:
        self._seen: dict[str, tuple[Any, float]] = {}  # worker -> (its last_seen, when that changed here)

    def update(self, workers: Mapping[str, Mapping[str, Any]], now: float) -> dict[str, float]:
        """Seconds since each of `workers` (the scheduler's table: address -> info) last beat,
        as of `now`; a worker that left is forgotten."""
        for worker, info in workers.items():
            seen = info.get("last_seen")
            if worker not in self._seen or self._seen[worker][0] != seen:
                self._seen[worker] = (seen, now)
        for worker in self._seen.keys() - workers.keys():
            del self._seen[worker]
        return {w: now - changed for w, (_, changed) in self._seen.items()}

    def answered(self, worker: str, now: float) -> None:
        """`worker` answered a direct check at `now`: it is silent from then on only."""
        if worker in self._seen:
            self._seen[worker] = (self._seen[worker][0], now)


def hung_suspects(silence: Mapping[str, float], among: Collection[str]) -> list[str]:
    """The workers of `among` whose heartbeat has been silent `SUSPECT_AFTER` seconds longer than
    the typical (median) worker's: a busy scheduler, or a pause of this process, delays every
    heartbeat alike and suspects no one."""
    if not silence:
        return []
    typical = statistics.median(silence.values())
    return [w for w in among if silence.get(w, 0.0) > typical + SUSPECT_AFTER]
