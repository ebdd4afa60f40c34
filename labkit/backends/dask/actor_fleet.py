"""The one fleet of a Dask run: the cluster, and every actor any executor places on its workers.

`ActorFleet` connects (an embedded `LocalCluster`, or a scheduler), keeps the table of which
worker hosts which actor, places each actor by the rules of `placement.py` (its own worker, one
that joined mid-run first, then GPU workers, spread over machines within a group; trainers on CPU
workers first), joins every worker to the run's hivemind DHT when an executor asks, and asks the
scheduler every `WORKER_CHECK` seconds which workers are still there and when each last beat. An
actor whose worker left, or hangs (silent, and no answer to a direct check: liveness.py), is lost:
every call waiting on its `ActorHandle` fails at once with the executor's own error, and the
executor is told which actor it was. A hung worker hosts nothing new until it leaves. The
executors' hosts (SWARM's peers and trainers, ATOM's replicas, the task pool's clients, the
pipeline's peers) are its users; none connects, places or watches on its own.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Callable, Collection
from concurrent.futures import TimeoutError as FutureTimeout
from functools import partial
from typing import Any

from labkit.backends.dask.actor_handle import ActorHandle, wire_broke
from labkit.backends.dask.connect import connect
from labkit.backends.dask.dht import DhtNode, host_toward, join, release
from labkit.backends.dask.liveness import Probes, WorkerBeats, hung_suspects, worker_answer
from labkit.backends.dask.placement import peer_worker, trainer_workers
from labkit.backends.dask.workers import cluster_workers
from labkit.config import RunConfig
from labkit.runtime.background import in_background

WORKER_CHECK = 0.5  # seconds between asking the scheduler which workers are still there
RELEASE_TIMEOUT = 10.0  # seconds the end of a run waits for the workers to release its DHT nodes (a hung one never does)
JOIN_TIMEOUT = 60.0  # seconds a worker has to join the run's DHT (a node's start may take 30 s), or it is hung
PROBE_TIMEOUT = 30.0  # seconds a worker has to answer a pid request before a run places its actors, or it is hung


class NoFreeWorker(RuntimeError):
    """The cluster has no worker left for a new actor."""


class ActorFleet:
    """A Dask cluster (the one at `scheduler`, or an embedded `LocalCluster` on `host`) and the
    actors a run placed on it; `lost` is the error a call on an actor whose worker left raises."""

    def __init__(self, cfg: RunConfig, scheduler: str | None, host: str, lost: type[Exception]) -> None:
        self.lost = lost
        self.client, self.cluster = connect(scheduler, cfg, host)
        self.dashboard: str | None = self.client.dashboard_link
        self.run_id = uuid.uuid4().hex[:12]
        self.node: DhtNode | None = None  # this process's DHT node, once `join_dht` started it
        self.dht_peers: list[str] = []  # the addresses a DHT node of the run joins through
        self._placed: dict[str, list[ActorHandle]] = {}  # worker address -> every actor it hosts (a trainer may share)
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._on_gone: Callable[[ActorHandle, str], None] | None = None
        self._watching = False
        self._beats = WorkerBeats()
        self._probes = Probes()  # direct checks of workers whose heartbeats stopped
        self._hung: set[str] = set()  # workers found hung: they host nothing new until they leave
        self._asked: set[str] = set()  # workers running a call of `ask_each` (a DHT join, a probe): silent, not hung
        try:
            self.here = host_toward(self.client.scheduler.address)  # this process's address toward the workers
            self._initial = set(self.workers())
        except BaseException:
            self.close()
            raise

    def workers(self) -> dict[str, dict[str, Any]]:
        """The scheduler's worker table now (address -> info), less the workers found hung."""
        return {w: info for w, info in cluster_workers(self.client).items() if w not in self._hung}

    # -- the DHT -------------------------------------------------------------------------------
    def join_dht(self, workers: list[str] | None = None, warm: tuple[str, ...] = ()) -> dict[str, str]:
        """Join `workers` (None: every worker) to the run's DHT (`dht.join`, which first imports the
        modules `warm`); the first call starts this process's node, here, on the interface that
        reaches the workers. As `ask_each`, within `JOIN_TIMEOUT` (a launch once waited forever on a
        hung worker); returns the hung workers, each with why."""
        if self.node is None:
            self.node = DhtNode([], self.here)
            self.dht_peers = self.node.maddrs()
        return self.ask_each(partial(join, self.run_id, self.dht_peers, warm), workers, JOIN_TIMEOUT,
                             "join the run's DHT")

    def probe(self) -> dict[str, str]:
        """Ask every worker for its pid, as `ask_each` within `PROBE_TIMEOUT`, before a run places
        its actors: a hung worker is left out at once (an actor's start on it waited 120 s, then
        failed the launch); returns the hung workers, each with why."""
        return self.ask_each(os.getpid, None, PROBE_TIMEOUT, "answer")

    def ask_each(self, task: Callable[..., Any], workers: list[str] | None, timeout: float, what: str) -> dict[str, str]:
        """Run `task` on each of `workers` (None: every worker) by a call of its own, at once. A worker
        that does not answer within `timeout` is hung: it hosts nothing of the run, and is returned
        with why. A worker that left meanwhile is skipped; an error a worker raises is raised here,
        once every call has ended or timed out."""
        asked = set(self.workers() if workers is None else workers)
        with self._lock:  # a call runs in the worker's event loop, which sends no heartbeat meanwhile
            self._asked |= asked
        try:
            calls = {w: in_background(partial(self.client.run, task, workers=[w])) for w in asked}
            deadline, hung, errors = time.monotonic() + timeout, {}, []
            for worker, call in calls.items():
                try:
                    call.result(max(0.0, deadline - time.monotonic()))
                except FutureTimeout:
                    hung[worker] = f"it did not {what} within {timeout:.0f} s (hung)"
                except Exception as exc:
                    if not wire_broke(exc):  # not a worker that left the cluster meanwhile
                        errors.append(exc)
        finally:
            with self._lock:
                self._asked -= asked
        for worker, why in hung.items():
            self.hangs(worker, why)
        if errors:
            raise errors[0]
        return hung

    # -- placement -----------------------------------------------------------------------------
    def key(self, cls: type, name: str) -> str:
        """A fresh Dask key for actor `name` of class `cls` (each start is a new actor)."""
        return f"labkit-{cls.__name__.removesuffix('Actor').lower()}-{self.run_id}-{name}-{uuid.uuid4().hex[:8]}"

    def start(self, name: str, cls: type, *args: Any, key: str | None = None, worker: str | None = None,
              spread: Collection[str] = (), wait: bool = True) -> ActorHandle:
        """Start `cls(*args, key)` as actor `name` (with `key` given: `cls(*args)`, the caller put
        the key where its class takes it) on `worker`, else on the worker that hosted `name` (a
        restart), else on a free one: one that joined mid-run first, then GPU workers, then on the
        machine with the fewest of the workers in `spread` (the actor's group: a stage's peers).
        A given worker hosting another actor is shared. Raises NoFreeWorker if no worker is free;
        `wait`: return once the actor has started (else at once, and the first use waits)."""
        with self._lock:
            if worker is None:
                worker = next((w for w, hs in self._placed.items() if any(h.name == name for h in hs)), None) \
                    or self._free(name, spread)
            handle = ActorHandle(name, worker, key or self.key(cls, name), self.lost)
            hosted = [h for h in self._placed.get(worker, []) if h.name != name]  # a restart replaces its old instance
            self._placed[worker] = [*hosted, handle]
        try:
            handle.owner = self.client.submit(cls, *args, *(() if key else (handle.key,)), key=handle.key, actor=True,
                                              workers=[worker], allow_other_workers=False)
            if wait:
                handle.actor
        except Exception:
            self.free(handle)
            raise
        return handle

    def _free(self, name: str, spread: Collection[str]) -> str:
        """(lock held) A worker hosting nothing of the run for `name`, or NoFreeWorker."""
        workers = self.workers()
        worker = peer_worker(workers, self._placed, self._initial, [workers[w].get("host") for w in spread if w in workers])
        if worker is None:
            raise NoFreeWorker(f"no free Dask worker for {name}: all {len(workers)} workers host an actor of this run; "
                               f"start another `dask worker` (with --resources GPU=1 on a GPU host) or ask for fewer")
        return worker

    def trainer_workers(self, count: int, avoid: str | None = None) -> list[str]:
        """`count` workers for trainers, CPU workers first (placement.py's rule), never `avoid` (a
        hung one); they may share."""
        with self._lock:
            return trainer_workers({w: i for w, i in self.workers().items() if w != avoid},
                                   {w: len(hs) for w, hs in self._placed.items()}, count)

    def trainer_worker(self, avoid: str, stopped: threading.Event, seconds: float) -> str | None:
        """A worker other than `avoid` for a restarted trainer (a free one, or one it shares), waiting while
        there is none (every worker killed, their nannies restarting them); None once `stopped` or `seconds` pass."""
        deadline = time.monotonic() + seconds
        while not stopped.is_set():
            if picked := self.trainer_workers(1, avoid=avoid):
                return picked[0]
            if time.monotonic() >= deadline:
                return None
            stopped.wait(0.5)
        return None

    def keep_spare(self, worker: str) -> None:
        """Count `worker` with those the run started with: no newcomer, the last a new peer is placed on."""
        self._initial.add(worker)

    def unused(self, workers: Collection[str]) -> tuple[list[str], list[str]]:
        """Of `workers` (a `workers()` table), those hosting nothing of the run: the ones that joined after it
        started, and the others (spares)."""
        free = [w for w in workers if w not in self._placed]
        return [w for w in free if w not in self._initial], [w for w in free if w in self._initial]

    def free(self, handle: ActorHandle) -> None:
        """`handle`'s actor left: its worker can host another."""
        with self._lock:
            if hosted := [h for h in self._placed.pop(handle.worker, []) if h is not handle]:
                self._placed[handle.worker] = hosted

    # -- watching ------------------------------------------------------------------------------
    def watch(self, on_gone: Callable[[ActorHandle, str], None] | None = None) -> None:
        """Watch the scheduler's worker table from now on (the first call starts the one watcher
        thread): an actor whose worker left is lost (`ActorHandle.lose`), freed, and `on_gone`
        (the latest given) is told which and why."""
        with self._lock:
            self._on_gone = on_gone or self._on_gone
            if self._watching:
                return
            self._watching = True
        threading.Thread(target=self._watch_workers, name="labkit-fleet-workers", daemon=True).start()

    def _watch_workers(self) -> None:
        """Every `WORKER_CHECK` seconds: a worker that left (a SIGKILLed process is removed within
        about a second) takes every actor it hosted with it (a trainer sharing a peer's worker
        too); a silent one, free or not, is checked directly."""
        while not self._closed.wait(WORKER_CHECK):
            try:
                workers = cluster_workers(self.client)
            except Exception:  # the scheduler is busy: ask again
                continue
            with self._lock:
                self._hung &= workers.keys()
                left = {w: self._placed.pop(w) for w in list(self._placed) if w not in workers}
                judged = workers.keys() - self._hung - self._asked
            for worker, handles in left.items():
                self._lose(handles, f"its Dask worker {worker} left the cluster")
            silence = self._beats.update(workers, time.monotonic())
            for worker in hung_suspects(silence, judged):
                self._probes.start(worker, "worker", lambda wait, w=worker: self.client.run(worker_answer, workers=[w]),
                                   lambda wait, w=worker, s=silence[worker]: self.hangs(w, (
                                       f"its Dask worker {w} sent the scheduler no heartbeat for {s:.1f} s and did "
                                       f"not answer within {wait:.1f} s (hung)")),
                                   lambda w=worker: self._beats.answered(w, time.monotonic()))

    def hangs(self, worker: str, reason: str) -> None:
        """`worker` hangs (`reason`): its actors are lost, and it hosts nothing new until it leaves."""
        with self._lock:
            self._hung.add(worker)
            handles = self._placed.pop(worker, [])
        self._lose(handles, reason)

    def _lose(self, handles: list[ActorHandle], reason: str) -> None:
        """The actors `handles` (of one worker) are lost: calls waiting on them fail now, and the executor is told
        of each on a thread of its own (a trainer's restart must not hold up the eviction of a peer beside it)."""
        on_gone = self._on_gone
        for handle in handles:
            handle.lose(reason)
        for handle in handles if on_gone is not None else []:
            threading.Thread(target=on_gone, args=(handle, reason), name="labkit-fleet-lost", daemon=True).start()

    def close(self) -> None:
        """Stop watching, shut down every DHT node of the run, and release the cluster (once)."""
        if self._closed.is_set():
            return
        self._closed.set()
        calls = [self.client.close, *([self.cluster.close] if self.cluster is not None else [])]
        if self.node is not None:
            # a hung worker (SIGSTOP) never answers: its DHT node ends with it; one found hung is not asked
            release_all = in_background(lambda: self.client.run(release, self.run_id, workers=list(self.workers())))
            calls[:0] = [lambda: release_all.result(RELEASE_TIMEOUT), self.node.shutdown]
        for call in calls:
            try:
                call()
            except Exception:  # already gone: nothing to release
                pass
