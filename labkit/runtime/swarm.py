"""The in-process SWARM: peers, trainers, the step ledger and the step-boundary all-reduce.

Every peer and trainer is a thread of this process. The swarm is what the run handle drives; it
owns the registry of live peers (the in-process stand-in for the DHT), the `StepLedger` that keeps
every step at exactly the global batch, and the step boundary: when the ledger is ready, each
stage sums its live peers' accumulated gradients and every peer of the stage applies the same
optimizer step.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import torch

from labkit import events
from labkit.config import RunConfig, SyncConfig
from labkit.data import WindowSampler, load_corpus
from labkit.model import stage_bounds
from labkit.runtime.eventlog import EventLog
from labkit.runtime.evaluate import Evaluator
from labkit.runtime.membership import Membership, initial_states
from labkit.runtime.peer import StagePeer
from labkit.runtime.resize import recut_states
from labkit.runtime.trainer import Trainer
from labkit.swarm.ledger import StepLedger, Task
from labkit.swarm.sync import SyncSchedule, sample_weights
from labkit.wire import get_codec


class InProcessSwarm(Membership):
    """Peers and trainers as threads of this process, coordinated under one lock."""

    def __init__(self, cfg: RunConfig, log: EventLog, resume: dict[str, Any] | None = None) -> None:
        self.cfg, self.log = cfg, log
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        self.num_stages = cfg.stages
        self.bounds = stage_bounds(cfg.layer_split)
        corpus = load_corpus(cfg.data)
        self.corpus_description = corpus.describe()
        self.sampler = WindowSampler(corpus.train, cfg.model.seq_len, cfg.seed)
        self._val = corpus.val
        self.evaluator = Evaluator(cfg, corpus.val, self.bounds)
        self._new_split: tuple[int, ...] | None = None
        self.loss_scale = 1.0 / (cfg.model.seq_len * cfg.global_batch)
        self.codec = cfg.compression.codec  # wire codec of activations and their gradients; switchable
        get_codec(self.codec)  # an unavailable codec fails here, with its name, before any peer starts
        start_step = resume["step"] if resume else 0
        self.ledger = StepLedger(cfg.stages, cfg.microbatches_per_step, cfg.microbatch, step=start_step)
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._t0 = time.perf_counter()
        self._peers: dict[str, StagePeer] = {}
        self._epochs: dict[str, int] = {}
        self._counter = [0] * cfg.stages
        self._paused: set[int] = set()
        self._stopping = False
        self._syncing = False
        self.finished = threading.Event()
        self._stopped = threading.Event()
        self.last_loss: float | None = None
        self.error: Exception | None = None
        self.step_hooks: list[Callable[[int], None]] = []  # called after each step, lock held
        self.schedule = SyncSchedule(cfg.sync)
        if resume:
            self.snapshots = [dict(s) for s in resume["stages"]]
        else:
            self.snapshots = initial_states(cfg)
        for stage, count in enumerate(cfg.peers_per_stage):
            for _ in range(count):
                name = self._spawn(stage, self.snapshots[stage])
                if cfg.sync.mode == "diloco":
                    self._peers[name].call("ensure_diloco", cfg.sync).result()
        self.trainers = self._make_trainers()

    def _make_trainers(self) -> list[Trainer]:
        """The trainers (threads here; the Dask backend starts them on workers)."""
        return [Trainer(f"t{i}", self) for i in range(self.cfg.trainers)]

    # -- time and events ---------------------------------------------------------------------
    def clock(self) -> float:
        """Seconds since the swarm started."""
        return time.perf_counter() - self._t0

    def emit(self, event: events.Event) -> None:
        self.log.emit(event)

    def start(self) -> None:
        """Start the trainers (peers start on construction)."""
        self.emit(events.run(self.clock(), state="started", reason=self.corpus_description))
        self.evaluate()
        for trainer in self.trainers:
            trainer.start()
        if self.cfg.rebalance_period:
            threading.Thread(target=self._rebalance_loop, name="rebalancer", daemon=True).start()

    def fail(self, exc: BaseException) -> None:
        """End the run on an unexpected error, with the error in a `run` `failed` event."""
        with self._lock:
            if self.error is None:
                self.error = exc
                self.emit(events.run(self.clock(), state="failed", reason=f"{type(exc).__name__}: {exc}"))
            self._stopping = True
            self._stopped.set()
            self.finished.set()
            self._cond.notify_all()

    def stage_empty(self, stage: int) -> None:
        """A trainer found no live peer for `stage`: pause until one is added."""
        with self._lock:
            if not self.live(stage) and stage not in self._paused:
                self._paused.add(stage)
                self.emit(events.run(self.clock(), state="paused", reason=f"stage {stage} has no live peer; add_peer({stage}) resumes the run"))

    def stop(self) -> None:
        with self._lock:
            self._stopping = True
            self._stopped.set()
            self._cond.notify_all()

    @property
    def paused_stages(self) -> set[int]:
        with self._lock:
            return set(self._paused)

    # -- the step ledger ---------------------------------------------------------------------
    def next_task(self) -> Task | None:
        """Block until there is a microbatch to work on; None once the run is over."""
        with self._cond:
            while True:
                if self._stopping:
                    return None
                if not self._paused and not self._syncing:
                    task = self.ledger.next_task()
                    if task is not None:
                        return task
                    if self.ledger.ready():
                        try:
                            self._step_boundary()
                        except Exception as exc:  # a broken invariant ends the run loudly
                            self.fail(exc)
                        continue
                self._cond.wait(timeout=0.5)

    def finish(self, task: Task, credits: dict[int, str], loss: float | None) -> None:
        with self._cond:
            self.ledger.finish(task, credits, loss)
            self._cond.notify_all()

    def _step_boundary(self) -> None:
        """Each stage syncs its live peers (all-reduce, or a DiLoCo inner/outer step); then events.

        First every stage's gradients are gathered and checked; a peer that fails or times out
        there is evicted and the boundary waits for its samples to be recomputed. Then each stage
        steps; a peer failing now is evicted and the stage goes on with the survivors. Requests to
        the peers of all stages go out at once (they may be in other processes)."""
        step = self.ledger.step
        gathered = self._collect()
        if gathered is None:
            return
        decision = self.schedule.boundary()
        if decision.allreduce:
            sums = [[torch.stack(parts).sum(0) for parts in zip(*(g for g, _ in taken))] for _, taken in gathered]  # over peers
            self._gather("optimizer_step", [(p, (sums[stage], step)) for stage, (peers, _) in enumerate(gathered) for p in peers])
            for stage, (peers, _) in enumerate(gathered):
                self._dp_bytes(step, stage, "allreduce", peers, sums[stage])
        else:
            self._gather("local_step", [(p, (g, n, step)) for peers, taken in gathered for p, (g, n) in zip(peers, taken) if n > 0])
            if decision.outer:
                for stage in range(self.num_stages):
                    self._outer_step(step, stage, self.live(stage))
        if decision.switch_to is not None:
            for stage in range(self.num_stages):
                self._switch(self.live(stage), decision.switch_to)
        firsts = [self.live(stage)[:1] for stage in range(self.num_stages)]
        for p in self._peers.values():
            p.call("drop_stash")
        states = iter(self._gather("state", [(first[0], ()) for first in firsts if first]))
        for stage, first in enumerate(firsts):
            state = next(states) if first else None
            if state is not None:
                self.snapshots[stage] = state
        if self._new_split is not None:
            self._apply_split(self._new_split)
        self.last_loss = self.ledger.loss()
        self.ledger.advance()
        now = self.clock()
        self.emit(events.step(now, step=step + 1, loss=self.last_loss, samples=self.cfg.global_batch,
                              tokens=self.cfg.global_batch * self.cfg.model.seq_len)
                  | {"stage_samples": [sum(n for _, n in taken) for _, taken in gathered]})
        for p in sorted(self._peers.values(), key=lambda p: p.name):
            self.emit(events.peer(now, peer=p.name, stage=p.stage, state="alive", queue=p.queue_length))
        for hook in self.step_hooks:
            hook(step + 1)
        done = step + 1 >= self.cfg.steps
        if done or (self.cfg.eval_every and (step + 1) % self.cfg.eval_every == 0):
            self._syncing = True
            self._cond.release()
            try:
                self.evaluate()
            finally:
                self._cond.acquire()
                self._syncing = False
        if done:
            self._stopping = True
            self._stopped.set()
            self.finished.set()
        self._cond.notify_all()

    def _gather(self, method: str, calls: list[tuple[StagePeer, tuple]]) -> list[Any]:
        """Call `method` with each peer's arguments; evict a peer that fails or exceeds
        `peer_timeout`, leaving None in its place."""
        futures = [(p, p.call(method, *args)) for p, args in calls]
        results = []
        for p, f in futures:
            try:
                results.append(f.result(timeout=self.cfg.peer_timeout))
            except Exception as exc:
                self._evict(p.name, f"{method} failed at the step boundary: {type(exc).__name__}: {exc}")
                results.append(None)
        return results

    def _collect(self) -> list[tuple[list[StagePeer], list[tuple[list[torch.Tensor], int]]]] | None:
        """Every stage's live peers and their gradient sums, checked against the ledger's credits;
        None if a peer had to be evicted (its samples are then recomputed before the boundary is
        tried again)."""
        peers = [self.live(stage) for stage in range(self.num_stages)]
        taken = self._gather("gradients", [(p, ()) for stage_peers in peers for p in stage_peers])
        if any(t is None for t in taken):
            return None
        gathered, rest = [], iter(taken)
        for stage, stage_peers in enumerate(peers):
            stage_taken = [next(rest) for _ in stage_peers]
            credited = self.ledger.samples(stage)
            for p, (_, samples) in zip(stage_peers, stage_taken):
                if samples != credited.get(p.name, 0):
                    raise RuntimeError(f"accounting broke: {p.name} accumulated {samples} samples, ledger credits {credited.get(p.name, 0)}")
            total = sum(n for _, n in stage_taken)
            if total != self.cfg.global_batch:
                raise RuntimeError(f"stage {stage} summed {total} samples, not the global batch {self.cfg.global_batch}")
            gathered.append((stage_peers, stage_taken))
        return gathered

    def _outer_step(self, step: int, stage: int, peers: list[StagePeer]) -> None:
        """DiLoCo: average the peers' pseudo-gradients, weighted by samples, and step every peer."""
        pairs = [(p, r) for p, r in zip(peers, self._gather("pseudo_gradient", [(p, ()) for p in peers])) if r is not None]
        weights = sample_weights({p.name: n for p, (_, n) in pairs})
        delta = [sum(weights[p.name] * d[i] for p, (d, _) in pairs) for i in range(len(pairs[0][1][0]))]
        self._gather("outer_step", [(p, (delta,)) for p, _ in pairs])
        self._dp_bytes(step, stage, "diloco", [p for p, _ in pairs], delta)

    def _switch(self, peers: list[StagePeer], sync: SyncConfig) -> None:
        """Change every peer of a stage to `sync`'s mode (DiLoCo starts from the current parameters)."""
        if sync.mode == "diloco":
            self._gather("enter_diloco", [(p, (sync,)) for p in peers])
        else:
            self._gather("leave_diloco", [(p, ()) for p in peers])

    def _dp_bytes(self, step: int, stage: int, kind: str, peers: list[StagePeer], tensors: list[torch.Tensor]) -> None:
        """Data-parallel traffic of one sync: each peer sends its tensors and receives the average."""
        size = sum(t.numel() * t.element_size() for t in tensors)
        self.emit(events.sync(self.clock(), step=step + 1, stage=stage, kind=kind, peers=len(peers), nbytes=2 * size * len(peers)))

    def set_layer_split(self, split: tuple[int, ...]) -> None:
        """Re-cut the model into `split` blocks per stage at the next step boundary."""
        cfg = self.cfg.replace(layer_split=tuple(split))  # validates: ConfigError names the field
        with self._lock:
            diloco = self.schedule.cfg.mode != "allreduce" or self.schedule.pending is not None
            if diloco or cfg.delayed_updates or cfg.model.share_layers:
                raise ValueError("set_layer_split is not allowed with DiLoCo (in force or requested), delayed updates "
                                 "or shared layers: it needs one optimizer state per parameter, identical on every peer")
            self._new_split = cfg.layer_split
            self.emit(events.setting(self.clock(), name="layer_split", value=list(cfg.layer_split)))

    def _apply_split(self, split: tuple[int, ...]) -> None:
        """Boundary work of set_layer_split (lock held, nothing in flight): rebuild every peer."""
        self._new_split = None
        self.cfg = self.cfg.replace(layer_split=split)
        self.bounds = stage_bounds(split)
        self.snapshots = recut_states(self.snapshots, self._build, self.num_stages)
        self.evaluator = Evaluator(self.cfg, self._val, self.bounds)
        for name, old in list(self._peers.items()):
            old.close()
            self._peers[name] = self._make_peer(name, old.stage, self.snapshots[old.stage], delay=old.delay)

    def set_compression(self, codec: str) -> None:
        """Use `codec` for every hop from now on (a microbatch in flight may mix codecs; each
        tensor carries the name of the codec that encoded it)."""
        get_codec(codec)
        with self._lock:
            self.codec = codec
            self.emit(events.setting(self.clock(), name="codec", value=codec))

    def set_sync(self, sync: SyncConfig) -> None:
        """Switch between all-reduce and DiLoCo at the next boundary where the current mode can stop."""
        with self._lock:
            self.schedule.request(sync)
            self.emit(events.setting(self.clock(), name="sync", value=sync.mode))

    def evaluate(self) -> float:
        """Validation loss of the parameters committed at the last step boundary."""
        loss = self.evaluator.loss([s.get("global_params", s["params"]) for s in self.snapshots])
        self.emit(events.evaluation(self.clock(), step=self.ledger.step, val_loss=loss))
        return loss

    def join(self, timeout: float | None = None) -> None:
        """Wait for the trainers to end, then stop the peers."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for trainer in self.trainers:
            trainer.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        for p in list(self._peers.values()):
            p.close()
