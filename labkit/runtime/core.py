"""What the one run shell (`labkit/runtime/run.py`) drives: an executor's core.

A core is the state machine of one executor's run (SWARM's coordinator, ATOM's replicas, the task
pool's servers, the synchronous pipeline's stages); it owns the work and its lock. The shell owns
the run's life around it: events, evaluation, snapshots, the end, the record. Verbs are typed
calls on the core; the shell asks the executor's spec first, and a core only implements the verbs
its spec does not refuse.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from labkit import events
from labkit.config import RunConfig, SyncConfig
from labkit.data import Corpus


class RunCore(Protocol):
    """An executor's run, as the shell drives it."""

    cond: threading.Condition  # the core's lock: step hooks run with it held
    stopping: bool  # no more work is handed out
    finished: threading.Event  # the last step was committed (or the run failed)
    error: BaseException | None  # an unexpected error ended the run
    diverged: str | None  # why a non-finite step ended the run
    step_hooks: list[Callable[[int], None]]  # called after each committed step, lock held
    dashboard: str | None  # the address of a dashboard of the workers (Dask's), if there is one
    writes_checkpoints: bool  # it writes its own periodic checkpoints (SWARM's peers); else the shell does

    @property
    def step(self) -> int: """The last committed step."""
    def committed(self) -> tuple[RunConfig, list[dict[str, Any]]]:
        """The config in force (layer split, sync) and every stage's committed state (lock held)."""
    def consistent(self) -> bool:
        """Whether the committed state is one a snapshot may hold (DiLoCo: at an outer step)."""
    def start(self) -> None: """Start the work (the starting state is already evaluated)."""
    def stop(self) -> None: """Hand out no more work; returns at once."""
    def join(self, timeout: float) -> None: """Wait for the work in flight to end."""
    def close(self) -> None: """Release everything the core holds (workers, clusters)."""
    def state(self) -> dict[str, Any]: """Step, loss, and every stage's workers, for `run.state()`."""

    # the steering verbs (a core implements those its spec does not refuse)
    def kill_peer(self, name: str) -> None: ...
    def add_peer(self, stage: int | None) -> str: ...
    def move_peer(self, name: str, stage: int) -> str: ...
    def rebalance(self) -> str | None: ...
    def set_layer_split(self, split: tuple[int, ...]) -> None: ...
    def set_peer_delay(self, name: str, seconds: float) -> None: ...
    def peer_state(self, name: str) -> dict[str, Any]: ...
    def set_compression(self, codec: str) -> None: ...
    def set_sync(self, sync: SyncConfig) -> None: ...


# (config, corpus, starting stage states, starting step, emit, clock) -> the core, not started yet
CoreFactory = Callable[[RunConfig, Corpus, Sequence[Mapping[str, Any]], int, Callable[[events.Event], None],
                        Callable[[], float]], RunCore]


def evaluation_due(cfg: RunConfig, step: int) -> bool:
    """Whether the state committed at `step` is evaluated: every `eval_every` steps and the last."""
    return bool(cfg.eval_every and step % cfg.eval_every == 0) or step == cfg.steps


def live_worker(workers: Mapping[str, Any], name: str, what: str) -> Any:
    """Worker `name` of `workers` (each with `alive`) if it lives; else one ValueError naming the
    live ones (`what`: "replicas", "clients", "peers"), what every core's peer verbs raise."""
    worker = workers.get(name)
    if worker is None or not worker.alive:
        raise ValueError(f"peer={name!r} is not allowed: one of the live {what} "
                         f"{[n for n, w in workers.items() if w.alive]}")
    return worker


def fail_core(core: Any, exc: BaseException) -> None:
    """End `core`'s run on an unexpected error (a bug, not a fault), with the error in one `run`
    `failed` event."""
    with core.cond:
        if core.error is None:
            core.error = exc
            core.emit(events.run(core.clock(), state="failed", reason=f"{type(exc).__name__}: {exc}"))
        core.stopping = True
        core.cond.notify_all()
