"""The run handle: the one contract the CLI, the widgets, the notebooks and the tests drive.

A run starts in the background and hands you this object at once::

    import labkit
    run = labkit.launch(labkit.RunConfig(stages=2, peers=2, steps=50))
    run.wait_for(step=3)                    # block until step 3 is committed (no sleeps)
    run.kill_peer("s1p0")                   # a crash: its unsynced work is recomputed elsewhere
    name = run.add_peer(1)                  # a join: the new peer downloads stage 1's state
    run.wait_for(event={"type": "hop", "peer": name})   # ...and starts serving
    run.set_compression("int8")             # 8-bit activations on the wire from now on
    snap = run.snapshot().result()          # the committed state at the next step boundary
    summary = run.wait()                    # the end-of-run summary

Every verb returns promptly (`wait`, `wait_for` and a future's `result` block only when you ask).
Every executor on every backend runs behind one shell (`labkit/runtime/run.py`), which gives a
verb its run's core (`_live_core`): a verb is written once, here, with its argument checks, as a
typed call on the core.
"""

from __future__ import annotations

import atexit
import queue
import threading
import time
import weakref
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from pathlib import Path
from typing import Any, NamedTuple

from labkit.config import WIRE_CODECS, RunConfig, SyncConfig
from labkit.events import Event, hop_line
from labkit.runtime.checkpoint import save_checkpoint
from labkit.runtime.eventlog import EventLog
from labkit.runtime.files import claim, write_json
from labkit.runtime.totals import RunTotals

# The steering verbs, which an executor's spec may refuse (the rest are served by the handle).
STEERING_VERBS = ("stop", "kill_peer", "add_peer", "move_peer", "rebalance", "set_layer_split", "set_peer_delay",
                  "peer_state", "set_compression", "set_sync")
EventMatch = str | Mapping[str, Any] | Callable[[Event], bool]
JOIN_SECONDS = 60.0  # how long the end of a run (or of the process) waits for a run's threads to let go
_LIVE: weakref.WeakSet[RunHandle] = weakref.WeakSet()  # runs a process exit must stop first


@atexit.register
def _stop_live_runs() -> None:
    """At exit, stop every run still live and wait for its thread: a daemon thread still in torch
    when the interpreter finalizes aborts the process ("terminate called without an active exception")."""
    for run in list(_LIVE):
        run.stop()
        run.wait(JOIN_SECONDS)


class Snapshot(NamedTuple):
    """The committed state at one step boundary: what a checkpoint file holds."""

    config: RunConfig  # with the layer split and sync mode in force
    step: int
    stages: list[dict[str, Any]]  # per stage: "params", "optimizer" (and DiLoCo's "global_params", ...)

    def save(self, path: str | Path) -> Path:
        return save_checkpoint(path, self.config, self.step, self.stages)


def matches(event: Event, match: EventMatch) -> bool:
    """Whether `event` is of type `match` (a str), has its fields (a mapping), or passes it (a callable)."""
    if isinstance(match, str):
        return event["type"] == match
    if callable(match):
        return bool(match(event))
    return all(event.get(k) == v for k, v in match.items())


def open_record(cfg: RunConfig, run_dir: str | Path | None, trace: bool) -> tuple[Path | None, EventLog]:
    """The run directory (claimed for this run, refused if it holds another run: see `files.claim`;
    with `config.json`) and the event log (`events.jsonl` there, hops printed if `trace`) of a run
    starting with `cfg`."""
    path = claim(Path(run_dir), cfg.to_dict()) if run_dir is not None else None
    log = EventLog(path / "events.jsonl" if path else None)
    if trace:
        trace_hops(log)
    return path, log


def ended_summary(status: str, steps: int, totals: RunTotals, seconds: float, corpus: str,
                  error: BaseException | None, reason: str | None, **extra: Any) -> dict[str, Any]:
    """The summary of a run that ended `status` after `steps` steps: its totals (the validation
    loss after only if measured at that step; none for a failed run), time, corpus, and the error
    or the reason (a divergence) when there is one."""
    summary = {"status": status, "steps": steps, **totals.summary(None if status == "failed" else steps),
               "seconds": seconds, "corpus": corpus, **extra}
    if error is not None:
        summary["error"] = f"{type(error).__name__}: {error}"
    if reason:
        summary["reason"] = reason
    return summary


def leave_record(run_dir: Path | None, summary: dict[str, Any], final: Snapshot, pending: list[Future]) -> None:
    """Hand the final state to snapshot requests no step will serve any more, and leave the
    final checkpoint and summary.json in the run directory (the summary notes the checkpoint)."""
    for future in pending:
        future.set_result(final)
    if run_dir:
        summary["checkpoint"] = str(final.save(run_dir / "checkpoint.pt"))
        write_json(run_dir / "summary.json", summary, "summary")


def trace_hops(log: EventLog) -> None:
    """Print one line per hop beside its event (`t0 → s1p0 forward 12.3 KB 4.1 ms`), for teaching."""
    log.listeners.append(lambda e: print(hop_line(e)) if e["type"] == "hop" else None)


def then(future: Future, fn: Callable[[Any], Any]) -> Future:
    """A future of `fn(result)`, which runs when `future` resolves (its error propagates)."""
    out: Future = Future()

    def done(f: Future) -> None:
        try:
            out.set_result(fn(f.result()))
        except Exception as exc:
            out.set_exception(exc)

    future.add_done_callback(done)
    return out


class RunHandle(ABC):
    """A live training run: `events` (a live `EventLog`), `state()`, and the verbs that steer it."""

    config: RunConfig
    run_dir: Path | None
    events: EventLog
    _done: threading.Event
    _summary: dict[str, Any]
    _thread: threading.Thread

    @abstractmethod
    def clock(self) -> float:
        """Seconds since the run started (the `t` of its events)."""

    def _start_thread(self, target: Callable[[], None], name: str) -> None:
        """Run the run's life (`target`) on its own thread; a process exit stops and waits for it."""
        self._thread = threading.Thread(target=target, name=name, daemon=True)
        self._thread.start()
        _LIVE.add(self)

    # -- what the shell provides --------------------------------------------------------------
    @abstractmethod
    def _live_core(self, verb: str) -> Any:
        """The run's core (a `labkit.runtime.core.RunCore`) for steering verb `verb`; raises one
        error if the executor refuses the verb or the run has ended."""

    @abstractmethod
    def stop(self) -> None:
        """Ask the run to stop after the microbatches in flight; returns at once."""

    @abstractmethod
    def snapshot(self) -> Future:
        """The committed state at the next step boundary (the final state once the run ended)."""

    @abstractmethod
    def state(self) -> dict[str, Any]:
        """Status, step, last loss, paused stages, and every stage's peers with queue lengths."""

    @abstractmethod
    def dashboard(self, timeout: float | None = None) -> str | None:
        """The Dask dashboard's address; None where no cluster runs the peers."""

    # -- life cycle ----------------------------------------------------------------------------
    @property
    def done(self) -> bool:
        """Whether the run has ended (finished, stopped or failed)."""
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> dict[str, Any]:
        """Block until the run ends and its thread has let go of everything (or `timeout` seconds
        pass); return the summary so far."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if self._done.wait(timeout):
            self._thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return dict(self._summary)

    def summary(self) -> dict[str, Any]:
        """The end-of-run summary (empty while running)."""
        return dict(self._summary)

    def wait_for(self, step: int | None = None, event: EventMatch | None = None, timeout: float = 120) -> Event:
        """Block until step `step` is committed or an event matching `event` is emitted (a type
        like "step", a dict of fields like {"type": "run", "state": "paused"}, or a predicate);
        returns that event. Events emitted before the call count. Raises TimeoutError after
        `timeout` seconds and RuntimeError if the run ends first, each with the run's state."""
        if (step is None) == (event is None):
            raise ValueError("wait_for needs exactly one of step=N or event=...")
        if step is not None:
            def match(e: Event) -> bool:
                return e["type"] == "step" and e["step"] >= step
        else:
            def match(e: Event) -> bool:
                return matches(e, event)
        live = self.events.subscribe()
        try:
            # a step wait needs only the latest step event, not a copy of the whole history
            earlier = [self.events.latest("step")] if step is not None else self.events.history()
            for e in earlier:
                if e is not None and match(e):
                    return e
            deadline = time.monotonic() + timeout
            while True:
                try:
                    e = live.get(timeout=min(0.1, max(0.0, deadline - time.monotonic())))
                except queue.Empty:
                    if self.done and live.empty():
                        raise RuntimeError(f"the run ended ({self._summary.get('status')}) before "
                                           f"{_wanted(step, event)}: {self._summary}") from None
                    if time.monotonic() >= deadline:
                        raise TimeoutError(f"no {_wanted(step, event)} within {timeout} s; "
                                           f"state: {self.state()}") from None
                    continue
                if match(e):
                    return e
        finally:
            self.events.unsubscribe(live)

    # -- the steering verbs ------------------------------------------------------------------
    def kill_peer(self, peer: str) -> None:
        """Crash a peer: its queue and accumulated gradients are lost and recomputed elsewhere."""
        self._live_core("kill_peer").kill_peer(_peer_name(peer))

    def add_peer(self, stage: int | None = None) -> str:
        """Start a peer on `stage` (None: the stage the rebalancing rule picks); returns its name."""
        stage = None if stage is None else self._stage(stage, "None or ")
        return self._live_core("add_peer").add_peer(stage)

    def move_peer(self, peer: str, stage: int) -> str:
        """Move a peer to `stage` (it downloads that stage's state); returns its new name."""
        peer, stage = _peer_name(peer), self._stage(stage)
        return self._live_core("move_peer").move_peer(peer, stage)

    def _stage(self, stage: object, also: str = "") -> int:
        """`stage` if it names one of the run's stages; else one ValueError saying what is allowed."""
        stages = self.config.stages
        if not (isinstance(stage, int) and not isinstance(stage, bool) and 0 <= stage < stages):
            raise ValueError(f"stage={stage!r} is not allowed: {also}an integer in [0, {stages})")
        return stage

    def rebalance(self) -> str | None:
        """Run one round of Algorithm 2 now; returns the moved peer's new name, or None."""
        return self._live_core("rebalance").rebalance()

    def set_layer_split(self, split: list[int] | tuple[int, ...]) -> None:
        """Move blocks between stages at the next step boundary, with their optimizer state."""
        if not isinstance(split, (list, tuple)):
            raise ValueError(f"split={split!r} is not allowed: a list of blocks per stage, e.g. [3, 1]")
        split = self.config.replace(layer_split=tuple(split)).layer_split
        self._live_core("set_layer_split").set_layer_split(split)

    def set_peer_delay(self, peer: str, seconds: float) -> None:
        """Slow a peer down by `seconds` per request (to watch the router shift traffic away)."""
        if not (isinstance(seconds, (int, float)) and not isinstance(seconds, bool) and 0 <= seconds < 60):
            raise ValueError(f"seconds={seconds!r} is not allowed: a number in [0, 60)")
        peer = _peer_name(peer)
        self._live_core("set_peer_delay").set_peer_delay(peer, float(seconds))

    def peer_state(self, peer: str) -> dict[str, Any]:
        """A copy of one peer's parameters and optimizer state (to compare replicas of a stage)."""
        peer = _peer_name(peer)
        return self._live_core("peer_state").peer_state(peer)

    def set_compression(self, codec: str) -> None:
        """Switch the wire codec of activations and their gradients (fp32, fp16, bf16, int8) now."""
        if codec not in WIRE_CODECS:
            raise ValueError(f"codec={codec!r} is not allowed: one of {sorted(WIRE_CODECS)}")
        self._live_core("set_compression").set_compression(codec)

    def set_sync(self, sync: SyncConfig) -> None:
        """Switch each stage between SWARM all-reduce and DiLoCo at the next outer-step boundary."""
        self.config.replace(sync=sync)  # the config's own rules: a SyncConfig, DiLoCo without delayed updates
        self._live_core("set_sync").set_sync(sync)

    def checkpoint(self, path: str | Path) -> Future:
        """Save the whole run at the next step boundary; the future resolves to the path."""
        if not isinstance(path, (str, Path)) or not str(path):
            raise ValueError(f"path={path!r} is not allowed: the path of a file to write the checkpoint to")
        return then(self.snapshot(), lambda snap: snap.save(path))


def _peer_name(peer: object) -> str:
    """`peer` if it can be a peer's name (a string; whether such a peer lives, the run answers)."""
    if not isinstance(peer, str) or not peer:
        raise ValueError(f"peer={peer!r} is not allowed: a peer's name, e.g. 's0p1' (see run.state())")
    return peer


def _wanted(step: int | None, event: EventMatch | None) -> str:
    return f"step {step}" if step is not None else f"event matching {event!r}"
