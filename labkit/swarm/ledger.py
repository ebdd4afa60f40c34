"""Synchronous SWARM semantics (Appendix E) as pure bookkeeping: who accumulated which samples.

An optimizer step covers exactly `microbatches` microbatches (the global batch). A microbatch is
*credited* at a stage when a live peer of that stage has accumulated its gradient; the credit
names the attempt (`Task.key`) whose gradient it is. The step is ready when every microbatch is
credited at every stage. When a peer dies, the credits it held are withdrawn and those
microbatches are handed out again, accumulating only at the stages that lost them, so each
stage's gradient always sums exactly the global batch: none lost, none twice.

Peers accumulate by attempt and report which attempts their sums hold; `reconcile` is the one
rule that compares those reports with the credits (keep, drop or broken), whatever the fault.
No threads, no torch: the runtimes guard a ledger with their own lock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

AttemptKey = tuple[int, int, int]  # (step, microbatch, attempt): what a peer's gradient sum is keyed by
Attempts = Mapping[AttemptKey, int]  # attempt -> samples accumulated (or credited) under it


@dataclass(frozen=True)
class Task:
    """One attempt at one microbatch: route it through every stage, accumulate at `stages`."""

    step: int
    microbatch: int
    stages: frozenset[int]  # stages at which this attempt must accumulate gradients
    attempt: int  # unique id of this attempt

    @property
    def key(self) -> AttemptKey:
        """What peers stash activations and accumulate gradients under, and the ledger credits."""
        return self.step, self.microbatch, self.attempt


@dataclass(frozen=True)
class Verdict:
    """What one peer's gradient sum is worth at a step boundary (see `reconcile`)."""

    action: Literal["keep", "drop", "broken"]
    extra: tuple[AttemptKey, ...] = ()  # attempts (or samples of them) in its sum the ledger never credited it
    missing: tuple[AttemptKey, ...] = ()  # attempts credited to it that its sum lacks
    reported: bool = True  # False: it reported nothing (dead, or no answer)

    @property
    def why(self) -> str:
        if self.action == "broken":
            return f"its sum lacks credited attempts {list(self.missing)}"
        if not self.reported:
            return "it reported no gradient sum"
        return f"its sum holds attempts the ledger never credited it: {list(self.extra)}"


def reconcile(credited: Mapping[str, Attempts], reported: Mapping[str, Attempts | None]) -> dict[str, Verdict]:
    """The one rule for a peer's accumulated gradients, per peer named in either mapping.

    keep   — its sum holds exactly the attempts the ledger credits it, sample for sample;
    drop   — it holds more (an attempt whose trainer died or gave up on it after a timeout, one
             the ledger re-issued, one of an earlier step, or one twice), or it reported nothing
             (it died, or failed to answer): its credits are withdrawn and recomputed, and its
             sum is cleared (or the peer evicted, if it cannot answer);
    broken — a credited attempt is not (fully) in its sum: no fault explains it, the run stops.
    A peer absent from `reported` reports nothing; one absent from `credited` is credited nothing.
    """
    verdicts = {}
    for peer in sorted(set(credited) | set(reported)):
        owed, held = credited.get(peer, {}), reported.get(peer)
        if held is None:
            verdicts[peer] = Verdict("drop", reported=False)
            continue
        missing = tuple(sorted(k for k, n in owed.items() if held.get(k, 0) < n))
        extra = tuple(sorted(k for k, n in held.items() if n > owed.get(k, 0)))
        verdicts[peer] = Verdict("broken" if missing else "drop" if extra else "keep", extra, missing)
    return verdicts


@dataclass
class _Microbatch:
    credits: dict[int, tuple[str, AttemptKey]] = field(default_factory=dict)  # stage -> (peer, attempt) it holds
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
                mb.credits[stage] = peer, task.key
        last = self.num_stages - 1
        if loss is not None and last in credits and mb.credits.get(last) == (credits[last], task.key):
            mb.loss = loss  # the loss belongs with the last stage's (live) credit
        mb.in_flight = False

    def peer_lost(self, peer: str) -> int:
        """Withdraw every credit held by `peer` (`reconcile`'s drop for a peer that can report
        nothing, applied the moment its death is known), and refuse its later ones; returns how
        many samples must be recomputed."""
        self._dead.add(peer)
        return self.withdraw(peer)

    def withdraw(self, peer: str) -> int:
        """Withdraw every credit held by `peer` (it dropped its gradients but serves on); returns
        how many samples must be recomputed."""
        lost = 0
        for mb in self._mbs:
            for stage in [s for s, (p, _) in mb.credits.items() if p == peer]:
                del mb.credits[stage]
                lost += self.microbatch_size
        return lost

    def ready(self) -> bool:
        """True when every microbatch is credited at every stage and none is in flight."""
        return all(len(mb.credits) == self.num_stages and not mb.in_flight for mb in self._mbs)

    def credited(self, stage: int) -> dict[str, dict[AttemptKey, int]]:
        """The attempts credited to each peer at `stage` in the current step, with their samples:
        what each peer's gradient sum must hold (`reconcile`)."""
        out: dict[str, dict[AttemptKey, int]] = {}
        for mb in self._mbs:
            if stage in mb.credits:
                peer, key = mb.credits[stage]
                out.setdefault(peer, {})[key] = self.microbatch_size
        return out

    def samples(self, stage: int) -> dict[str, int]:
        """Samples credited to each peer at `stage` in the current step."""
        return {peer: sum(attempts.values()) for peer, attempts in self.credited(stage).items()}

    def loss(self) -> float:
        """The step's loss: the sum of the microbatches' contributions (each already scaled)."""
        return float(sum(mb.loss or 0.0 for mb in self._mbs))

    def rewind(self, step: int) -> None:
        """Start step `step` afresh (a rollback): its credits are gone, attempt numbers go on
        (a late gradient of an abandoned attempt can never pass for a new one)."""
        self.step = step
        self._reset()

    def advance(self) -> None:
        """Start the next optimizer step."""
        self.step += 1
        self._reset()
