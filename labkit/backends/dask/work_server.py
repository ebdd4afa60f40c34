"""The coordinator's work, served to trainers on Dask workers over labkit's data plane.

Trainers on other workers ask for microbatches (`next_task`) and report them done (`finish`,
with their hop events) or report faults; this server carries each request out on a thread pool
(a call may wait for the coordinator's lock, or for work), because a microbatch's `next_task` and
`finish` are on the hot path, where a Dask actor call would cost a scheduler round trip.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from labkit.runtime.coordinator import Coordinator
from labkit.runtime.sockets import SocketServer

TRAINER_CALLS = {call.__name__: call for call in (Coordinator.next_task, Coordinator.finish, Coordinator.stage_empty,
                                                   Coordinator.peer_timed_out, Coordinator.peer_failed,
                                                   Coordinator.fail)}  # what trainers may ask, by wire name
SPARE_THREADS = 16  # beyond one per trainer: reports of faults while every trainer waits for work


class WorkServer:
    """Serves `coordinator`'s work to `trainers` trainers, listening on `host` (toward the cluster)."""

    def __init__(self, host: str, trainers: int) -> None:
        self.coordinator: Coordinator | None = None
        self._pool = ThreadPoolExecutor(trainers + SPARE_THREADS, thread_name_prefix="labkit-work")
        self._server = SocketServer(self._serve, host, "coordinator")
        self.address = self._server.address

    def serve(self, coordinator: Coordinator) -> None:
        """Start answering with `coordinator`'s work (requests before this are refused)."""
        self.coordinator = coordinator

    def close(self) -> None:
        self._server.close()
        self._pool.shutdown(wait=True, cancel_futures=True)  # the run stopped: waiting requests return at once

    def _serve(self, method: str, args: tuple) -> Future:
        if method not in TRAINER_CALLS or self.coordinator is None:
            refused: Future = Future()
            refused.set_exception(ValueError(f"call={method!r} is not allowed: one of {list(TRAINER_CALLS)}, "
                                             f"once the run has started"))
            return refused
        return self._pool.submit(self._request, self.coordinator, method, *args)

    @staticmethod
    def _request(coordinator: Coordinator, method: str, *args: Any) -> Any:
        """A report about a peer carries the actor key the trainer called; it is ignored if a
        rebuild has replaced that instance (a stale view says nothing of the new one). A
        microbatch's `finish` brings the trainer's hop events with it."""
        if method == "finish":
            *args, hops = args
            for event in hops:
                coordinator.emit(event)
        if method in ("peer_timed_out", "peer_failed"):
            *args, key = args
            peer = coordinator.peer(args[0])
            if peer is None or (key is not None and peer.key != key):
                return None
        return TRAINER_CALLS[method](coordinator, *args)
