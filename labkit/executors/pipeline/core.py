"""The synchronous pipeline's core: the state machine the run shell drives (a `RunCore`, see runtime/core.py).

Fixed wiring: `slots[stage][lane]` is the peer of each lane at each stage. One driver thread takes
step after step: it waits until every slot has a live peer, runs an `Attempt` (every lane's
microbatches through its stages), sums each stage's gradients over its lanes, has every replica
take the same optimizer step, and commits: each stage's state (from its lane-0 peer) becomes the
state a replacement loads. A peer killed or lost breaks the attempt: the live peers drop what the
attempt left them (and go back to the committed state if it was being applied), and once
`add_peer` has filled every slot the step is recomputed from its start: nothing lost, nothing doubled.
"""

from __future__ import annotations

import itertools
import math
import threading
from collections.abc import Callable, Sequence
from typing import Any

from labkit import events
from labkit.config import RunConfig
from labkit.data import WindowSampler
from labkit.executors.pipeline.lanes import Attempt, Broken, Outcome
from labkit.executors.pipeline.links import StageLinks, lane_place
from labkit.executors.pipeline.peers import Peer, StageHost, kept
from labkit.pipeline.schedule import BACKWARD, bubble
from labkit.model.partition import stage_bounds
from labkit.runtime.core import fail_core, live_worker
from labkit.runtime.peer import PeerDied


class PipelineCore:
    """The peers, the committed state and the steps of one synchronous-pipeline run."""

    writes_checkpoints = False  # the run shell writes what `committed()` gives

    def __init__(self, cfg: RunConfig, sampler: WindowSampler, emit: Callable[[events.Event], None],
                 clock: Callable[[], float], states: Sequence[dict[str, Any]], host: StageHost, step: int = 0) -> None:
        self.cfg, self.sampler, self.emit, self.clock, self.host = cfg, sampler, emit, clock, host
        self.lanes = cfg.peers_per_stage[0]
        self._committed = [dict(s) for s in states]  # what a replacement loads: the state after the last step
        self.slots: list[list[Peer | None]] = [[None] * self.lanes for _ in range(cfg.stages)]
        self.peers: dict[str, Peer] = {}
        self.cond = threading.Condition()
        self.step = step
        self.stopping = self.paused = False
        self.finished = threading.Event()
        self.last_loss: float | None = None
        self.diverged: str | None = None  # why the run stopped on a non-finite loss, if it did
        self.error: BaseException | None = None
        self.dashboard = host.dashboard  # where the peers' workers are watched, if anywhere
        self.step_hooks: list[Callable[[int], None]] = []  # called after each step, lock held
        self._thread: threading.Thread | None = None
        self._attempt: Attempt | None = None
        self._applying = False  # the attempt's optimizer steps have begun: live peers may have stepped
        self._attempts = itertools.count()  # numbers the attempts: a recomputed step's sums are keyed apart
        self._numbers = [itertools.count() for _ in range(cfg.stages)]
        self._links = None if cfg.world is None and cfg.links is None else StageLinks(cfg, self.lanes)
        try:
            with self.cond:
                for stage, lane in itertools.product(range(cfg.stages), range(self.lanes)):
                    self._join(stage, lane)
            # with an optimizer state even at step 0, so a recovery resets an optimizer that stepped
            self._committed = [kept(row[0].port.request("state")) for row in self.slots]
        except BaseException:
            self.close()
            raise
        host.watch(self.lost)

    # -- membership ----------------------------------------------------------------------------
    def _join(self, stage: int, lane: int) -> str:
        """(lock held) A new peer takes `lane` of `stage`, holding the stage's committed state."""
        name = f"s{stage}p{next(self._numbers[stage])}"
        peer = Peer(name, stage, lane, self.host.spawn(name, stage, self._committed[stage], lane_place(stage, lane)))
        self.slots[stage][lane] = self.peers[name] = peer
        self.emit(events.peer(self.clock(), peer=name, stage=stage, state="joined", queue=0) | {"lane": lane})
        self.cond.notify_all()
        return name

    def _gaps(self, stage: int | None = None) -> list[tuple[int, int]]:
        """(stage, lane) of every slot without a live peer (of `stage` only, if given)."""
        return [(s, lane) for s, row in enumerate(self.slots) for lane, peer in enumerate(row)
                if peer is None and stage in (None, s)]

    def add_peer(self, stage: int | None) -> str:
        """A replacement takes the first empty lane of `stage` (None: of the first stage with one)."""
        with self.cond:
            if stage is not None and not (isinstance(stage, int) and 0 <= stage < self.cfg.stages):
                raise ValueError(f"stage={stage!r} is not allowed: None or an integer in [0, {self.cfg.stages})")
            gaps = self._gaps(stage)
            if not gaps:
                where = "every stage" if stage is None else f"stage {stage}"
                raise ValueError(f"add_peer({stage!r}) is not allowed: {where} has a live peer in each of its "
                                 f"{self.lanes} lanes (the wiring is fixed; a peer is added only to replace a lost one)")
            return self._join(*gaps[0])

    def _live(self, name: str) -> Peer:
        return live_worker(self.peers, name, "peers")

    def kill_peer(self, name: str) -> None:
        """Peer `name` crashes: the pipeline stalls until `add_peer` replaces it."""
        with self.cond:
            self._lose(self._live(name), "killed")

    def lost(self, name: str, reason: str) -> None:
        """Peer `name`'s process is gone (`reason`): as a kill."""
        with self.cond:
            peer = self.peers.get(name)
            if peer is not None and peer.alive:
                self._lose(peer, reason)

    def _lose(self, peer: Peer, reason: str) -> None:
        """(lock held) `peer` is gone: its slot empties, the attempt in progress breaks, the run pauses."""
        peer.alive = False
        peer.port.kill()
        self.slots[peer.stage][peer.lane] = None
        self.emit(events.peer(self.clock(), peer=peer.name, stage=peer.stage, state="killed", queue=0)
                  | {"lane": peer.lane, "reason": reason})
        if self._attempt is not None:
            self._attempt.box.break_(PeerDied(f"{peer.name}: {reason}"))
        if not self.paused:
            self.paused = True
            self.emit(events.run(self.clock(), state="paused", reason=f"{peer.name} (stage {peer.stage}, lane "
                                 f"{peer.lane}) {reason}: the pipeline waits for add_peer({peer.stage})"))
        self.cond.notify_all()

    def set_peer_delay(self, name: str, seconds: float) -> None:
        """Make peer `name` hold every data request `seconds` longer (a slow device)."""
        with self.cond:
            peer = self._live(name)
            peer.delay = float(seconds)
            peer.port.set_delay(peer.delay)

    def peer_state(self, name: str) -> dict[str, Any]:
        """The parameters and optimizer state peer `name` holds now."""
        with self.cond:
            port = self._live(name).port
        return kept(port.request("state"))

    # -- the steps -----------------------------------------------------------------------------
    def start(self) -> None:
        """Start the driver thread: step after step until the last, a stop or a failure."""
        with self.cond:
            self._thread = threading.Thread(target=self._drive, name="pipeline-driver", daemon=True)
            self._thread.start()

    def _drive(self) -> None:
        try:
            while (attempt := self._begin()) is not None:
                try:
                    outcome = attempt.run()
                    loss = math.fsum(outcome.losses.values())
                    if not math.isfinite(loss):
                        self._diverge(loss)
                        return
                    states, counted = self._apply(attempt)
                except (Broken, PeerDied):  # a peer died mid-attempt, or while the replicas stepped
                    self._recover()
                    continue
                self._commit(outcome, loss, states, counted)
        except Exception as exc:
            self.fail(exc)

    def _begin(self) -> Attempt | None:
        """The next attempt, once every slot has a live peer; None once the run stops."""
        with self.cond:
            while not self.stopping and self._gaps():
                self.cond.wait()
            if self.stopping:
                return None
            if self.paused:
                self.paused = False
                self.emit(events.run(self.clock(), state="resumed", reason=f"every stage has its {self.lanes} "
                                     f"lanes again: step {self.step} is computed from its start"))
            cfg = self.cfg
            batches = [self.sampler.batch(self.step, mb, cfg.microbatch) for mb in range(cfg.microbatches_per_step)]
            grid = [[(p.name, p.port) for p in row] for row in self.slots]
            self._attempt = Attempt(grid, batches, schedule=cfg.executor.schedule, codec=cfg.compression.codec,
                                    scale=1.0 / (cfg.model.seq_len * cfg.global_batch), step=self.step,
                                    attempt=next(self._attempts), report=self._hop, links=self._links)
            return self._attempt

    def _hop(self, lane: int, stage: int, peer: str, kind: str, nbytes: int, seconds: float, mb: int, link: float) -> None:
        """One answered request as a hop of lane `lane` (the last stage's one request counts as a
        forward), with the seconds the emulated link took to hand on what it returned."""
        self.emit(events.hop(self.clock(), trainer=f"lane{lane}", stage=stage, peer=peer, nbytes=nbytes,
                             direction="backward" if kind == BACKWARD else "forward", seconds=seconds,
                             microbatch=mb, link_seconds=link) | {"op": kind})

    def _apply(self, attempt: Attempt) -> tuple[list[dict[str, Any]], list[int]]:
        """Sum each stage's gradients over its lanes and step every replica with the sum; returns the
        stages' new states and the samples each stage's gradient covers (every microbatch of this
        attempt once: checked by the attempts each peer's sum holds)."""
        totals, counted = [], []
        whole = {attempt.key(mb): len(inputs) for mb, (inputs, _) in enumerate(attempt.batches)}
        for row in attempt.grid:
            total, held = None, {}
            for _, port in row:
                grads, attempts = port.request("gradients")
                if total is None:
                    total = [g.detach().clone() for g in grads]
                else:
                    for t, g in zip(total, grads):
                        t.add_(g)
                for key, samples in attempts.items():
                    held[key] = held.get(key, 0) + samples
            if held != whole:  # a bug, not a fault
                raise RuntimeError(f"a stage's gradient sums hold {sorted(held.items())}, not each microbatch of "
                                   f"this attempt once: {sorted(whole.items())}")
            totals.append(total)
            counted.append(sum(held.values()))
        with self.cond:
            self._applying = True
        for row, total in zip(attempt.grid, totals):
            for _, port in row:
                port.request("optimizer_step", total, self.step)
        return [kept(row[0][1].request("state")) for row in attempt.grid], counted

    def _recover(self) -> None:
        """A broken attempt: every live peer drops its stash and gradient sums, and goes back to the
        committed state if the attempt's optimizer steps had begun."""
        with self.cond:
            live, committed, applying = [p for p in self.peers.values() if p.alive], self._committed, self._applying
            self._attempt, self._applying = None, False
        for peer in live:
            try:
                peer.port.request("drop_stash")
                peer.port.request("clear_gradients")
                if applying:
                    peer.port.request("load_state", committed[peer.stage])
            except PeerDied:  # it died too: its slot waits for add_peer
                pass

    def _commit(self, outcome: Outcome, loss: float, states: list[dict[str, Any]], counted: list[int]) -> None:
        with self.cond:
            self._attempt, self._applying = None, False
            self._committed = states
            self.step += 1
            self.last_loss = loss
            tokens = self.cfg.global_batch * self.cfg.model.seq_len
            self.emit(events.step(self.clock(), step=self.step, loss=loss, samples=self.cfg.global_batch, tokens=tokens)
                      | {"stage_samples": counted, "bubble": bubble(outcome.busy, outcome.seconds),
                         "compute_seconds": outcome.seconds})
            for hook in self.step_hooks:
                hook(self.step)
            if self.step >= self.cfg.steps:
                self.finished.set()
                self.stopping = True
            self.cond.notify_all()

    def _diverge(self, loss: float) -> None:
        with self.cond:
            self.diverged = f"step {self.step}: the loss is {loss}"
            self.emit(events.run(self.clock(), state="diverged", reason=self.diverged))
            self.stopping = True
            self.cond.notify_all()

    def fail(self, exc: BaseException) -> None:  # a bug, not a fault: the run stops loudly
        fail_core(self, exc)

    def stop(self) -> None:
        """Take no further step; the attempt in progress breaks (its requests in flight finish)."""
        with self.cond:
            self.stopping = True
            if self._attempt is not None:
                self._attempt.stop("the run stops")
            self.cond.notify_all()

    def join(self, timeout: float) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def close(self) -> None:
        """Crash every peer still alive (a slow one's wait ends at once) and release where they lived."""
        with self.cond:
            for peer in self.peers.values():
                if peer.alive:
                    peer.port.kill()
        self.host.close()

    def committed(self) -> tuple[RunConfig, list[dict[str, Any]]]:
        """The run's config and every stage's committed parameters and optimizer state."""
        with self.cond:
            return self.cfg, [dict(s) for s in self._committed]

    def consistent(self) -> bool:
        """Every committed step is a whole synchronous step."""
        return True

    def state(self) -> dict[str, Any]:
        """Step, loss, every stage's lanes and live peers, the stages waiting for a replacement."""
        with self.cond:
            bounds = stage_bounds(self.cfg.layer_split)
            stages = [{"stage": s, "layers": list(range(first, first + count)), "lanes": self.lanes,
                       "peers": [p.describe() for p in row if p is not None]}
                      for s, (row, (first, count)) in enumerate(zip(self.slots, bounds))]
            return {"step": self.step, "loss": self.last_loss, "stages": stages,
                    "paused_stages": sorted({s for s, _ in self._gaps()}), "schedule": self.cfg.executor.schedule}
