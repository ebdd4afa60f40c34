"""A handle on one actor of a Dask run: calls that fail at once, with the executor's own error,
once the actor's worker is gone (the fleet, actor_fleet.py, says when), and a clean release."""

from __future__ import annotations

import threading
import time
from typing import Any

from distributed.actor import Actor

from labkit.backends.dask.remote import started_actor


def wire_broke(exc: BaseException) -> bool:
    """Whether `exc` says the actor's worker cannot be reached (not an error the actor raised): a comm
    error (CommClosedError is an OSError) or distributed's RuntimeError for an actor whose worker was lost."""
    return isinstance(exc, OSError) or (type(exc) is RuntimeError and "Worker holding Actor was lost" in str(exc))


class ActorHandle:
    """The actor `key` on `worker`, started by `owner` (a Dask future the handle holds while the
    actor lives; the first use waits for the start). `call` raises `lost` (the executor's
    exception class) once the worker is gone."""

    def __init__(self, name: str, worker: str, key: str, lost: type[Exception]) -> None:
        self.name, self.worker, self.key, self._lost = name, worker, key, lost
        self.owner: Any = None
        self._actor: Actor | None = None
        self.gone = threading.Event()  # its worker left the cluster
        self.reason = ""  # why it is gone
        self.stopped = threading.Event()  # an interruptible call waiting on it stops waiting (raises `lost`)

    @property
    def actor(self) -> Actor:
        """The actor, once started (raises what stopped it from starting)."""
        if self._actor is None:
            self._actor = started_actor(self.owner, self.name, self.worker)
        return self._actor

    def lose(self, reason: str) -> None:
        """Its worker is gone (`reason`): every call waiting on it fails now, and every later one."""
        self.reason = reason
        self.gone.set()

    def call(self, method: str, *args: Any, interruptible: bool = False, timeout: float | None = None) -> Any:
        """`method(*args)` on the actor. A broken wire (the worker died, perhaps before the
        scheduler noticed) raises `lost`, and so do `stopped` for an interruptible call and no
        answer within `timeout` seconds; an error the actor raised is raised here."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if self.gone.is_set():
            raise self._lost(f"{self.name}: {self.reason}")
        try:
            future = getattr(self.actor, method)(*args)
            while not future.done():
                if self.gone.wait(0.02):
                    raise self._lost(f"{self.name}: {self.reason}")
                if interruptible and self.stopped.is_set():
                    raise self._lost(f"{self.name}: stopped while {method} ran")
                if deadline is not None and time.monotonic() > deadline:
                    raise self._lost(f"{self.name}: {method} did not answer within {timeout:.0f} s")
            return future.result()
        except Exception as exc:
            if not wire_broke(exc):
                raise
            raise self._lost(f"{self.name}: its Dask worker {self.worker} cannot be reached "
                             f"({type(exc).__name__}: {exc})") from None

    def tell(self, method: str, *args: Any) -> None:
        """Send `method(*args)` without waiting; nothing happens if the worker is gone."""
        try:
            getattr(self.actor, method)(*args)
        except Exception as exc:
            if not wire_broke(exc):
                raise

    def release(self, last: str | None = None) -> None:
        """Call `last` on the actor (its clean-up) if its worker still answers, then let it go."""
        try:
            if last is not None and not self.gone.is_set():
                getattr(self.actor, last)().result(30)
        except Exception:  # its worker died meanwhile: nothing left to clean up
            pass
        self.owner = None
