"""The Dask transport: a `PeerHandle` on a peer that lives in another process.

`RemotePeer.call` sends a request to the peer's Dask actor — worker to worker, straight from
the caller's process — and returns a `concurrent.futures.Future`, so the trainer and the step
boundary drive remote and in-process peers the same way. Queue length and sample counts are what
the peer last published to the DHT.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from distributed.actor import Actor

from labkit.backends.dask.dht import ANNOUNCE_TTL
from labkit.runtime.peer import PeerDied
from labkit.runtime.background import settle

# Enough threads for every request one process has outstanding at once (a trainer has one; the
# coordinator's step boundary has one per peer).
_CALLS = ThreadPoolExecutor(64, thread_name_prefix="labkit-call")
START_TIMEOUT = 120.0  # seconds a new actor may take to start (a worker's first torch import is slow)


class RemotePeer:
    """A peer of `stage` served by the actor `key` on the worker at `worker`; `announced` reads
    its latest DHT record.

    The handle that starts the actor passes its Dask future as `owner` instead of `actor`: the
    actor lives while the handle holds the future, until the peer stops, and requests wait for it
    to start (so many peers can start at once). Once the peer is killed or its worker is gone
    (`crashed`), every request still waiting fails at once with `PeerDied`, whatever the wire
    does: no caller waits on a dead process."""

    def __init__(self, name: str, stage: int, key: str, worker: str, actor: Actor | None = None,
                 announced: Callable[[str], dict[str, Any]] | None = None,
                 on_kill: Callable[[RemotePeer], None] | None = None, delay: float = 0.0, owner: Any = None) -> None:
        self.name, self.stage, self.key, self.worker, self._actor = name, stage, key, worker, actor
        self.delay = delay
        self._owner = owner
        self._announced = announced or (lambda name: {})
        self._on_kill = on_kill
        self._lock = threading.Lock()
        self._waiting: set[Future] = set()  # requests not answered yet
        self._dead = False

    @property
    def actor(self) -> Actor:
        """The actor, once started (raises what stopped it from starting)."""
        if self._actor is None:
            self._actor = self._owner.result(START_TIMEOUT)
        return self._actor

    def call(self, method: str, *args: Any) -> Future:
        """Queue `method(*args)` on the remote peer; the future resolves to its result."""
        out: Future = Future()
        with self._lock:
            if self._dead:
                out.set_exception(PeerDied(self.name))
                return out
            self._waiting.add(out)
        _CALLS.submit(self._send, out, method, args, time.perf_counter())
        return out

    def _send(self, out: Future, method: str, args: tuple, submitted: float) -> None:
        """Make the actor call; `out.timing` adds to the peer's queue and compute the seconds
        this process waited for a call thread ("dispatch"), the request took to reach the actor
        ("request": serialization, the wire, the worker's event loop), the actor held it
        ("served") and its reply took back ("reply"). Request and reply compare wall clocks of
        two processes: exact on one host, shifted by the clock offset across hosts."""
        try:
            dispatch, sent = time.perf_counter() - submitted, time.time()
            result, served = self.actor.call(method, *args).result()
            received = time.time()
        except Exception as exc:
            settle(out, exc=exc)
        else:
            arrived, left = served.pop("arrived"), served.pop("left")
            out.timing = {**served, "dispatch": dispatch, "request": arrived - sent, "served": left - arrived,
                          "reply": received - left}
            settle(out, result=result)
        finally:
            with self._lock:
                self._waiting.discard(out)

    def crashed(self) -> None:
        """The peer is gone: fail every waiting request now, and every later one at once."""
        with self._lock:
            self._dead = True
            waiting, self._waiting = list(self._waiting), set()
        for out in waiting:
            settle(out, exc=PeerDied(self.name))

    @property
    def queue_length(self) -> int:
        return int(self._announced(self.name).get("queue", 0))

    @property
    def samples(self) -> int:
        return int(self._announced(self.name).get("samples", 0))

    def set_delay(self, seconds: float) -> None:
        self.delay = float(seconds)
        self.call("set_delay", seconds).result()

    def kill(self) -> None:
        """Crash the peer if its process still answers (it may be gone already); never blocks."""
        self.crashed()
        if self._on_kill is not None:
            self._on_kill(self)
        _CALLS.submit(self._stop, True)

    def close(self) -> None:
        """Stop the peer after its queued requests (a clean shutdown)."""
        self._stop(False)

    def _stop(self, crash: bool) -> None:
        try:
            self.actor.stop(crash).result(30)
        except Exception:  # its worker died meanwhile: nothing left to stop
            pass
        finally:
            release = threading.Timer(ANNOUNCE_TTL, self._release)
            release.daemon = True
            release.start()

    def _release(self) -> None:
        """Let the stopped actor go, once no trainer's view of the DHT can still name it: a
        request to a stopped actor fails at once (`PeerDied`), while one to a released actor never
        returns (distributed 2026.8 drops the worker's KeyError instead of raising it)."""
        self._owner = None
