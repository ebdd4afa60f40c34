"""The coordinator of a run: the step ledger, the membership of peers and the step boundary.

Built by composition from a `PeerFactory` (peers and trainers: threads here, Dask actors on a
cluster), it is what trainers take work from (`WorkSource`) and find peers in (`Directory`)
in-process. Its own thread runs the step boundary (labkit/runtime/boundary.py) whenever every
stage holds exactly the global batch, and applies the `Commit` the boundary returns.
"""

from __future__ import annotations

import copy
import itertools
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from labkit import events
from labkit.config import RunConfig
from labkit.model.partition import stage_bounds
from labkit.runtime.boundary import Books, Commit, step_boundary
from labkit.runtime import moves
from labkit.runtime.membership import Membership
from labkit.runtime.ports import PeerFactory, PeerHandle, RunEnded
from labkit.runtime.recovery import committed_states, keep_final, rollback, unreadable_at_stop
from labkit.runtime.shards import Checkpoints
from labkit.runtime.verdicts import settle
from labkit.swarm.deadline import BOUNDARY_FLOOR, Deadlines
from labkit.swarm.ledger import StepLedger, Task
from labkit.swarm.sync import SyncSchedule
from labkit.wire import get_codec

STOP_GRACE = 5.0  # seconds a stopping run waits for microbatches in flight before crashing its peers

class Coordinator:
    """Ledger, membership and step boundary of one run; peers and trainers come from `factory`.

    states: every stage's state at step `step`, what the first peers start from; from then on the committed
    state lives on the peers (`committed_states` asks them) and in the checkpoints they write."""

    def __init__(self, cfg: RunConfig, emit: Callable[[events.Event], None], factory: PeerFactory,
                 states: list[dict[str, Any]], *, step: int = 0, checkpoints: str | Path) -> None:
        self.cfg, self.emit, self.factory = cfg, emit, factory
        self.clock = factory.clock
        self.codec = cfg.compression.codec  # wire codec of activations and their gradients; switchable
        get_codec(self.codec)  # an unavailable codec fails here, with its name, before any peer starts
        self.ledger = StepLedger(cfg.stages, cfg.microbatches_per_step, cfg.microbatch, step=step)
        self.schedule = SyncSchedule(cfg.sync)
        self.checkpoints = Checkpoints(Path(checkpoints), cfg.checkpoint_every, cfg.peer_timeout,
                                       lambda step: emit(events.setting(self.clock(), name="checkpoint", value=step)))
        self.checkpoints.write_now(step, cfg, self.schedule, states)  # a rollback before the first goes here
        self.tags = itertools.count(1).__next__  # ring tags, increasing over the run
        self.deadlines = Deadlines(ceiling=cfg.peer_timeout, floor=BOUNDARY_FLOOR)  # of the boundary's requests
        self.suspects: set[str] = set()  # peers a trainer timed out on since the last step
        self.version = 0  # counts committed steps and rollbacks: a joiner's state is stale if it changed
        self.lock = threading.RLock()
        self.cond = threading.Condition(self.lock)
        self.paused: set[int] = set()  # stages without a live peer
        self.new_split: tuple[int, ...] | None = None  # set_layer_split's request, applied at a boundary
        self.stopping = False  # no more tasks are handed out
        self.running = False  # start() was called: new peers must be ready before they join
        self.closed = False  # join() stopped the peers
        self.final: list[dict[str, Any]] | None = None  # every stage's state when the run stopped
        self.final_step: int | None = None  # and the step it is of
        self.finished = threading.Event()  # the last step was committed
        self.stopped = threading.Event()  # no more steps will be taken
        self.last_loss: float | None = None
        self.error: BaseException | None = None
        self.diverged: str | None = None  # why the run stopped on a non-finite step, if it did
        self.step_hooks: list[Callable[[int], None]] = []  # called after each step, lock held
        self.held: dict[str, Task] = {}  # trainer lane -> the microbatch attempt it works on
        self.lost_trainers: set[str] = set()  # trainers reported dead: a call still under way gets no task
        self._last_state: dict[str, Any] = {"status": "starting", "step": step, "stages": []}
        self.members = Membership(self, stage_bounds(cfg.layer_split))
        factory.bind(self)
        self.members.populate(states)  # not kept: from now on the peers hold the state
        self.trainers = factory.start_trainers(cfg.trainers)
        self._boundary = threading.Thread(target=self._boundary_loop, name="labkit-boundary", daemon=True)

    # -- life cycle ----------------------------------------------------------------------------
    def start(self) -> None:
        """Wait for the first peers to serve, then start trainers and the boundary."""
        self.factory.started()
        self.running = True
        with self.lock:
            self._record_state()  # a state() that times out on the lock has the peers, not an empty "starting"
        for trainer in self.trainers:
            trainer.start()
        self._boundary.start()
        if self.cfg.rebalance_period:
            threading.Thread(target=moves.rebalance_rounds, args=(self.members,), name="rebalancer", daemon=True).start()
        threading.Thread(target=self.members.publish_loads, name="labkit-loads", daemon=True).start()

    def stop(self) -> None:
        """Hand out no more work; the trainers end after the microbatches in flight. Never waits
        long for the lock (a slow step boundary may hold it): waiters re-check every 0.5 s."""
        self.stopping = True
        self.stopped.set()
        if self.lock.acquire(timeout=0.1):
            try:
                self.cond.notify_all()
            finally:
                self.lock.release()

    def fail(self, exc: BaseException) -> None:
        """End the run on an unexpected error, with the error in a `run` `failed` event."""
        with self.lock:
            if self.error is None:
                self.error = exc
                self.emit(events.run(self.clock(), state="failed", reason=f"{type(exc).__name__}: {exc}"))
            self.finished.set()
        self.stop()

    def join(self, timeout: float | None = None) -> None:
        """Wait for the trainers and the boundary to end, then stop the peers and the backend; the
        microbatches in flight get `STOP_GRACE` seconds, then the peers are crashed (a slow one too)."""
        grace = time.monotonic() + STOP_GRACE
        for trainer in self.trainers:
            trainer.join(max(0.0, grace - time.monotonic()))
        late = any(trainer.alive() for trainer in self.trainers)
        wait = max(0.5, grace - time.monotonic()) if late else self.cfg.peer_timeout  # as a step's requests do
        held = self.lock.acquire(timeout=wait)  # a boundary stuck on a slow peer may hold it
        try:
            if held and self.paused and not late:  # a stage lost its state: the run is back at its last checkpoint
                self.rollback(f"the run stopped while stages {sorted(self.paused)} had no peer")
            keep_final(self, unreadable_at_stop(held, wait, self.paused if late else set()), 2 * STOP_GRACE if late else wait)
        finally:
            self.closed = True  # the directory is empty from now on: trainers stop retrying
            if held:
                self.lock.release()
        self.members.stop_all(crash=late or not held)
        for trainer in self.trainers:
            trainer.join(timeout)
        if self._boundary.is_alive():
            self._boundary.join(timeout)
        self.factory.close()

    # -- work for trainers (the WorkSource port) -----------------------------------------------
    def next_task(self, trainer: str) -> tuple[Task, str] | None:
        """Block until there is a microbatch for `trainer` to work on; None once the run is over
        or once `trainer` was reported lost (its call may outlive it: a dead caller takes nothing)."""
        with self.cond:
            while True:
                if self.stopping or trainer.split("/")[0] in self.lost_trainers:
                    return None
                if not self.paused and (task := self.ledger.next_task()) is not None:
                    self.held[trainer] = task
                    return task, self.codec
                self.cond.wait(timeout=0.5)

    def finish(self, trainer: str, task: Task, credits: dict[int, str], loss: float | None) -> None:
        with self.cond:
            if self.held.get(trainer) == task and task.step == self.ledger.step:
                del self.held[trainer]
                self.ledger.finish(task, credits, loss)
            self.cond.notify_all()

    def trainer_lost(self, trainer: str, reason: str) -> None:
        """A trainer died with its microbatches (one per lane): hand them out again (a gradient a peer
        accumulated for one is dropped at the boundary). `trainer` names one life: a restarted trainer
        calls under a new name, and a dead one's call still waiting here gets no task."""
        self.emit(events.setting(self.clock(), name="trainer_lost", value=f"{trainer}: {reason}"))  # before the lock
        with self.cond:
            self.lost_trainers.add(trainer)
            for lane in [lane for lane in self.held if lane.split("/")[0] == trainer]:  # "t0#1" and "t0#1/k"
                self.ledger.finish(self.held.pop(lane), {}, None)
            self.cond.notify_all()

    def stage_empty(self, stage: int) -> None:
        self.members.stage_empty(stage)

    def peer_timed_out(self, name: str, may_have_accumulated: bool) -> None:
        """A trainer gave up on peer `name` and banned it (a `banned` event), and the backend checks
        it is alive. If the request may have accumulated a gradient after all, the boundary drops it."""
        with self.lock:
            if (peer := self.members.peers.get(name)) is None:
                return
            if may_have_accumulated:
                self.suspects.add(name)
            during = "a request that may accumulate a gradient" if may_have_accumulated else "a forward"
            self.emit(events.peer(self.clock(), peer=name, stage=peer.stage, state="banned", queue=peer.queue_length)
                      | {"reason": f"timeout during {during}"})
        self.factory.suspect(name)

    def peer_failed(self, name: str, exc: BaseException) -> None:
        self.members.evict(name, f"error: {type(exc).__name__}: {exc}")

    # -- peers for trainers (the Directory port) -----------------------------------------------
    def registry(self) -> dict[str, tuple[int, int]]:
        return self.members.registry()

    def peer(self, name: str) -> PeerHandle | None:
        return self.members.peer(name)

    # -- the step boundary ---------------------------------------------------------------------
    def _boundary_loop(self) -> None:
        """Whenever every microbatch of the step is credited at every stage, take the step."""
        with self.cond:
            while not self.stopping:
                if self.paused or not self.ledger.ready():
                    self.cond.wait(timeout=0.5)
                    continue
                commit = None
                try:
                    self.apply(commit := step_boundary(self.books()))
                except Exception as exc:  # a broken invariant ends the run loudly
                    self.fail(exc)
                self._record_state()
                self.cond.notify_all()
                if commit is not None and commit.retry is not None:  # a ring broke, no one to blame
                    self.cond.wait(timeout=0.5)

    def books(self) -> Books:
        """What the boundary reads (lock held)."""
        s = range(self.cfg.stages)
        return Books(self.cfg, self.ledger.step, self.ledger.loss(), [*map(self.ledger.credited, s)],
                     [*map(self.members.live, s)], copy.copy(self.schedule), self.new_split, self.clock, self.tags,
                     lambda kind: self.deadlines[kind].seconds(), frozenset(self.suspects))

    def apply(self, commit: Commit) -> None:
        """Carry out a boundary's commit (lock held): deadlines, evictions, dropped sums, a rollback,
        then if taken the split, ledger, events, hooks and checkpoint; stop a diverged or finished run."""
        self.deadlines.learn(commit.took, commit.late)
        settle(self.members, commit.evict, commit.drop)
        if commit.rollback is not None:
            self.rollback(commit.rollback)
        if commit.taken:
            self.schedule, self.last_loss, self.version = commit.schedule, self.ledger.loss(), self.version + 1
            self.suspects.clear()
            if commit.split is not None:  # set_layer_split's request: re-slice the states, rebuild every peer
                states = self.committed_states()
                self.cfg, self.new_split = self.cfg.replace(layer_split=commit.split), None
                states = self.members.rebuild(states)
                self.checkpoints.write_now(self.ledger.step + 1, self.cfg, self.schedule, states)  # the old ones no longer fit
            self.ledger.advance()
        for event in commit.events:  # the syncs, then the step (none if it diverged)
            self.emit(event)
        if commit.retry is not None:
            self.emit(events.setting(self.clock(), name="boundary_retry", value=commit.retry))
        if commit.diverged is not None:
            kept = ("went back to its checkpoint of" if commit.rollback is not None else "keeps the state of")
            self.diverged = f"{commit.diverged}; the run {kept} step {self.ledger.step}"
            self.emit(events.run(self.clock(), state="diverged", reason=self.diverged))
            self.stop()
        if not commit.taken:
            return
        self.members.alive()
        for hook in self.step_hooks:
            hook(self.ledger.step)
        writers = [peers[0] for peers in map(self.members.live, range(self.cfg.stages)) if peers]
        if self.checkpoints.due(self.ledger.step) and self.schedule.inner == 0 and len(writers) == self.cfg.stages:
            self.checkpoints.start(self.ledger.step, self.cfg, self.schedule, writers)
        if self.ledger.step >= self.cfg.steps:
            self.finished.set()
            self.stop()

    def committed_states(self) -> list[dict[str, Any]]:
        """Every stage's committed state (lock held); see `recovery.committed_states`."""
        return committed_states(self)

    def rollback(self, why: str) -> None:
        """Take the whole run back to its last checkpoint (lock held); see `recovery.rollback`."""
        rollback(self, why)

    # -- settings --------------------------------------------------------------------------------
    def live_or_raise(self, verb: str) -> None:
        """Refuse `verb` once the run has ended: its peers are gone."""
        if self.closed or self.stopped.is_set():
            status = ("failed" if self.error else "diverged" if self.diverged else
                      "finished" if self.finished.is_set() else "stopped")
            raise RunEnded(f"{verb} is not available: the run has ended ({status}); "
                           f"snapshot() and checkpoint() still give its final state")

    def state(self) -> dict[str, Any]:
        """Step, last loss, paused stages, and every stage's peers with queue lengths and the
        samples the ledger credits them with in the current step. Never blocks for long: while a
        slow step boundary holds the lock, the last state is returned, marked `"stale": True`."""
        if not self.lock.acquire(timeout=0.5):
            return {**self._last_state, "stale": True}
        try:
            return self._record_state()
        finally:
            self.lock.release()

    def _record_state(self) -> dict[str, Any]:
        """Build the state (lock held), kept for a state() that finds the lock busy; a copy."""
        self._last_state = {"status": "paused" if self.paused else "running", "step": self.ledger.step,
                            "steps": self.cfg.steps, "loss": self.last_loss, "paused_stages": sorted(self.paused),
                            "stages": self.members.stages()}
        return dict(self._last_state)
