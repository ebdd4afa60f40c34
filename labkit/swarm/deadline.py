"""How long to wait for a peer: a deadline from its measured answers, as TCP's retransmission
timeout is (RFC 6298), instead of a constant someone has to set.

Pure logic: no threads, no clocks. Each answer's seconds fold into a smoothed time (SRTT) and a
smoothed deviation (RTTVAR) with RFC 6298's gains; the deadline is SRTT plus the larger of four
deviations and SRTT itself (an answer that takes twice its usual time is late, not lost: a peer's
queue doubles when a neighbour leaves), kept within [floor, ceiling]. Until the first answer the
deadline is the ceiling. Each expiry doubles it (back-off, up to the ceiling) until an answer
comes; so a peer that has only been slow costs one ban, and one that hangs is given up on within
one deadline. A request past its deadline whose peer answered another request meanwhile
(`busy_not_hung`) waits on instead: a peer whose stage lost its neighbours works through a queue
three or four times its usual length, and banning it for that sends the whole queue to the next
peer. It waits one backed-off deadline at a time while answers keep coming, to the ceiling.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator

ALPHA = 1 / 8  # RFC 6298's gain of the smoothed time
BETA = 1 / 4  # and of the smoothed deviation
K = 4  # deviations of slack
FLOOR = 1.0  # seconds: no deadline of a data request is shorter (RFC 6298's minimum RTO)
BOUNDARY_FLOOR = 5.0  # seconds: nor of a step boundary's request (which evicts: a loaded machine's pauses)


def _check(ceiling: float, floor: float) -> None:
    """One clear error for a ceiling or floor that is not a positive number of seconds."""
    if not (ceiling > 0 and floor > 0):
        raise ValueError(f"floor={floor!r}, ceiling={ceiling!r} are not allowed: both must be > 0 seconds")


class Deadline:
    """One peer's request deadline, learned from its answers.

    >>> d = Deadline(ceiling=30.0)
    >>> d.seconds()
    30.0
    >>> d.answered(0.5); d.seconds()   # SRTT 0.5, RTTVAR 0.25: 0.5 + max(1.0, 0.5), floored
    1.5
    >>> d.expired(); d.seconds()
    3.0
    """

    def __init__(self, *, ceiling: float, floor: float = FLOOR) -> None:
        """ceiling: the longest deadline (and the first); floor: the shortest, unless the ceiling
        is shorter still."""
        _check(ceiling, floor)
        self.floor, self.ceiling = min(floor, ceiling), ceiling
        self.srtt: float | None = None
        self.rttvar = 0.0
        self.backoff = 0  # expiries since the last answer

    def answered(self, seconds: float) -> None:
        """Fold one answer's seconds in (and forget the back-off)."""
        if self.srtt is None:
            self.srtt, self.rttvar = seconds, seconds / 2
        else:
            self.rttvar = (1 - BETA) * self.rttvar + BETA * abs(self.srtt - seconds)
            self.srtt = (1 - ALPHA) * self.srtt + ALPHA * seconds
        self.backoff = 0

    def expired(self) -> None:
        """A request outlived the deadline: the next one waits twice as long (to the ceiling)."""
        self.backoff += 1

    def seconds(self) -> float:
        """How long the next request may take before it is given up on."""
        if self.srtt is None:
            return self.ceiling
        base = max(self.floor, self.srtt + max(K * self.rttvar, self.srtt))
        return min(self.ceiling, base * 2.0 ** min(self.backoff, 32))


def busy_not_hung(last_answer: float | None, since: float, sent: float, now: float, ceiling: float) -> bool:
    """Whether a request sent at `sent` that has outlived its deadline at `now` should wait on: its
    peer answered another request after `since` (the send, or the deadline before), so it is working
    through a queue, not hung; never once `ceiling` seconds have passed since the send."""
    return last_answer is not None and last_answer > since and now - sent < ceiling


class Deadlines:
    """A `Deadline` for each kind of request (a peer and method, a step boundary's request), each
    learnt from its own answers, all with the same floor and ceiling."""

    def __init__(self, *, ceiling: float, floor: float = FLOOR) -> None:
        _check(ceiling, floor)
        self.ceiling, self.floor = ceiling, floor
        self._kinds: dict[Hashable, Deadline] = {}

    def __getitem__(self, kind: Hashable) -> Deadline:
        if kind not in self._kinds:
            self._kinds[kind] = Deadline(ceiling=self.ceiling, floor=self.floor)
        return self._kinds[kind]

    def learn(self, took: dict[str, float], late: set[str]) -> None:
        """Fold in one round's answers: the seconds of each kind answered in time, and the kinds
        whose deadline passed (each backs off)."""
        for kind, seconds in took.items():
            self[kind].answered(seconds)
        for kind in late:
            self[kind].expired()

    def items(self) -> Iterator[tuple[Hashable, Deadline]]:
        """Every kind asked for so far, with its deadline."""
        return iter(list(self._kinds.items()))
