"""The Dask transport: a `PeerHandle` on a peer that lives in another process.

`RemotePeer.call` sends a request to the peer's Dask actor — worker to worker, straight from
the caller's process — and returns a `concurrent.futures.Future`, so the trainer and the step
boundary drive remote and in-process peers the same way. Queue length and sample counts are what
the peer last published to the DHT.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from distributed.actor import Actor

from labkit.backends.dask.dht import ANNOUNCE_TTL

# Enough threads for every request one process has outstanding at once (a trainer has one; the
# coordinator's step boundary has one per peer).
_CALLS = ThreadPoolExecutor(64, thread_name_prefix="labkit-call")
START_TIMEOUT = 120.0  # seconds a new actor may take to start (a worker's first torch import is slow)


class RemotePeer:
    """A peer of `stage` served by the actor `key` (`actor`); `announced` reads its latest DHT record.

    The handle that starts the actor passes its Dask future as `owner` instead of `actor`: the
    actor lives while the handle holds the future, until the peer stops, and requests wait for it
    to start (so many peers can start at once)."""

    def __init__(self, name: str, stage: int, key: str, actor: Actor | None = None,
                 announced: Callable[[str], dict[str, Any]] | None = None, on_kill: Callable[[RemotePeer], None] | None = None,
                 delay: float = 0.0, owner: Any = None) -> None:
        self.name, self.stage, self.key, self._actor = name, stage, key, actor
        self.delay = delay
        self._owner = owner
        self._announced = announced or (lambda name: {})
        self._on_kill = on_kill

    @property
    def actor(self) -> Actor:
        """The actor, once started (raises what stopped it from starting)."""
        if self._actor is None:
            self._actor = self._owner.result(START_TIMEOUT)
        return self._actor

    @property
    def worker(self) -> str:
        """Address of the Dask worker that hosts the peer."""
        return self.actor._address

    def call(self, method: str, *args: Any) -> Future:
        """Queue `method(*args)` on the remote peer; the future resolves to its result."""
        return _CALLS.submit(lambda: self.actor.call(method, *args).result())

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
