"""Peer health and the cost of rebalancing, folded from a run's events one at a time (no threads).

Per live peer: bytes per second on its hops over a recent window (a hop event carries the bytes
sent to the peer and received back as one sum, so this is in + out together), seconds since its
last answer (its latest hop), the longest request deadline a trainer gave it, and each trainer's
router EMA and IWRR share (from that trainer's latest router event). Per move (a rebalance or a
Move click): the state the new peer downloaded (fp32 parameters plus optimizer buffers of the
stage it joins, under the layer split in force) and the seconds from the move until its first
answer. A heartbeat age is not in the events (on Dask it lives in the trainers' DHT directory),
so "last answer" is the liveness shown.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Any

from labkit.config_parts import ModelConfig
from labkit.events import Event

Row = dict[str, Any]
GONE = ("killed", "moved", "banned", "left")  # states that take a peer out of service (banned: until its next event)
STATE_BYTES_PER_PARAM = {"adamw": 12, "sgd": 8}  # fp32 parameters + Adam's two moments, or SGD's momentum
MAX_MOVES = 200  # moves kept (newest)


def router_shares(view: Sequence[Row]) -> dict[str, float]:
    """Each peer's share of its stage in one router view: IWRR charges a peer its EMA per pick, so
    its share is 1/EMA over the sum of 1/EMA of its stage's peers."""
    speed = {p["peer"]: 1.0 / p["ema"] for p in view if p["ema"] > 0}
    totals: dict[int, float] = {}
    for p in view:
        if p["peer"] in speed:
            totals[p["stage"]] = totals.get(p["stage"], 0.0) + speed[p["peer"]]
    return {p["peer"]: speed[p["peer"]] / totals[p["stage"]] for p in view if p["peer"] in speed}


def state_bytes(model: ModelConfig, split: Sequence[int], stage: int, optimizer: str = "adamw") -> int:
    """Bytes a peer downloads to serve `stage` of `split`: its parameters and optimizer buffers, fp32."""
    first = sum(split[:stage])
    return model.stage_params(first, split[stage]) * STATE_BYTES_PER_PARAM[optimizer]


class Health:
    """Folds events (`add`) into per-peer health (`peers`) and the moves' costs (`moves`).

    window_s: seconds of hops the bytes per second count. model, split, optimizer: the run's,
    for the state a move downloads (None: unknown, e.g. a simulation's events; shown as a dash).
    """

    def __init__(self, window_s: float = 20.0, model: ModelConfig | None = None, split: Sequence[int] = (),
                 optimizer: str = "adamw") -> None:
        self.window_s, self.model, self.split, self.optimizer = window_s, model, list(split), optimizer
        self.now = 0.0
        self._hops: deque[tuple[float, str, int]] = deque()  # (t, peer, bytes) in the window
        self._recent: dict[str, int] = {}  # bytes per peer in the window
        self.stage: dict[str, int] = {}
        self.since: dict[str, float] = {}  # when a peer was first seen
        self.answered: dict[str, float] = {}  # when a peer last answered a hop
        self.gone: set[str] = set()
        self.views: dict[str, list[Row]] = {}  # each trainer's latest router view
        self._moves: deque[Row] = deque(maxlen=MAX_MOVES)
        self._waiting: dict[str, Row] = {}  # new peer's name -> its move, until it first answers

    def add(self, e: Event) -> None:
        """Fold one event (types other than hop, peer, router and layer_split settings are skipped)."""
        kind, t = e["type"], e["t"]
        self.now = max(self.now, t)
        if kind == "hop":
            peer = e["peer"]
            self._seen(peer, e["stage"], t)
            self._hops.append((t, peer, e["bytes"]))
            self._recent[peer] = self._recent.get(peer, 0) + e["bytes"]
            self.answered[peer] = t
            if (move := self._waiting.pop(peer, None)) is not None:
                move["down_s"] = max(0.0, t - move["t"])
        elif kind == "peer":
            self._peer(e)
        elif kind == "router":
            self.views[e["trainer"]] = e["peers"]
        elif kind == "setting" and e["name"] == "layer_split":
            self.split = list(e["value"])
        oldest = self.now - self.window_s
        while self._hops and self._hops[0][0] < oldest:
            _, peer, n = self._hops.popleft()
            self._recent[peer] -= n

    def _seen(self, peer: str, stage: int, t: float) -> None:
        self.stage[peer] = stage
        self.since.setdefault(peer, t)

    def _peer(self, e: Event) -> None:
        peer = e["peer"]
        self._seen(peer, e["stage"], e["t"])
        (self.gone.add if e["state"] in GONE else self.gone.discard)(peer)
        if e["state"] != "moved" or "to" not in e:
            return
        to, stage = e["to"], e["to_stage"]
        known = self.model is not None and 0 <= stage < len(self.split)
        move = {"t": e["t"], "peer": peer, "stage": e["stage"], "to": to, "to_stage": stage,
                "lost_samples": e.get("lost_samples"), "down_s": None,
                "state_bytes": state_bytes(self.model, self.split, stage, self.optimizer) if known else None}
        if to in self.answered and self.answered[to] >= e["t"]:  # it answered before the move was announced
            move["down_s"] = 0.0
        else:
            self._waiting[to] = move
        self._moves.append(move)

    def peers(self) -> list[Row]:
        """One row per live peer seen on a hop or in a router view, by stage then name: stage,
        bytes_per_s, answered_s_ago (None: never answered), deadline_s (the longest a trainer
        gave it; None: no router view yet) and router {trainer: {ema, share}}: the share among the
        view's peers still in the run (a view from before a kill still names the killed peer)."""
        routed: dict[str, dict[str, Row]] = {}
        deadline: dict[str, float] = {}
        for trainer, view in sorted(self.views.items()):
            shares = router_shares([p for p in view if p["peer"] not in self.gone])  # of the stage's peers now
            for p in view:
                routed.setdefault(p["peer"], {})[trainer] = {"ema": p["ema"], "share": shares.get(p["peer"])}
                if "deadline" in p:
                    deadline[p["peer"]] = max(deadline.get(p["peer"], 0.0), p["deadline"])
                self.stage.setdefault(p["peer"], p["stage"])
        names = (set(self.answered) | set(routed)) - self.gone
        rows = []
        for name in sorted(names, key=lambda n: (self.stage.get(n, -1), len(n), n)):
            seconds = max(min(self.window_s, self.now - self.since.get(name, self.now)), 1e-9)
            answered = self.answered.get(name)
            rows.append({"peer": name, "stage": self.stage.get(name), "bytes_per_s": self._recent.get(name, 0) / seconds,
                         "answered_s_ago": None if answered is None else self.now - answered,
                         "deadline_s": deadline.get(name), "router": routed.get(name, {})})
        return rows

    def moves(self) -> list[Row]:
        """The moves, oldest first: t, peer and stage it left, to and to_stage, lost_samples,
        state_bytes (None: unknown) and down_s (seconds until the new peer answered; None: not yet)."""
        return list(self._moves)
