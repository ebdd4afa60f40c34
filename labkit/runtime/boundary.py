"""The step boundary: where SWARM's exactness is enforced and every stage takes its step.

It runs on the coordinator's thread, lock held, once the ledger says every microbatch of the
step is credited at every stage. In six steps:

1. gather  — ask every live peer for its accumulated gradient sum and sample count;
2. check   — each peer's count equals what the ledger credits it, each stage sums the global batch;
3. decide  — the sync schedule says all-reduce, a DiLoCo inner step, an outer step, a switch;
4. reduce  — sum the stage's gradients (or average DiLoCo's pseudo-gradients by samples);
5. apply   — every peer of the stage applies the same step;
6. commit  — record each stage's state, re-cut the layers if asked, advance the ledger, emit events
   (a step whose loss or new parameters are not finite is not committed: the run has diverged).

A peer that fails while its sums are gathered is evicted and the boundary is abandoned: its
samples are recomputed by the survivors and the boundary runs again. A peer that fails while the
step is applied is evicted and the survivors go on. Requests to the peers of all stages go out
at once (they may live in other processes), and the new states are asked for right behind the
step itself, each peer's queue keeping the order. The step event says where the boundary's time went
(`BoundaryTimes`): each request's wall seconds and its slowest peer's queue + compute.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

import torch

from labkit import events
from labkit.config import SyncConfig
from labkit.model.assembly import stage_module
from labkit.model.partition import stage_bounds
from labkit.runtime.ports import PeerHandle
from labkit.runtime.request_queue import timing
from labkit.runtime.resize import recut_states
from labkit.swarm.sync import sum_over_peers, weighted_average

if TYPE_CHECKING:
    from labkit.runtime.coordinator import Coordinator

Gathered = list[tuple[list[PeerHandle], list[tuple[list[Any], int]]]]  # per stage: peers, (grads, samples)


class BoundaryTimes:
    """Where one boundary's time goes: wall seconds the boundary waited on each request sent to
    the peers (named by its method; the states, asked for behind the step, count from when the
    step's answers were in) and of the coordinator's own reduction, and per request the slowest peer's queue
    + compute (the rest is transport). Reported with the step event as its "boundary"."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.seconds: dict[str, float] = {}
        self.peer_seconds: dict[str, float] = {}

    def add(self, name: str, start: float, futures: Sequence[Future] = ()) -> None:
        """Count the seconds since `start` under `name`, and the slowest of `futures`' peers."""
        self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start
        served = [t["queue"] + t["compute"] for t in map(timing, futures) if t]  # a failed request has none
        if served:
            self.peer_seconds[name] = self.peer_seconds.get(name, 0.0) + max(served)

    def report(self) -> dict[str, Any]:
        return {"seconds": self.seconds, "peer_seconds": self.peer_seconds, "total": time.perf_counter() - self.start}


def step_boundary(c: Coordinator) -> None:
    """Take one optimizer step of the whole run (see the module docstring)."""
    step, times = c.ledger.step, BoundaryTimes()
    # 1-2. gather every stage's gradient sums and check them against the ledger
    gathered = gather_gradients(c, times)
    if gathered is None:
        return  # a peer was evicted: its samples are recomputed, then the boundary runs again
    # 3. decide what this boundary does
    decision = c.schedule.boundary()
    # 4-5. reduce and apply
    states: Sent | None = None  # the new states, asked for as soon as the last request is sent
    if decision.allreduce:
        start = time.perf_counter()
        sums = [sum_over_peers([g for g, _ in taken]) for _, taken in gathered]
        times.add("reduce", start)
        applying = send("optimizer_step", [(p, (sums[stage], step)) for stage, (peers, _) in enumerate(gathered)
                                              for p in peers])
        if decision.switch_to is None:
            states = request_states(c)  # queued behind the step on each peer: one round trip for both
        collect(c, applying, times)
        for stage, (peers, _) in enumerate(gathered):
            _emit_sync(c, step, stage, "allreduce", len(peers), sums[stage])
    else:
        gather(c, "local_step", [(p, (g, n, step)) for peers, taken in gathered for p, (g, n) in zip(peers, taken)
                                 if n > 0], times)
        if decision.outer:
            for stage in range(c.cfg.stages):
                _outer_step(c, step, stage, c.members.live(stage), times)
    if decision.switch_to is not None:
        for stage in range(c.cfg.stages):
            _switch(c, c.members.live(stage), decision.switch_to, times)
    # 6. commit
    _commit(c, step, [sum(n for _, n in taken) for _, taken in gathered], times, states or request_states(c))


class Sent:
    """Requests of one method sent to peers, not yet answered: (peer, future) pairs."""

    def __init__(self, method: str, futures: list[tuple[PeerHandle, Future]], start: float) -> None:
        self.method, self.futures, self.start = method, futures, start


def send(method: str, calls: list[tuple[PeerHandle, tuple]]) -> Sent:
    """Call `method` on each peer with its arguments, all at once, without waiting."""
    start = time.perf_counter()
    return Sent(method, [(p, p.call(method, *args)) for p, args in calls], start)


def collect(c: Coordinator, sent: Sent, times: BoundaryTimes, since: float | None = None) -> list[Any]:
    """The answers of `sent`; evict a peer that failed or exceeded `peer_timeout`, leaving None in
    its place; counts the seconds from `since` (default: when the requests were sent) in `times`."""
    results = []
    for p, f in sent.futures:
        try:
            results.append(f.result(timeout=c.cfg.peer_timeout))
        except Exception as exc:
            c.members.evict(p.name, f"{sent.method} failed at the step boundary: {type(exc).__name__}: {exc}")
            results.append(None)
    times.add(sent.method, sent.start if since is None else since, [f for _, f in sent.futures])
    return results


def gather(c: Coordinator, method: str, calls: list[tuple[PeerHandle, tuple]], times: BoundaryTimes) -> list[Any]:
    """Call `method` on each peer and wait for every answer (see `collect`)."""
    return collect(c, send(method, calls), times)


def gather_gradients(c: Coordinator, times: BoundaryTimes) -> Gathered | None:
    """Every stage's live peers and their gradient sums, checked against the ledger's credits;
    None if a peer had to be evicted or drop its gradients. A peer holding more samples than
    credited drops its gradients (its samples are recomputed) when a trainer died mid-microbatch
    since the last step (its request may have accumulated with no credit ever coming); otherwise
    the accounting broke, and the run stops loudly."""
    peers = [c.members.live(stage) for stage in range(c.cfg.stages)]
    taken = gather(c, "gradients", [(p, ()) for stage_peers in peers for p in stage_peers], times)
    if any(t is None for t in taken):
        return None
    gathered, orphaned, rest = [], [], iter(taken)
    for stage, stage_peers in enumerate(peers):
        stage_taken = [next(rest) for _ in stage_peers]
        credited = c.ledger.samples(stage)
        for p, (_, samples) in zip(stage_peers, stage_taken):
            if samples > credited.get(p.name, 0) and c.orphans:
                orphaned.append(p.name)
            elif samples != credited.get(p.name, 0):
                raise RuntimeError(f"accounting broke: {p.name} accumulated {samples} samples, "
                                   f"ledger credits {credited.get(p.name, 0)}")
        gathered.append((stage_peers, stage_taken))
    for name in orphaned:
        c.members.drop_gradients(name, "holds gradients of a microbatch whose trainer died")
    if orphaned:
        return None
    c.orphans = 0
    for stage, (_, stage_taken) in enumerate(gathered):
        total = sum(n for _, n in stage_taken)
        if total != c.cfg.global_batch:
            raise RuntimeError(f"stage {stage} summed {total} samples, not the global batch {c.cfg.global_batch}")
    return gathered


def _outer_step(c: Coordinator, step: int, stage: int, peers: list[PeerHandle], times: BoundaryTimes) -> None:
    """DiLoCo: average the peers' pseudo-gradients, weighted by samples, and step every peer."""
    pairs = [(p, r) for p, r in zip(peers, gather(c, "pseudo_gradient", [(p, ()) for p in peers], times))
             if r is not None]
    start = time.perf_counter()
    delta = weighted_average({p.name: d for p, (d, _) in pairs}, {p.name: n for p, (_, n) in pairs})
    times.add("average", start)
    gather(c, "outer_step", [(p, (delta,)) for p, _ in pairs], times)
    _emit_sync(c, step, stage, "diloco", len(pairs), delta)


def _switch(c: Coordinator, peers: list[PeerHandle], sync: SyncConfig, times: BoundaryTimes) -> None:
    """Change every peer of a stage to `sync`'s mode (DiLoCo starts from the current parameters)."""
    if sync.mode == "diloco":
        gather(c, "enter_diloco", [(p, (sync,)) for p in peers], times)
    else:
        gather(c, "leave_diloco", [(p, ()) for p in peers], times)


def _emit_sync(c: Coordinator, step: int, stage: int, kind: str, peers: int, tensors: list[Any]) -> None:
    """Data-parallel traffic of one sync: each peer sends its tensors and receives the average."""
    size = sum(t.numel() * t.element_size() for t in tensors)
    c.emit(events.sync(c.clock(), step=step + 1, stage=stage, kind=kind, peers=peers, nbytes=2 * size * peers))


def _commit(c: Coordinator, step: int, stage_samples: list[int], times: BoundaryTimes, asked: Sent) -> None:
    """Record the stages' new states (`asked` of the peers), re-cut if asked, advance the ledger,
    emit, evaluate; a step whose loss or new parameters are not finite is not committed: the run
    has diverged."""
    loss = c.ledger.loss()
    states = _new_states(c, asked, times) if math.isfinite(loss) else {}
    divergence = _divergence(step, loss, states)
    if divergence is not None:
        _diverged(c, step, divergence)
        return
    for stage, state in states.items():
        c.snapshots[stage] = state
    if c.new_split is not None:
        _apply_split(c, c.new_split)
    c.last_loss = loss
    c.ledger.advance()
    now = c.clock()
    c.emit(events.step(now, step=step + 1, loss=c.last_loss, samples=c.cfg.global_batch,
                       tokens=c.cfg.global_batch * c.cfg.model.seq_len) | {"stage_samples": stage_samples,
                                                                           "boundary": times.report()})
    for p in sorted(c.members.peers.values(), key=lambda p: p.name):
        c.emit(events.peer(now, peer=p.name, stage=p.stage, state="alive", queue=p.queue_length))
    for hook in c.step_hooks:
        hook(step + 1)
    done = step + 1 >= c.cfg.steps
    if done or (c.cfg.eval_every and (step + 1) % c.cfg.eval_every == 0):
        c.syncing = True  # no task is handed out while the lock is released for evaluation
        c.cond.release()
        try:
            c.evaluate()
        finally:
            c.cond.acquire()
            c.syncing = False
    if done:
        c.finished.set()
        c.stop()


def request_states(c: Coordinator) -> Sent:
    """Ask each stage's first live peer for its state (after dropping every peer's stash of
    abandoned attempts); the answers are the stages' new states (`_new_states`)."""
    for p in c.members.peers.values():
        p.call("drop_stash")  # activations of abandoned attempts
    firsts = [stage_peers[0] for stage_peers in map(c.members.live, range(c.cfg.stages)) if stage_peers]
    return send("state", [(p, ()) for p in firsts])


def _new_states(c: Coordinator, asked: Sent, times: BoundaryTimes) -> dict[int, dict[str, Any]]:
    """Each stage's state after the step, from the first live peer it was asked of; a stage whose
    peer failed meanwhile asks the next live one, and a stage without one keeps the state
    committed before."""
    answers = collect(c, asked, times, since=time.perf_counter())  # the wait beyond the step's own requests
    states = {p.stage: state for (p, _), state in zip(asked.futures, answers) if state is not None}
    for stage in set(range(c.cfg.stages)) - set(states):
        for p in c.members.live(stage):
            state, = gather(c, "state", [(p, ())], times)
            if state is not None:
                states[stage] = state
                break
    return states


def _divergence(step: int, loss: float, states: dict[int, dict[str, Any]]) -> str | None:
    """Why step `step + 1` diverged (its training loss, or a stage's new parameters, not finite);
    None if it did not."""
    if not math.isfinite(loss):
        return f"the training loss of step {step + 1} is {loss}"
    for stage, state in states.items():
        if not all(torch.isfinite(t).all() for t in state["params"].values() if _is_float(t)):
            return f"step {step + 1} left stage {stage}'s parameters not finite (its training loss was {loss:.4g})"
    return None


def _is_float(value: Any) -> bool:
    """A floating-point tensor (a state dict may hold other values)."""
    return isinstance(value, torch.Tensor) and value.is_floating_point()


def _diverged(c: Coordinator, step: int, why: str) -> None:
    """Stop the run; the states committed at the last boundary stay the run's state (its final
    checkpoint): the step's new states are never recorded."""
    c.diverged = f"{why}; the run keeps the state of step {step}"
    c.emit(events.run(c.clock(), state="diverged", reason=c.diverged))
    c.stop()


def _apply_split(c: Coordinator, split: tuple[int, ...]) -> None:
    """set_layer_split at the boundary (nothing in flight): re-slice the states, rebuild every peer."""
    c.new_split = None
    c.cfg = c.cfg.replace(layer_split=split)
    c.snapshots = recut_states(c.snapshots, lambda stage, params: stage_module(c.cfg, stage, params), c.cfg.stages)
    c.members.rebuild(stage_bounds(split))
