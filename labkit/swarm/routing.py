"""Stochastic wiring: SWARM's Interleaved Weighted Round-Robin router (Algorithm 1).

Pure logic: no threads, no sockets, no torch. The in-process runtime, the Dask runtime and the
simulator all route through the same numba kernels (`labkit.kernels.iwrr`); `Router` keeps the
per-peer state in arrays and names peers, so a routing figure from the simulator describes the
real system.

Each peer serves one stage. Per peer the router keeps an exponential moving average (EMA) of its
response time and a priority. A new peer's EMA is a prior (its stage's mean); with `debias` its
first answer replaces the prior and later ones fold in as a bias-corrected average (as Adam corrects
its moments), so a router learns a link in one answer instead of tens. `choose(stage)` returns the
live peer of the stage with the smallest priority and charges it its EMA ("pick and charge"), so a
peer that answers twice as fast is picked twice as often. A router's first pick of a stage skips
`phase` picks (mod the stage's live peers): trainer k of a run passes k times its microbatches in
flight, so trainers that start together do not all send their first microbatches to the same peer
and then alternate in step with each other. A fault bans a peer (it is never picked) until it
re-announces itself.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from labkit.kernels.iwrr import INITIAL_EMA, ema_fold, iwrr_entry, iwrr_pick, iwrr_skip


@dataclass
class PeerRecord:
    """What one trainer knows about one peer."""

    stage: int
    ema: float  # smoothed response time in seconds
    priority: float  # accumulated charge; smallest is picked next
    banned: bool = False
    order: int = 0  # insertion order, breaks priority ties deterministically


class Router:
    """IWRR over the peers of each stage, with EMA response times and bans.

    >>> r = Router(gamma=0.5)
    >>> r.announce("a", stage=0); r.announce("b", stage=0)
    >>> r.choose(0), r.choose(0)
    ('a', 'b')

    gamma: EMA smoothing, `ema = gamma * dt + (1 - gamma) * ema` (the paper used 0.1).
    epsilon: a new or re-announced peer enters just above the stage's smallest priority, so it is
        tried at once but does not receive a burst of work while its EMA is still a guess.
    initial_ema: EMA of a peer whose stage has no measured peer yet; otherwise a newcomer starts
        at the stage's mean EMA.
    debias: the first answer replaces the prior (True), or folds into it like any other (False:
        the paper's EMA, which needs about 1/gamma answers to forget a wrong prior).
    phase: picks of each stage skipped before the router's first (see above; 0: none).
    """

    def __init__(self, *, gamma: float = 0.1, epsilon: float = 1e-6, initial_ema: float = INITIAL_EMA,
                 debias: bool = True, phase: int = 0) -> None:
        if not 0.0 < gamma <= 1.0:
            raise ValueError(f"gamma={gamma!r} is not allowed: it must be in (0, 1]")
        if epsilon < 0.0:
            raise ValueError(f"epsilon={epsilon!r} is not allowed: it must be >= 0")
        if initial_ema <= 0.0:
            raise ValueError(f"initial_ema={initial_ema!r} is not allowed: it must be > 0")
        if phase < 0:
            raise ValueError(f"phase={phase!r} is not allowed: it must be >= 0")
        self.gamma = gamma
        self.epsilon = epsilon
        self.initial_ema = initial_ema
        self.prior_weight = 0.0 if debias else 1.0  # how much of a newcomer's EMA counts as measured
        self.phase = phase
        self._started: set[int] = set()  # stages this router has picked from (skipped its phase in)
        self._slot: dict[str, int] = {}  # peer name -> array slot
        self._names: list[str | None] = []  # array slot -> peer name (None = free slot)
        self._free: list[int] = []
        self._stage = np.empty(0, np.int64)  # -1 marks a free slot
        self._prio = np.empty(0)
        self._ema = np.empty(0)
        self._weight = np.empty(0)
        self._order = np.empty(0, np.int64)
        self._banned = np.empty(0, np.bool_)
        self._counter = 0

    # -- membership -------------------------------------------------------------------------
    def announce(self, peer: str, stage: int) -> None:
        """Add a peer, or un-ban it / move it to `stage` when it re-announces itself."""
        i = self._slot.get(peer)
        if i is not None and self._stage[i] == stage and not self._banned[i]:
            return
        priority, ema = iwrr_entry(self._stage, self._prio, self._ema, self._banned, stage, self.epsilon, self.initial_ema)
        if i is None or self._stage[i] != stage:
            if i is None:
                i = self._new_slot(peer)
            self._counter += 1
            self._stage[i], self._ema[i], self._order[i] = stage, ema, self._counter
            self._weight[i] = self.prior_weight
        self._banned[i] = False
        self._prio[i] = priority

    def remove(self, peer: str) -> None:
        """Forget a peer entirely (it left the swarm)."""
        i = self._slot.pop(peer, None)
        if i is not None:
            self._stage[i] = -1
            self._names[i] = None
            self._free.append(i)

    def ban(self, peer: str) -> None:
        """Stop routing to a peer after a fault or timeout, until it re-announces itself."""
        i = self._slot.get(peer)
        if i is not None:
            self._banned[i] = True

    # -- routing ----------------------------------------------------------------------------
    def choose(self, stage: int) -> str | None:
        """Pick the live peer of `stage` with the smallest priority and charge it; None if none."""
        if stage not in self._started and iwrr_skip(self._stage, self._prio, self._order, self._banned,
                                                    stage, self.phase):
            self._started.add(stage)
        i = iwrr_pick(self._stage, self._prio, self._ema, self._order, self._banned, stage)
        return None if i < 0 else self._names[i]

    def report(self, peer: str, seconds: float) -> None:
        """Fold one measured response time into the peer's EMA."""
        i = self._slot.get(peer)
        if i is not None:
            ema_fold(self._ema, self._weight, i, float(seconds), self.gamma)

    # -- inspection -------------------------------------------------------------------------
    def peers(self, stage: int | None = None, *, include_banned: bool = True) -> list[str]:
        """Peers known to this router, optionally of one stage, in insertion order."""
        slots = sorted(self._slot.values(), key=lambda i: self._order[i])
        return [
            self._names[i]
            for i in slots
            if (stage is None or self._stage[i] == stage) and (include_banned or not self._banned[i])
        ]

    def view(self) -> list[dict[str, object]]:
        """Every live peer as the router sees it: name, stage, EMA and priority (the router event)."""
        return [{"peer": name, "stage": r.stage, "ema": r.ema, "priority": r.priority}
                for name in self.peers(include_banned=False) for r in [self.record(name)]]

    def record(self, peer: str) -> PeerRecord:
        """A snapshot of the router's record of one peer (KeyError if unknown)."""
        i = self._slot[peer]
        return PeerRecord(stage=int(self._stage[i]), ema=float(self._ema[i]), priority=float(self._prio[i]),
                          banned=bool(self._banned[i]), order=int(self._order[i]))

    def _new_slot(self, peer: str) -> int:
        if not self._free:
            old = len(self._names)
            grow = max(8, old)
            self._stage = np.concatenate([self._stage, np.full(grow, -1, np.int64)])
            self._prio = np.concatenate([self._prio, np.zeros(grow)])
            self._ema = np.concatenate([self._ema, np.zeros(grow)])
            self._weight = np.concatenate([self._weight, np.zeros(grow)])
            self._order = np.concatenate([self._order, np.zeros(grow, np.int64)])
            self._banned = np.concatenate([self._banned, np.zeros(grow, np.bool_)])
            self._names.extend([None] * grow)
            self._free.extend(range(old + grow - 1, old - 1, -1))
        i = self._free.pop()
        self._slot[peer] = i
        self._names[i] = peer
        return i
