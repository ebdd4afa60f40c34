"""Events folded into the rows every chart, table and report of the lab draws, one event at a time.

`Rows` reads only the event schema (labkit.events), so a live run, a Dask run, a simulation and a
finished run's events.jsonl all fold alike. Each event is folded once, in O(1), into bounded
structures (sliding windows and capped histories), so a refresh costs the rows it returns, not the
events seen: the refresher of a long run stays cheap. Windows expire in arrival order (events of a
run arrive in time order up to the few milliseconds between threads).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from labkit.config import RunConfig
from labkit.executors.registry import DEFAULT, SPECS
from labkit.events import Event
from labkit.lab.health import Health
from labkit.lab.poolrows import PoolRows
from labkit.lab.rundir import event_error, read_run

Row = dict[str, Any]
DATASETS = ("routing", "loads", "timeline", "throughput", "loss", "traffic", "marks", "recent_marks", "swaps", "pool",
            "router")
MARKED_PEER_STATES = {"killed": "kill", "moved": "move", "banned": "ban"}
# the datasets an event of each type may change (time moving on changes the windowed ones)
TOUCHES = {"hop": ("routing", "timeline", "traffic"), "step": ("throughput", "loss"), "eval": ("loss",),
           "load": ("loads",), "peer": ("loads", "marks", "recent_marks", "pool", "router"),
           "setting": ("marks", "recent_marks", "pool"),
           "sync": ("traffic",), "run": ("marks", "recent_marks"), "swap": ("swaps",),
           "router": ("router",)}
WINDOWED = ("routing", "timeline", "recent_marks", "swaps")
MARKED_SETTINGS = ("layer_split", "codec", "sync")


@dataclass(frozen=True)
class Windows:
    """How much of the run each chart keeps (seconds of run time, or rows)."""

    routing_s: float = 20.0  # the routing chart counts microbatches over this sliding window
    timeline_s: float = 6.0  # the peer and swap timelines show the last seconds of work
    swap_iterations: int = 2  # the swap timeline shows each ATOM replica's last iterations at most
    history_rows: int = 1_000  # loads, throughput, loss and marks keep at most this many rows each


class Rows:
    """Folds events into chart rows: `add(event)` as they arrive, `datasets()` when drawing."""

    def __init__(self, codec: str = "fp32", tokens_per_microbatch: int = 0, windows: Windows = Windows(),
                 charts: tuple[str, ...] = SPECS[DEFAULT].charts, microbatch: int = 1,
                 servers: Callable[[int], int] | None = None, health: Health | None = None) -> None:
        self.w = windows
        self.charts = charts  # the charts that draw these rows: the run's executor's (a simulation draws SWARM's)
        self.tokens_per_microbatch = tokens_per_microbatch  # for peers' tokens/s (0: unknown)
        self.microbatch = microbatch  # samples per microbatch: a task-pool hop counts its slice's share of one
        self.versions = dict.fromkeys(DATASETS, 0)  # per dataset: a chart redraws only what moved
        self.now, self.codec = 0.0, codec  # the latest event time, the codec in force
        self.started = False  # peers joining before the run starts are its first, not marked joins
        self._hops: deque[tuple[float, int, int, str, str]] = deque()  # forward hops in the routing window, samples
        self._routes: dict[tuple[int, str, str], int] = {}  # samples by (stage, trainer, peer) in the window
        self._timeline: deque[Row] = deque()
        cap = windows.history_rows
        histories: list[deque[Row]] = [deque(maxlen=cap) for _ in range(4)]
        self._loads, self._throughput, self._loss, self._marks = histories
        self._router: deque[Row] = deque(maxlen=10 * cap)  # a row per (trainer, peer) of each router event
        self._traffic: dict[tuple[int, str, str], int] = {}
        self._last_step: tuple[float, int] | None = None
        self.peers: dict[str, Row] = {}  # per peer: stage, state, forward samples, bytes, since
        self._swaps: dict[str, deque[Row]] = {}  # per ATOM replica: its turns, oldest first
        self._iteration: dict[str, int] = {}  # per replica: the iteration its latest turn belongs to
        self._loaded: dict[tuple[str, int], float] = {}  # (replica, sub-model): when its device copy started loading
        self.pool = PoolRows(servers, windows.history_rows)  # a task-pool run's servers, clients and pool
        self.health = health or Health(windows.routing_s)  # per-peer health and moves' costs (the health table)

    @classmethod
    def for_config(cls, cfg: RunConfig, windows: Windows = Windows()) -> Rows:
        """Rows of a run of `cfg`: its starting codec, tokens per microbatch, its executor's charts, and
        (for an executor drawing the pool chart) each stage's servers as its config counts them."""
        servers = (lambda stage: sum(cfg.executor.servers(stage))) if "pool" in cfg.spec.charts else None
        return cls(cfg.compression.codec, cfg.microbatch * cfg.model.seq_len, windows, cfg.spec.charts, cfg.microbatch,
                   servers, Health(windows.routing_s, cfg.model, cfg.layer_split, cfg.optimizer))

    def extend(self, events: Iterable[Event]) -> Rows:
        for e in events:
            self.add(e)
        return self

    def add(self, e: Event) -> None:
        """Fold one event."""
        kind = e["type"]
        self.health.add(e)
        fold = _FOLDS.get(kind)
        if fold is None:
            return
        if e["t"] > self.now:
            self.now = e["t"]
            self._expire()
            for name in WINDOWED:
                self.versions[name] += 1
        fold(self, e)
        for name in TOUCHES[kind]:
            self.versions[name] += 1

    # -- one fold per event type -------------------------------------------------------------
    def _hop(self, e: Event) -> None:
        stage, peer, t = e["stage"], e["peer"], e["t"]
        key = (stage, e["trainer"], peer)
        self._traffic[stage, "pipeline-parallel", self.codec] = self._traffic.get((stage, "pipeline-parallel", self.codec), 0) + e["bytes"]
        p = self._peer(peer, stage, t)
        p["bytes"] += e["bytes"]
        if e["direction"] == "forward":
            samples = e["end"] - e["start"] if "kind" in e else self.microbatch  # a task-pool hop is a slice
            self._hops.append((t, samples, *key))
            self._routes[key] = self._routes.get(key, 0) + samples
            p["samples"] += samples
        self._timeline.append({"peer": peer, "stage": stage, "trainer": e["trainer"], "direction": e["direction"],
                               "start": t - e["seconds"], "end": t})

    def _step(self, e: Event) -> None:
        t = e["t"]
        if self._last_step is not None and t > self._last_step[0]:
            seconds = t - self._last_step[0]
            steps = max(1, e["step"] - self._last_step[1])
            self._throughput.append({"t": t, "step": e["step"], "tokens_per_s": e["tokens"] * steps / seconds})
        self._last_step = (t, e["step"])
        if e["loss"] is not None and e["loss"] == e["loss"]:  # a simulated step has no loss (NaN; null on disk)
            self._loss.append({"t": t, "step": e["step"], "loss": e["loss"], "kind": "train"})

    def _eval(self, e: Event) -> None:
        self._loss.append({"t": e["t"], "step": e["step"], "loss": e["val_loss"], "kind": "validation"})

    def _load(self, e: Event) -> None:
        self._loads.append({"t": e["t"], "peer": e["peer"], "stage": e["stage"], "queue": e["queue"]})

    def _peer_event(self, e: Event) -> None:
        p = self._peer(e["peer"], e["stage"], e["t"])
        p["state"], p["stage"] = e["state"], e["stage"]
        self._loads.append({"t": e["t"], "peer": e["peer"], "stage": e["stage"], "queue": e["queue"]})
        if "pool" in self.charts:
            self.pool.peer(e)
        what = MARKED_PEER_STATES.get(e["state"]) or ("join" if e["state"] == "joined" and self.started else None)
        if what:
            self._marks.append({"t": e["t"], "what": f"{what} {e['peer']}"})

    def _setting(self, e: Event) -> None:
        if e["name"] == "codec":
            self.codec = e["value"]
        if e["name"] == "pool":
            self.pool.setting(e)
        if e["name"] in MARKED_SETTINGS:
            self._marks.append({"t": e["t"], "what": f"{e['name']} {e['value']}"})

    def _sync(self, e: Event) -> None:
        key = (e["stage"], "data-parallel", "fp32")  # the codec compresses activations, not the sync
        self._traffic[key] = self._traffic.get(key, 0) + e["bytes"]

    def _run(self, e: Event) -> None:
        self.started = self.started or e["state"] == "started"
        if e["state"] not in ("started", "finished"):
            self._marks.append({"t": e["t"], "what": f"run {e['state']}"})

    def _router_view(self, e: Event) -> None:
        self._router.extend({"t": e["t"], "trainer": e["trainer"], **p} for p in e["peers"])

    def _swap(self, e: Event) -> None:
        """One sub-model's turn on an ATOM replica. Sub-model 0's forward opens an iteration;
        `resident_from` is when its device copy started loading: this turn's load, or, when it
        was still resident (no load), the load of the turn that brought it (Figure 12's device
        trajectory: the last sub-model of backward stays for the next forward, and so on)."""
        replica, k = e["replica"], e["submodel"]
        turns = self._swaps.setdefault(replica, deque())
        if k == 0 and e["phase"] != "backward":
            iteration = self._iteration[replica] = self._iteration.get(replica, -1) + 1
            while turns and turns[0]["iteration"] <= iteration - self.w.swap_iterations:
                turns.popleft()
        if e["load_start"] is not None:
            self._loaded[replica, k] = e["load_start"]
        turns.append({"replica": replica, "submodel": k, "phase": e["phase"], "iteration": self._iteration.get(replica, 0),
                      "load_start": e["load_start"], "load_end": e["load_end"], "compute_start": e["compute_start"],
                      "compute_end": e["compute_end"], "resident_from": self._loaded.get((replica, k), e["compute_start"])})

    # -- bookkeeping --------------------------------------------------------------------------
    def _peer(self, name: str, stage: int, t: float) -> Row:
        p = self.peers.get(name)
        if p is None:
            p = self.peers[name] = {"stage": stage, "state": "alive", "samples": 0, "bytes": 0, "since": t}
        return p

    def _expire(self) -> None:
        """Drop forward hops that left the routing window and work (hops, swaps) older than the timeline's."""
        oldest = self.now - self.w.routing_s
        while self._hops and self._hops[0][0] < oldest:
            _, samples, *key = self._hops.popleft()
            left = self._routes[tuple(key)] - samples
            if left:
                self._routes[tuple(key)] = left
            else:
                del self._routes[tuple(key)]
        oldest = self.now - self.w.timeline_s
        while self._timeline and self._timeline[0]["end"] < oldest:
            self._timeline.popleft()
        for replica, turns in list(self._swaps.items()):
            while turns and turns[0]["compute_end"] < oldest:
                turns.popleft()
            if not turns:
                del self._swaps[replica]

    # -- what the charts draw ------------------------------------------------------------------
    def routing(self) -> list[Row]:
        """Microbatches each trainer sent to each peer of every stage in the last `routing_s` (a
        task-pool client's slices as the share of a microbatch they hold)."""
        return [{"stage": s, "trainer": tr, "peer": p, "microbatches": n / self.microbatch}
                for (s, tr, p), n in sorted(self._routes.items())]

    def shares(self) -> dict[str, float]:
        """Each peer's share of its stage's forward samples in the routing window."""
        per_peer: dict[tuple[int, str], int] = {}
        for (stage, _, peer), n in self._routes.items():
            per_peer[stage, peer] = per_peer.get((stage, peer), 0) + n
        totals: dict[int, int] = {}
        for (stage, _), n in per_peer.items():
            totals[stage] = totals.get(stage, 0) + n
        return {peer: n / totals[stage] for (stage, peer), n in sorted(per_peer.items())}

    def traffic(self) -> list[Row]:
        """Bytes on the wire per stage: pipeline (activations and their gradients) vs
        data-parallel (gradient all-reduce or DiLoCo outer steps), by the codec in force."""
        return [{"stage": s, "kind": k, "codec": c, "megabytes": b / 1e6} for (s, k, c), b in sorted(self._traffic.items())]

    def totals(self) -> dict[str, dict[str, float]]:
        """Per peer: microbatches served and bytes since it joined, and tokens per second over
        the routing window (or since it joined, if later)."""
        recent: dict[str, int] = {}
        for (_, _, peer), n in self._routes.items():
            recent[peer] = recent.get(peer, 0) + n
        out: dict[str, dict[str, float]] = {}
        for name, p in self.peers.items():
            seconds = max(min(self.w.routing_s, self.now - p["since"]), 1e-9)
            out[name] = {"microbatches": p["samples"] / self.microbatch, "bytes": p["bytes"],
                         "tokens_per_s": recent.get(name, 0) / self.microbatch * self.tokens_per_microbatch / seconds}
        return out

    def dataset(self, name: str) -> list[Row]:
        """The rows of dataset `name` (one of DATASETS)."""
        if name not in DATASETS:
            raise KeyError(f"no dataset {name!r}: one of {list(DATASETS)}")
        return {"routing": self.routing, "traffic": self.traffic, "recent_marks": self.recent_marks,
                "swaps": self.swaps, "pool": self.pool.rows, "loads": lambda: self.live(self._loads),
                "router": lambda: self.live(self._router)}.get(
            name, lambda: list(getattr(self, f"_{name}")))()

    def datasets(self) -> dict[str, list[Row]]:
        """Every chart's rows, by dataset name (DATASETS)."""
        return {name: self.dataset(name) for name in DATASETS}

    def swaps(self) -> list[Row]:
        """The ATOM replicas' sub-model turns: each replica's last `swap_iterations` iterations
        within the timeline's window, one row per turn (the swap event plus `iteration` and
        `resident_from`)."""
        return [row for turns in self._swaps.values() for row in turns]

    def live(self, rows: Iterable[Row]) -> list[Row]:
        """The rows of peers still in the run: a killed or moved peer leaves the loads and router charts' legends."""
        return [r for r in rows if r["peer"] not in self.health.gone]

    def recent_marks(self) -> list[Row]:
        """The marks within the timeline's window (so old ones do not stretch its axis)."""
        oldest = self.now - self.w.timeline_s
        return [m for m in self._marks if m["t"] >= oldest]


_FOLDS = {"hop": Rows._hop, "step": Rows._step, "eval": Rows._eval, "load": Rows._load, "peer": Rows._peer_event,
          "setting": Rows._setting, "sync": Rows._sync, "run": Rows._run, "swap": Rows._swap,
          "router": Rows._router_view}


def rows_of_run(run_dir: str | Path) -> Rows:
    """The rows of the run (or `labkit simulate` output) in `run_dir`, from its events.jsonl and,
    where a real run left one, its config.json (for the codec and tokens per microbatch); a
    directory whose files do not read is one error naming the file (labkit.lab.rundir)."""
    config, events = read_run(run_dir)
    rows = Rows.for_config(config) if config else Rows()
    for number, event in enumerate(events, 1):
        try:
            rows.add(event)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
            raise event_error(run_dir, number, event, f"{type(exc).__name__}: {exc}") from None
    return rows


def hop_shares(events: Iterable[Event], window: tuple[float, float]) -> dict[str, float]:
    """Each peer's share of its stage's forward hops between times window[0] and window[1]."""
    rows = Rows(windows=Windows(routing_s=window[1] - window[0]))
    rows.extend(e for e in events if e["type"] == "hop" and window[0] <= e["t"] < window[1])
    return rows.shares()
