"""The in-process transport: a request queue drained by one thread, answering with futures.

A caller puts `fn(*args)` on the queue and gets a `concurrent.futures.Future`; the server's
thread runs requests one at a time, in order. A crash (`kill`) drops what is queued; a clean
`close` serves what is queued first. Either way, later requests fail at once with the server's
death error, so no caller waits on a server that will never answer. A served request's future
carries `timing`: the seconds it waited on the queue and ran (where a hop's time goes), plus what
the server's `notes()` says of it (a virtual device's emulated seconds and overrun).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from typing import Any


def timing(future: Future) -> dict[str, float]:
    """Where a served request's seconds went: {"queue": waiting for the server's thread,
    "compute": running}, plus the transport's own parts (a remote peer's); {} when not measured."""
    return getattr(future, "timing", {})


class RequestQueue:
    """A server thread named `name`; `died()` makes the error every unserved request fails with;
    `notes()`, called on that thread after each request, adds to its timing."""

    def __init__(self, name: str, died: Callable[[], Exception], notes: Callable[[], dict[str, float]] = dict) -> None:
        self._died, self._notes = died, notes
        self._requests: queue.Queue[tuple[Callable[..., Any], tuple, Future, float] | None] = queue.Queue()
        self._alive = True
        self._serving = 0  # 1 while a request runs
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            item = self._requests.get()
            if item is None or not self._alive:
                if item is not None:
                    self._fail(item[2])
                break
            fn, args, future, queued = item
            if not future.set_running_or_notify_cancel():
                continue
            started = time.perf_counter()
            self._serving = 1
            try:
                result = fn(*args)
            except BaseException as exc:  # the caller sees the failure (a trainer reroutes)
                self._serving = 0
                future.set_exception(exc)
            else:
                self._serving = 0
                future.timing = {"queue": started - queued, "compute": time.perf_counter() - started, **self._notes()}
                if self._alive:
                    future.set_result(result)
                else:
                    self._fail(future)
        self._fail_queued()

    def _fail_queued(self) -> None:
        while True:
            try:
                item = self._requests.get_nowait()
            except queue.Empty:
                return
            if item is not None:
                self._fail(item[2])

    def _fail(self, future: Future) -> None:
        """Answer a request the dead server will never serve (unless its caller gave up on it)."""
        try:
            future.set_exception(self._died())
        except InvalidStateError:
            pass  # cancelled by a caller that timed out

    def call(self, method: str, *args: Any) -> Future:
        """Queue the request `method(*args)` (a method of this server); the future resolves to its result."""
        return self.submit(getattr(self, method), *args)

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future:
        """Queue `fn(*args)` to run on this server's thread."""
        future: Future = Future()
        if not self._alive:
            future.set_exception(self._died())
            return future
        self._requests.put((fn, args, future, time.perf_counter()))
        if not self._alive:  # killed between the check and the put: the thread may have drained already
            self._fail_queued()
        return future

    @property
    def queue_length(self) -> int:
        """Requests this server holds: waiting, and the one it runs (the load Algorithm 2 and the
        stage-load charts read, as the simulator counts it)."""
        return self._requests.qsize() + self._serving

    def kill(self) -> None:
        """Crash: stop answering and drop the queued requests."""
        self._alive = False
        self._requests.put(None)

    def close(self) -> None:
        """Stop after the requests already queued (a clean shutdown); later requests fail at once."""
        self._requests.put(None)
        self._thread.join(timeout=10)
        self._alive = False
        self._fail_queued()
