"""Synchronous SWARM semantics (Appendix E) as pure bookkeeping: who accumulated which samples.

An optimizer step covers exactly `microbatches` microbatches (the global batch). A microbatch is
*credited* at a stage when a live peer of that stage has accumulated its gradient. The step is
ready when every microbatch is credited at every stage. When a peer dies, the credits it held
are withdrawn and those microbatches are handed out again, accumulating only at the stages that
lost them, so each stage's gradient always sums exactly the global batch: none lost, none twice.
No threads, no torch: the runtimes guard a ledger with their own lock.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Task:
    """One attempt at one microbatch: route it through every stage, accumulate at `stages`."""

    step: int
    microbatch: int
    stages: frozenset[int]  # stages at which this attempt must accumulate gradients
    attempt: int  # unique id of this attempt (peers key stashed activations by it)


@dataclass
class _Microbatch:
    credits: dict[int, str] = field(default_factory=dict)  # stage -> peer holding its gradient
    in_flight: bool = False
    loss: float | None = None  # loss contribution, recorded when the last stage is credited


class StepLedger:
    """Tracks the microbatches of the current optimizer step across stages and peers."""

    def __init__(self, num_stages: int, microbatches: int, microbatch_size: int, step: int = 0) -> None:
        if num_stages < 1 or microbatches < 1 or microbatch_size < 1:
            raise ValueError("num_stages, microbatches and microbatch_size must be >= 1")
        self.num_stages = num_stages
        self.microbatches = microbatches
        self.microbatch_size = microbatch_size
        self.step = step
        self._attempts = 0
        self._dead: set[str] = set()
        self._reset()

    def _reset(self) -> None:
        self._mbs = [_Microbatch() for _ in range(self.microbatches)]

    def _missing(self, mb: _Microbatch) -> frozenset[int]:
        return frozenset(s for s in range(self.num_stages) if s not in mb.credits)

    def next_task(self) -> Task | None:
        """The next microbatch that still lacks a stage and is not being worked on, or None."""
        for index, mb in enumerate(self._mbs):
            missing = self._missing(mb)
            if missing and not mb.in_flight:
                mb.in_flight = True
                self._attempts += 1
                return Task(self.step, index, missing, self._attempts)
        return None

    def finish(self, task: Task, credits: dict[int, str], loss: float | None = None) -> None:
        """Record what an attempt achieved (all or part of `task.stages`) and release it.

        Credits to peers that died meanwhile are ignored: their gradients died with them.
        """
        if task.step != self.step:
            raise ValueError(f"task of step {task.step} finished during step {self.step}")
        mb = self._mbs[task.microbatch]
        for stage, peer in credits.items():
            if stage not in task.stages:
                raise ValueError(f"attempt {task.attempt} credited stage {stage}, not one of {sorted(task.stages)}")
            if peer not in self._dead:
                mb.credits[stage] = peer
        last = self.num_stages - 1
        if loss is not None and last in credits and mb.credits.get(last) == credits[last]:
            mb.loss = loss  # the loss belongs with the last stage's (live) credit
        mb.in_flight = False

    def peer_lost(self, peer: str) -> int:
        """Withdraw every credit held by `peer`, and refuse its later ones; returns how many
        samples must be recomputed."""
        self._dead.add(peer)
        return self.withdraw(peer)

    def withdraw(self, peer: str) -> int:
        """Withdraw every credit held by `peer` (it dropped its gradients but serves on); returns
        how many samples must be recomputed."""
        lost = 0
        for mb in self._mbs:
            for stage in [s for s, p in mb.credits.items() if p == peer]:
                del mb.credits[stage]
                lost += self.microbatch_size
        return lost

    def ready(self) -> bool:
        """True when every microbatch is credited at every stage and none is in flight."""
        return all(len(mb.credits) == self.num_stages and not mb.in_flight for mb in self._mbs)

    def samples(self, stage: int) -> dict[str, int]:
        """Samples credited to each peer at `stage` in the current step."""
        out: dict[str, int] = {}
        for mb in self._mbs:
            peer = mb.credits.get(stage)
            if peer is not None:
                out[peer] = out.get(peer, 0) + self.microbatch_size
        return out

    def loss(self) -> float:
        """The step's loss: the sum of the microbatches' contributions (each already scaled)."""
        return float(sum(mb.loss or 0.0 for mb in self._mbs))

    def advance(self) -> None:
        """Start the next optimizer step."""
        self.step += 1
        self._reset()
