"""A task-pool run's servers, clients and pooled work per stage, folded from its events for the
lab's 'pool' chart (the task pool paper's executor, labkit.executors.taskpool).

Servers are reliable and fixed by the config (`servers(stage)`: its frontal + backward servers);
clients come and go with `peer` events (killed, overdue, joined, rejoined); the pool is what the
pass's lost clients handed to it, in samples: a kill adds the samples its `peer` event says it
pooled, and at the pass's end the servers' counters (the `setting` event named "pool") give
the pass's exact total, overdue clients' work included; the next pass starts with an empty pool
(a pass closes only once its pool has drained).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from labkit.events import Event

Row = dict[str, Any]


class PoolRows:
    """`peer(e)` and `setting(e)` as events arrive; `rows()`: one row per change, at most `cap`."""

    def __init__(self, servers: Callable[[int], int] | None = None, cap: int = 1_000) -> None:
        self.servers = servers or (lambda stage: 2)  # a stage's servers, frontal and backward (default: one of each)
        self._rows: deque[Row] = deque(maxlen=cap)
        self._clients: dict[int, set[str]] = {}  # per stage: its live clients
        self._pooled: dict[int, int] = {}  # per stage: samples handed to the pool this pass
        self._counted: dict[int, int] = {}  # per stage: the servers' pooled_samples counter at the last pass's end

    def peer(self, e: Event) -> None:
        """A client joined, rejoined, was killed or declared overdue."""
        stage, clients = e["stage"], self._clients.setdefault(e["stage"], set())
        if e["state"] == "joined":
            clients.add(e["peer"])
        elif e["state"] == "killed":
            clients.discard(e["peer"])
            self._pooled[stage] = self._pooled.get(stage, 0) + e.get("pooled_samples", 0)  # overdue: counted at the end
        self._add(e["t"], stage, {"what": f"{e['peer']} {e['state']}"})

    def setting(self, e: Event) -> None:
        """A pass ended: the servers' counters of `e['value']['stage']`."""
        value = e["value"]
        stage = value["stage"]
        self._pooled[stage] = value["pooled_samples"] - self._counted.get(stage, 0)
        self._counted[stage] = value["pooled_samples"]
        self._add(e["t"], stage, {"what": "pass ended", "lost_samples": value["lost_samples"],
                                  "repeated_beyond_lost": value["repeated_beyond_lost"]})
        self._pooled[stage] = 0
        self._add(e["t"], stage, {"what": "next pass"})

    def _add(self, t: float, stage: int, about: Row) -> None:
        counts = {"servers": self.servers(stage), "clients": len(self._clients.get(stage, ())), "pool": self._pooled.get(stage, 0)}
        for series, value in counts.items():
            self._rows.append({"t": t, "stage": stage, "series": series, "value": value, **about})

    def rows(self) -> list[Row]:
        return list(self._rows)
