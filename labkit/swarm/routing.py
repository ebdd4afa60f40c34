"""Stochastic wiring: SWARM's Interleaved Weighted Round-Robin router (Algorithm 1).

Pure logic: no threads, no sockets, no torch. The in-process runtime, the Dask runtime and the
simulator all route through a `Router`, so a routing figure from the simulator describes the
real system.

Each peer serves one stage. Per peer the router keeps an exponential moving average (EMA) of its
response time and a priority. `choose(stage)` returns the live peer of the stage with the smallest
priority and charges it its EMA ("pick and charge"), so a peer that answers twice as fast is picked
twice as often. A fault bans a peer (it is never picked) until it re-announces itself.
"""

from __future__ import annotations

from dataclasses import dataclass


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
    """

    def __init__(self, *, gamma: float = 0.1, epsilon: float = 1e-6, initial_ema: float = 1.0) -> None:
        if not 0.0 < gamma <= 1.0:
            raise ValueError(f"gamma={gamma!r} is not allowed: it must be in (0, 1]")
        if epsilon < 0.0:
            raise ValueError(f"epsilon={epsilon!r} is not allowed: it must be >= 0")
        if initial_ema <= 0.0:
            raise ValueError(f"initial_ema={initial_ema!r} is not allowed: it must be > 0")
        self.gamma = gamma
        self.epsilon = epsilon
        self.initial_ema = initial_ema
        self._peers: dict[str, PeerRecord] = {}
        self._counter = 0

    # -- membership -------------------------------------------------------------------------
    def announce(self, peer: str, stage: int) -> None:
        """Add a peer, or un-ban it / move it to `stage` when it re-announces itself."""
        record = self._peers.get(peer)
        if record is not None and record.stage == stage and not record.banned:
            return
        live = self._live(stage)
        floor = min((self._peers[p].priority for p in live), default=0.0)
        if record is None or record.stage != stage:
            emas = [self._peers[p].ema for p in live]
            ema = sum(emas) / len(emas) if emas else self.initial_ema
            self._counter += 1
            self._peers[peer] = PeerRecord(stage=stage, ema=ema, priority=floor + self.epsilon, order=self._counter)
        else:
            record.banned = False
            record.priority = floor + self.epsilon

    def remove(self, peer: str) -> None:
        """Forget a peer entirely (it left the swarm)."""
        self._peers.pop(peer, None)

    def ban(self, peer: str) -> None:
        """Stop routing to a peer after a fault or timeout, until it re-announces itself."""
        if peer in self._peers:
            self._peers[peer].banned = True

    # -- routing ----------------------------------------------------------------------------
    def choose(self, stage: int) -> str | None:
        """Pick the live peer of `stage` with the smallest priority and charge it; None if none."""
        live = self._live(stage)
        if not live:
            return None
        peer = min(live, key=lambda p: (self._peers[p].priority, self._peers[p].order))
        record = self._peers[peer]
        record.priority += record.ema
        return peer

    def report(self, peer: str, seconds: float) -> None:
        """Fold one measured response time into the peer's EMA."""
        record = self._peers.get(peer)
        if record is not None:
            record.ema = self.gamma * seconds + (1.0 - self.gamma) * record.ema

    # -- inspection -------------------------------------------------------------------------
    def peers(self, stage: int | None = None, *, include_banned: bool = True) -> list[str]:
        """Peers known to this router, optionally of one stage, in insertion order."""
        return [
            p
            for p, r in sorted(self._peers.items(), key=lambda kv: kv[1].order)
            if (stage is None or r.stage == stage) and (include_banned or not r.banned)
        ]

    def record(self, peer: str) -> PeerRecord:
        """The router's record of one peer (a copy is not made: do not mutate)."""
        return self._peers[peer]

    def _live(self, stage: int) -> list[str]:
        return [p for p, r in self._peers.items() if r.stage == stage and not r.banned]
