"""Internet links as a scenario file describes them: who sits in which region, what joins two
regions, and the token bucket that paces one direction of a link.

Shared by the simulator (`build_world` reads `region_link` and `join_group`) and by the real
runtime's link emulation (labkit/runtime/links.py), so a scenario means the same network to both.
Pure arithmetic on numbers the caller passes in: no clock, no threads.

>>> b = TokenBucket(rate=1000.0)
>>> b.send(500, now=0.0), b.send(500, now=0.0), b.send(100, now=2.0)
(0.5, 1.0, 0.1)
"""

from __future__ import annotations

from dataclasses import dataclass

from labkit.sim.scenario import PeerGroup, SimScenario


@dataclass
class TokenBucket:
    """One direction of one link: `rate` bytes/s refill a bucket of at most `burst` bytes.

    A message of n bytes takes n tokens at once and may leave the bucket in debt; it has left the
    sender once the debt is paid off (`send` returns how long that takes). So an idle link with
    burst 0 sends n bytes in n / rate seconds (the simulator's payload time), and a message sent
    while an earlier one is still going out waits behind it (FIFO)."""

    rate: float  # bytes per second
    burst: float = 0.0  # bytes an idle link sends at once
    tokens: float = float("inf")  # bytes that may leave now (negative: bytes still queued); starts full
    updated: float = 0.0  # when `tokens` was last brought up to date (seconds, the caller's clock)

    def __post_init__(self) -> None:
        if not (0 < self.rate < float("inf") and 0 <= self.burst < float("inf")):
            raise ValueError(f"TokenBucket(rate={self.rate!r}, burst={self.burst!r}) is not allowed: rate > 0 "
                             "bytes/s and burst >= 0 bytes")
        self.tokens = min(self.tokens, self.burst)

    def send(self, nbytes: float, now: float) -> float:
        """Charge `nbytes` sent at `now`; returns the seconds until its last byte has left."""
        self.tokens = min(self.burst, self.tokens + max(0.0, now - self.updated) * self.rate)
        self.updated = max(self.updated, now)
        self.tokens -= nbytes
        return max(0.0, -self.tokens / self.rate)


def region_link(s: SimScenario, a: str, b: str) -> tuple[float, float]:
    """(round trip seconds, bytes per second) between regions `a` and `b`: the scenario's link
    between them (either order), else its default `rtt_ms` / `bandwidth_mbps`."""
    for k in s.links:
        if {k.a, k.b} == {a, b}:
            return k.rtt_ms / 1e3, k.bandwidth_mbps * 1e6 / 8.0
    return s.rtt_ms / 1e3, s.bandwidth_mbps * 1e6 / 8.0


def join_group(s: SimScenario) -> PeerGroup:
    """The group peers that join later belong to (device and region): the join device's first
    group, else the first group."""
    return next((g for g in s.peers if g.device == s.join_device), s.peers[0])


def stage_regions(s: SimScenario) -> tuple[tuple[str, ...], ...]:
    """Per stage, the regions of its initial peers in file order: the k-th entry of stage s is
    where the runtime's peer `s{s}p{k}` sits."""
    return tuple(tuple(g.region for g in s.peers if g.stage == stage for _ in range(g.count))
                 for stage in range(s.stages))
