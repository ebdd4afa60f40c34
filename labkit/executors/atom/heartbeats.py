"""ATOM's global-batch rule on the counts replicas publish (the ATOM paper, §III-E): a step is taken
once every credited replica's heartbeat count equals its ledger credit. A heartbeat is a count read
from a DHT that lags, so a disagreement is first "not yet"; one outlasting the patience learnt from
the disagreements that ended (as a request deadline is learnt, within [BOUNDARY_FLOOR, ceiling]) is
a broken invariant, unless the only replicas apart are silent ones (no count of this step at all)
while others' counts arrive: those replicas stopped publishing (hung, or cut off from the DHT), and
the run goes on without them (`Silent`). Not `reconcile`'s case: no replica holds an uncredited
attempt (an iteration is credited whole or dropped whole)."""

from __future__ import annotations

import time
from collections.abc import Mapping

from labkit.swarm.deadline import BOUNDARY_FLOOR, Deadline


class Silent(Exception):
    """Credited replicas whose heartbeats stopped arriving while the others' still do."""

    def __init__(self, replicas: list[str], reason: str) -> None:
        super().__init__(f"{replicas}: {reason}")
        self.replicas, self.reason = replicas, reason


class HeartbeatCheck:
    """Whether the published counts agree with the ledger, and for how long they may not."""

    def __init__(self, ceiling: float) -> None:
        self._since: float | None = None  # when the counts began to disagree with the ledger
        self._heard: set[str] = set()  # replicas whose count of the step was read since then
        self._patience = Deadline(ceiling=ceiling, floor=BOUNDARY_FLOOR)  # how long they may: learnt

    def reset(self) -> None:
        """Forget the disagreement under way (the credits changed: a replica left), learning nothing."""
        self._since, self._heard = None, set()

    def agree(self, step: int, credited: Mapping[str, int], counts: Mapping[str, int]) -> bool:
        """True when every credited replica's count equals its credit (`counts` holds `step`'s
        only). Once they have disagreed for longer than the patience: `Silent` when no count of the
        step was read from any replica apart in all that time while some credited replica's was,
        else RuntimeError."""
        now = time.monotonic()
        if all(counts.get(name) == n for name, n in credited.items()):
            if self._since is not None:
                self._patience.answered(now - self._since)
            self.reset()
            return True
        self._since = self._since or now
        self._heard |= {name for name, count in counts.items() if count is not None}
        if now - self._since > (patience := self._patience.seconds()):
            apart = {name: (n, counts.get(name)) for name, n in credited.items() if counts.get(name) != n}
            if not (apart.keys() & self._heard) and credited.keys() & self._heard:
                self.reset()  # not a disagreement that ended: nothing to learn from
                raise Silent(sorted(apart), f"no heartbeat of step {step} was read in {patience:.1f} s while the other "
                                            f"replicas' were (silent)")
            raise RuntimeError(f"accounting broke at step {step}: (ledger credit, heartbeat count) disagree for "
                               f"{apart} for {patience:.1f} s")
        return False
