"""The Dask transport: a `PeerHandle` on a peer that lives in another process.

`RemotePeer.call` sends a request over the peer's data plane — a TCP connection from the caller's
process straight to the peer's worker (labkit/runtime/sockets.py) — and returns a
`concurrent.futures.Future`, so the trainer and the step boundary drive remote and in-process
peers the same way. Starting, stopping and crashing the peer go through its Dask actor. Queue
length and sample counts are what the peer last published to the DHT.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from distributed.actor import Actor

from labkit.backends.dask.dht import ANNOUNCE_TTL
from labkit.runtime.peer import PeerDied
from labkit.runtime.sockets import SocketClient

_STOPS = ThreadPoolExecutor(8, thread_name_prefix="labkit-stop")  # kills, which must never block the caller
START_TIMEOUT = 120.0  # seconds a new actor may take to start (a worker's first torch import is slow)


def started_actor(owner: Any, name: str, worker: str) -> Actor:
    """The actor that `owner` (its Dask future) starts, once started (raises what stopped it); one
    not started within `START_TIMEOUT` raises TimeoutError naming it and its worker."""
    try:
        return owner.result(START_TIMEOUT)
    except TimeoutError:
        raise TimeoutError(f"{name}: its actor did not start on the Dask worker {worker} within {START_TIMEOUT:.0f} s "
                           f"(is that worker hung or gone?)") from None


class RemotePeer:
    """A peer of `stage` served by the actor `key` on the worker at `worker`; `announced` reads
    its latest DHT record.

    The handle that starts the actor passes its Dask future as `owner` instead of `actor`: the
    actor lives while the handle holds the future, until the peer stops, and a first request waits
    for it to start. Once the peer is killed or its worker is gone
    (`crashed`), every request still waiting fails at once with `PeerDied`, whatever the wire
    does: no caller waits on a dead process."""

    def __init__(self, name: str, stage: int, key: str, worker: str, actor: Actor | None = None,
                 announced: Callable[[str], dict[str, Any]] | None = None,
                 on_kill: Callable[[RemotePeer], None] | None = None, delay: float = 0.0, owner: Any = None,
                 data: str | None = None) -> None:
        self.name, self.stage, self.key, self.worker, self._actor = name, stage, key, worker, actor
        self.delay = delay
        self._owner = owner
        self._announced = announced or (lambda name: {})
        self._on_kill = on_kill
        self._data = data  # the data plane's "host:port", if the DHT record gave it
        self._client: SocketClient | None = None
        self._lock = threading.Lock()
        self._dead = False
        self.let_go = False  # the run killed or closed it: its silence says nothing of its worker

    @property
    def actor(self) -> Actor:
        """The actor, once started (raises what stopped it from starting)."""
        if self._actor is None:
            self._actor = started_actor(self._owner, self.name, self.worker)
        return self._actor

    @property
    def contact(self) -> str:
        """The peer's data plane ("host:port"), where its stage's other peers reach it (asked of
        its actor the first time, unless the DHT record gave it); PeerDied if it cannot be asked."""
        if self._data is None:
            try:
                self._data = self.actor.data_address().result(START_TIMEOUT)
            except Exception as exc:  # its worker is gone
                raise PeerDied(f"{self.name}: {exc}") from exc
        return self._data

    def call(self, method: str, *args: Any) -> Future:
        """Queue `method(*args)` on the remote peer; the future resolves to its result."""
        try:
            plane = self._plane()
        except Exception as exc:  # the actor never started, or its worker is gone
            out: Future = Future()
            out.set_exception(exc if isinstance(exc, PeerDied) else PeerDied(f"{self.name}: {exc}"))
            return out
        return plane.call(method, *args)

    def _plane(self) -> SocketClient:
        """The connection to the peer's data plane (its address asked of the actor the first
        time, unless the DHT record gave it); PeerDied once the peer is known dead."""
        with self._lock:
            if self._dead:
                raise PeerDied(self.name)
            if self._client is not None:
                return self._client
        address = self.contact  # waits for the start
        with self._lock:
            if self._dead:
                raise PeerDied(self.name)
            if self._client is None:
                self._client = SocketClient(address, lambda: PeerDied(self.name))
            return self._client

    def crashed(self) -> None:
        """The peer is gone: fail every waiting request now, and every later one at once."""
        with self._lock:
            self._dead = True
            client = self._client
        if client is not None:
            client.close()

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
        self.let_go = True
        self.crashed()
        if self._on_kill is not None:
            self._on_kill(self)
        _STOPS.submit(self._stop, True)

    def close(self) -> None:
        """Stop the peer after its queued requests (a clean shutdown)."""
        self.let_go = True
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
