"""SWARM on the task pool paper's devices in virtual time, for the task pool's comparison: the same plan
(every device of a stage is a SWARM peer of it, "the same allocation as our optimized scheme"),
the same links, the same disconnections, and labkit's SWARM `StepLedger` for what is redone.

A microbatch attempt goes forward through every stage and back down to the lowest stage it must
still accumulate at; each forward hop goes to the live peer of the stage that would finish it
first (what SWARM's router converges to), directly from the previous stage's peer (stage 0's
from the data source, as token ids), and queues there; the backward returns to the peer that ran
the forward. A peer that vanished fails the hops it holds once their deadline passes (the task
pool's timeout rule); a failed forward is retried at another peer, a failed backward ends the
attempt. A lost peer takes the gradients it accumulated this batch with it
(`StepLedger.peer_lost`), and the ledger hands those microbatches out again: forward through
every stage again, the lost stage's slice included.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field

from labkit.sim.ps_world import BatchRun, PsWorld
from labkit.swarm.ledger import StepLedger, Task


@dataclass
class _Attempt:
    task: Task
    peers: dict[int, int] = field(default_factory=dict)  # stage -> peer that ran its forward
    credits: dict[int, str] = field(default_factory=dict)


class _Run:
    def __init__(self, world: PsWorld, drops: dict[int, float]) -> None:
        self.w, self.drops, K = world, drops, len(world.stages)
        self.ledger = StepLedger(K, world.microbatches, world.tokens)
        self.free = {i: 0.0 for st in world.stages for i in st.members}
        self.banned: set[int] = set()
        self.heap: list[tuple[float, int, str, object]] = []
        self.seq, self.now = itertools.count(), 0.0
        self.source = world.stages[0].frontal[0]  # where the data enters, as for the task pool
        self.runs = self.lost = 0

    def push(self, t: float, kind: str, payload: object) -> None:
        heapq.heappush(self.heap, (t, next(self.seq), kind, payload))

    def dead(self, i: int, t: float) -> bool:
        return i in self.drops and self.drops[i] <= t

    def spawn(self, t: float) -> None:
        while (task := self.ledger.next_task()) is not None:
            self.push(t, "hop", (_Attempt(task), 0, "fwd"))

    def hop(self, att: _Attempt, k: int, way: str, t: float) -> None:
        """Send stage k's forward or backward of `att` to a peer; schedule its end or its failure."""
        w, last = self.w, len(self.w.stages) - 1
        prev = att.peers.get(k - 1, self.source) if way == "fwd" else att.peers.get(k + 1, att.peers[last])
        per_token = w.fwd[:, k] if way == "fwd" else w.bwd[:, k]
        size = w.fetch_bytes(k) if way == "fwd" else None  # stage 0 gets token ids from the source
        if way == "fwd":
            live = [i for i in w.stages[k].members if i not in self.banned]
            if not live:
                raise RuntimeError(f"SWARM batch stalled: stage {k} lost every peer")
            peer = min(live, key=lambda i: max(t + w.hop(prev, i, w.tokens, size), self.free[i]) + w.tokens * per_token[i])
            att.peers[k] = peer
            self.runs += w.tokens
        else:
            peer = att.peers[k]
        wire = w.hop(prev, peer, w.tokens, size)
        end = max(t + wire, self.free[peer]) + w.tokens * per_token[peer]
        if self.dead(peer, end):
            expected = wire + w.tokens * per_token[peer]
            self.push(max(t + w.grace + w.slack * expected, self.drops[peer]), "fail", (att, k, way, peer))
        else:
            self.free[peer] = end
            self.push(end, "done", (att, k, way, peer))

    def lose(self, peer: int) -> None:
        if peer not in self.banned:
            self.banned.add(peer)
            self.lost += self.ledger.peer_lost(self.w.names[peer])

    def step(self) -> None:
        t, _, kind, payload = heapq.heappop(self.heap)
        self.now = t
        if kind == "hop":
            self.hop(*payload, t)
            return
        att, k, way, peer = payload
        stages, last = att.task.stages, len(self.w.stages) - 1
        if kind == "fail":
            self.lose(peer)
            if way == "fwd":
                self.lost += self.w.tokens  # the forward in flight died with the peer
                self.push(t, "hop", (att, k, way))
            else:
                self.ledger.finish(att.task, att.credits)
                self.spawn(t)
        elif way == "fwd":
            self.push(t, "hop", (att, k + 1, "fwd") if k < last else (att, k, "bwd"))
        else:
            if k in stages:
                att.credits[k] = self.w.names[peer]
            if k > min(stages):
                self.push(t, "hop", (att, k - 1, "bwd"))
            else:
                self.ledger.finish(att.task, att.credits)
                self.spawn(t)

    def settle(self) -> bool:
        """At the end of the batch the all-reduce finds the vanished peers; True if all is done."""
        for peer in [i for i in self.free if self.dead(i, self.now)]:
            self.lose(peer)
        self.spawn(self.now)
        return self.ledger.ready() and not self.heap


def swarm_batch(world: PsWorld, drops: dict[int, float] | None = None) -> BatchRun:
    """One batch of `world` with SWARM; `drops` maps a device to the second it vanishes."""
    run = _Run(world, drops or {})
    run.spawn(0.0)
    while run.heap or not run.settle():
        run.step()
    total = world.tokens * world.microbatches * len(world.stages)
    return BatchRun(seconds=float(run.now), forward_runs=run.runs, lost=run.lost,
                    repeated_beyond_lost=run.runs - total - run.lost)
