"""The peer actor: one replica of one stage on a Dask worker, announced in the DHT.

Requests come over the peer's own data plane (labkit/runtime/sockets.py: a TCP server on the
worker's host, its address announced as "data"), a joining neighbour's state download too; they
queue on the peer's own thread. Actor methods are `async def`: an actor runs sync methods on one
thread per worker, where a long call would block every other. Each peer announces itself in the
DHT once its worker has registered it, and then every `ANNOUNCE_PERIOD` seconds until it stops.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import torch
from distributed import get_worker
from distributed.actor import Actor
from distributed.comm import get_address_host

from labkit.backends.dask.dht import ANNOUNCE_PERIOD, StageDirectory, node_for
from labkit.backends.dask.placement import has_gpu
from labkit.backends.dask.remote import START_TIMEOUT
from labkit.backends.dask.workers import prepare_worker
from labkit.config import RunConfig
from labkit.model.assembly import stage_module
from labkit.runtime.background import settle
from labkit.runtime.peer import PeerDied, StagePeer
from labkit.runtime.request_queue import timing
from labkit.runtime.ring import IMMEDIATE, deliver
from labkit.runtime.shards import stage_state
from labkit.runtime.sockets import SocketClient, SocketServer

DATA_REQUESTS = ("forward", "backward", "loss")  # what the throughput EMA measures
EMA_GAMMA = 0.9


def gpu_worker() -> bool:
    """Whether this worker was started with a GPU resource (`dask worker ... --resources GPU=1`)."""
    return has_gpu({"resources": get_worker().state.total_resources})


def _to_host(obj: Any) -> Any:
    """`obj` with every tensor in host memory (what a GPU peer sends back)."""
    if isinstance(obj, torch.Tensor):
        return obj.cpu()
    if isinstance(obj, dict):
        return {k: _to_host(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_host(v) for v in obj)
    return obj


def announce_loop(worker: Any, actor: object, stopped: threading.Event, announce: Callable[[], None],
                  abandon: Callable[[], None]) -> None:
    """Announce once `worker` has registered `actor`, then every `ANNOUNCE_PERIOD` until `stopped`.
    (A request that reaches the worker before the registration fails with an error that
    distributed 2026.8 drops: its caller would wait forever.) If the worker lets the actor go
    before it is stopped, its run's driver is gone (a dead client's actors are released) and
    nothing else will stop it: `abandon()` then ends its threads (orphans announced, and polled
    the DHT, forever). The worker's DHT node goes by itself (`dht.node_for`)."""
    registered = time.monotonic() + START_TIMEOUT
    while not _holds(worker, actor):
        if stopped.wait(0.01) or time.monotonic() > registered:
            return
    while True:
        try:
            announce()
        except Exception:  # a DHT hiccup: the record lives until its expiration; try again
            pass
        if stopped.wait(ANNOUNCE_PERIOD):
            return
        if not _holds(worker, actor):
            stopped.set()
            abandon()
            return


def watch_for_release(actor: object, name: str, abandon: Callable[[], None]) -> threading.Event:
    """Watch, on a thread `name`, that this worker still holds `actor`: if it lets the actor go
    before the returned event is set (its run released it, or the run's driver is gone),
    `abandon()` ends the actor's threads (`announce_loop`, announcing nothing)."""
    stopped = threading.Event()
    threading.Thread(target=announce_loop, args=(get_worker(), actor, stopped, lambda: None, abandon), name=name,
                     daemon=True).start()
    return stopped


def _holds(worker: Any, actor: object) -> bool:
    """Whether `worker` holds `actor` among its actors."""
    return any(a is actor for a in list(worker.state.actors.values()))


ALIVE = "alive"  # the data plane's liveness check: answered at once, True while the peer serves


class PeerActor:
    """One peer of one stage on this worker: a `StagePeer` (on `cuda` on a GPU worker) that
    announces its address, queue length, samples and throughput EMA in the DHT.

    It starts from `state`, or downloads the state from the live neighbour whose data plane is at
    `source` ("host:port"), worker to worker; it announces itself at once, or
    (`live=False`, a peer joining mid-run) once `go_live` is called."""

    def __init__(self, run_id: str, key: str, name: str, stage: int, cfg: RunConfig, state: dict[str, Any] | None,
                 delay: float, dht_peers: list[str], source: str | None = None, live: bool = True,
                 emulates: str | None = None) -> None:
        prepare_worker(cfg)
        if source is not None:  # over its data plane: a source that dies meanwhile fails the download at once
            state = Neighbour(source).call("state").result(START_TIMEOUT)  # a hung one: give the worker's thread back
        state = stage_state(state)
        device = "cuda" if gpu_worker() and torch.cuda.is_available() else "cpu"
        self.peer = StagePeer(name, stage, stage_module(cfg, stage, state["params"]), cfg, device, emulates)
        self.peer.load_state(state)
        self.peer.set_delay(delay)
        self.peer.dial = Neighbours().dial
        self._key, self._worker = key, get_worker()
        self._server = SocketServer(self._serve, get_address_host(self._worker.address), f"peer-{name}")
        self._record = {"address": self._worker.address, "data": self._server.address, "device": device}
        self._ema = 0.0  # seconds per data request, smoothed
        self._directory = StageDirectory(node_for(run_id, dht_peers), run_id, cfg.stages)
        self._stopped, self._live = threading.Event(), threading.Event()
        if live:
            self._live.set()
        # watched from the start: a joiner its run let go before admitting it stops too
        threading.Thread(target=announce_loop, args=(self._worker, self, self._stopped, self._announce_if_live,
                                                     self._crash), name=f"announce-{name}", daemon=True).start()

    async def go_live(self) -> None:
        """Start announcing (a peer started with `live=False` joins mid-run: the coordinator
        admits it, then trainers may find it): at once, then with the others."""
        self._live.set()
        threading.Thread(target=self._announce, name=f"announce-{self.peer.name}-now", daemon=True).start()

    def _announce_if_live(self) -> None:
        if self._live.is_set():
            self._announce()

    def _announce(self) -> None:
        p = self.peer
        self._directory.announce(p.name, p.stage, self._key, {**self._record, "queue": p.queue_length,
                                                              "samples": p.samples, "ema_seconds": self._ema})

    @property
    def serving(self) -> bool:
        """Whether the peer still serves (a stopped actor is kept a while for stale callers)."""
        return not self._stopped.is_set()

    async def data_address(self) -> str:
        """Where the peer's data plane listens ("host:port" on this worker's host)."""
        return self._server.address

    def _serve(self, method: str, args: tuple) -> Future:
        """Queue one request on the peer's thread (behind the others); the future holds its result
        (in host memory) and `timing`'s queue and compute. Ring traffic is served at once."""
        if method == ALIVE:  # answered by the connection's reader, not queued: a hung process says nothing
            alive: Future = Future()
            alive.set_result(self.serving)
            return alive
        if method in IMMEDIATE:
            deliver(self.peer.mailbox, method, args, same_process=False)
            done: Future = Future()
            done.set_result(None)
            return done
        start = time.perf_counter()
        served, out = self.peer.call(method, *args), Future()

        def answer(done: Future) -> None:
            if method in DATA_REQUESTS:
                seconds = time.perf_counter() - start
                self._ema = seconds if not self._ema else EMA_GAMMA * self._ema + (1 - EMA_GAMMA) * seconds
            out.timing = timing(done)
            if done.exception() is not None:
                settle(out, exc=done.exception())
            else:
                settle(out, result=done.result() if self.peer.device.type == "cpu" else _to_host(done.result()))

        served.add_done_callback(answer)
        return out

    def _crash(self) -> None:
        self.peer.kill()
        self._server.close()

    async def stop(self, crash: bool) -> None:
        """Leave the swarm: crash (drop everything at once, as a crash would; the coordinator
        withdraws the record) or close after the queued requests and withdraw the record."""
        self._stopped.set()
        if crash:
            self._crash()
            return
        await asyncio.get_running_loop().run_in_executor(None, self.peer.close)
        self._server.close()
        self._directory.withdraw(self.peer.stage, self._key)


class Neighbours:
    """A peer's connections to its stage's other peers' data planes (for the ring), by address,
    opened at first use; a broken one is opened afresh next time (a new peer may listen there)."""

    def __init__(self) -> None:
        self._links: dict[str, Neighbour] = {}
        self._lock = threading.Lock()

    def dial(self, address: str) -> Neighbour:
        with self._lock:
            if address not in self._links or self._links[address].broken:
                self._links[address] = Neighbour(address)
            return self._links[address]


class Neighbour:
    """One neighbour's data plane: its requests carry host tensors (a GPU peer's chunks too)."""

    def __init__(self, address: str) -> None:
        self.broken = False
        self._client = SocketClient(address, self._died)
        self._address = address

    def _died(self) -> Exception:
        self.broken = True
        return PeerDied(f"the peer at {self._address}")

    def call(self, method: str, *args: Any) -> Future:
        return self._client.call(method, *(_to_host(a) for a in args))


def peer_actor(address: str, key: str) -> Actor:
    """A handle on the peer actor `key` on the worker at `address` (what the DHT announces)."""
    return Actor(PeerActor, address, key)
