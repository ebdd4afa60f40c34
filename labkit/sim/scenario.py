"""What to simulate: peers, devices, links, model, trainers, churn and the rebalancing period.

Frozen keyword-only dataclasses; a bad value raises one `ConfigError` naming the field, the value
and what is allowed. `SimScenario.from_dict` reads the JSON scenario files of `labkit simulate`.
Sizes are bounded by what a laptop simulates (MAX_PEERS, MAX_SLOTS, MAX_BINS, MAX_ROUNDS below).
"""

from __future__ import annotations

import math
from dataclasses import MISSING, dataclass, fields
from pathlib import Path
from typing import Any

from labkit.config import ConfigError
from labkit.jsonfile import read_json
from labkit.sim.hardware import DEVICES, MODELS, model_shape
from labkit.sim.traces import ChurnModel, Trace, check_trace

# What one simulation may hold on a laptop; each bound names the arrays it keeps in check.
MAX_PEERS = 100_000  # initial peers plus joins: rows of the (peers x stages) service-time arrays
MAX_SLOTS = 100_000  # trainers x window microbatches in flight: rows of the (slots x stages) route arrays
MAX_BINS = 100_000  # duration / bin_seconds: rows of the (bins x stages) throughput and load arrays
MAX_ROUNDS = 100_000  # duration / rebalance_period: rebalancing rounds, each a pass over every peer
# What a network and a device can be, generously: the simulator's times stay finite (no inf or a
# division by zero from 1e308 ms or 1e-308 Mb/s)
MAX_MS = 3.6e6  # milliseconds of a round trip or of a block's fixed overhead: an hour
BANDWIDTH_MBPS = (1e-3, 1e9)  # Mb/s: 1 kbit/s to 1 Pbit/s
MAX_COMPRESSION = 1e6  # times smaller on the wire
CV_RANGE = (1e-3, 10.0)  # coefficient of variation of compute times, when not 0 (gamma shape 1/cv^2 stays finite)
MAX_SECONDS = 1e9  # a peer's move, the router's epsilon: about 30 years


def _check(ok: bool, owner: str, name: str, value: object, allowed: str) -> None:
    if not ok:
        raise ConfigError(owner, name, value, allowed)


def _num(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def check_network(owner: str, rtt_ms: object, bandwidth_mbps: object) -> None:
    """One ConfigError unless the round trip and bandwidth are ones a real link can have."""
    _check(_num(rtt_ms) and 0 <= rtt_ms <= MAX_MS, owner, "rtt_ms", rtt_ms,
           f"a number of milliseconds from 0 to {MAX_MS:g} (an hour)")
    low, high = BANDWIDTH_MBPS
    _check(_num(bandwidth_mbps) and low <= bandwidth_mbps <= high, owner, "bandwidth_mbps", bandwidth_mbps,
           f"a number of Mb/s > 0, from {low:g} (1 kbit/s) to {high:g} (1 Pbit/s)")


def _int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True, kw_only=True, slots=True)
class PeerGroup:
    """`count` peers of one device preset that start on `stage`, in network `region`."""

    device: str  # one of hardware.DEVICES
    count: int  # number of peers
    stage: int  # initial stage
    region: str = "default"  # network region (see SimScenario.links)

    def __post_init__(self) -> None:
        o = "PeerGroup"
        _check(isinstance(self.device, str) and self.device in DEVICES, o, "device", self.device,
               f"one of {sorted(DEVICES)}")
        _check(_int(self.count) and self.count >= 1, o, "count", self.count, "an integer >= 1")
        _check(_int(self.stage) and self.stage >= 0, o, "stage", self.stage, "an integer >= 0")
        _check(isinstance(self.region, str) and self.region != "", o, "region", self.region, "a non-empty name")


@dataclass(frozen=True, kw_only=True, slots=True)
class Link:
    """Round-trip time and bandwidth between regions `a` and `b` (either direction)."""

    a: str
    b: str
    rtt_ms: float  # round-trip latency in milliseconds
    bandwidth_mbps: float  # megabits per second

    def __post_init__(self) -> None:
        check_network("Link", self.rtt_ms, self.bandwidth_mbps)


@dataclass(frozen=True, kw_only=True, slots=True)
class SimScenario:
    """One simulated SWARM run.

    >>> s = SimScenario(peers=(PeerGroup(device="T4", count=2, stage=0), PeerGroup(device="T4", count=2, stage=1)),
    ...                 stages=2)
    >>> s.initial_peers
    4
    """

    name: str = "custom"  # label in reports
    model: str = "small"  # a GPT-2 family size of labkit.config or a SWARM App. F stack: base, xxlarge, gpt3
    stages: int = 4  # pipeline stages
    layer_split: tuple[int, ...] | None = None  # blocks per stage; None = as even as possible
    peers: tuple[PeerGroup, ...] = ()  # who serves which stage at t = 0
    join_device: str | None = None  # device of peers that join later; None = the first group's
    trainers: int = 4  # trainers routing microbatches
    window: int = 8  # microbatches each trainer keeps in flight
    trainer_region: str = "default"  # where trainers sit in the network
    microbatch: int = 4  # samples per microbatch
    seq_len: int = 512  # tokens per sample
    checkpointing: bool = False  # activation checkpointing: backward recomputes the forward
    efficiency: float = 0.3  # fraction of the device's fp16 tensor peak actually reached
    overhead_ms: float = 0.0  # fixed milliseconds per block and pass (kernel launches, framework)
    rtt_ms: float = 50.0  # round-trip latency of any pair of regions not in `links`
    bandwidth_mbps: float = 500.0  # bandwidth of any pair of regions not in `links`
    links: tuple[Link, ...] = ()  # per region pair overrides
    compression: float = 1.0  # activations and gradients are this many times smaller on the wire
    service_cv: float = 0.2  # coefficient of variation of compute times (gamma distributed)
    global_batch: int | None = None  # samples per optimizer step (all-reduce per stage); None = none
    boundary_seconds: float | None = None  # with a global batch: trainers wait at each step boundary (as the runtime's
    # do) for the step's last microbatch, then this many seconds in place of the modelled all-reduce; None = no barrier
    rebalance_period: float | None = None  # Algorithm 2 period T in seconds; None = no rebalancing
    move_seconds: float | None = None  # downtime of a moving peer; None = stage state / bandwidth
    directed_joins: bool = True  # with rebalancing, newcomers join the stage Algorithm 2 picks; else uniform
    load_estimate: str = "exact"  # fluid mode: Algorithm 2 reads the mean queues ("exact") or counts as the runtime
    # publishes them ("measured": one instantaneous draw per peer, records up to 2 announce periods old)
    announce_period: float = 1.0  # seconds between a peer's load records (labkit.backends.dask.dht.ANNOUNCE_PERIOD)
    host_cores: int | None = None  # events mode: every peer shares one host of this many cores, a computation waiting
    # for a free one (labkit's runtime on one machine without virtual devices); None = a device each
    routers: str = "shared"  # events mode: one IWRR router all trainers share, or one per "trainer" (the runtime's)
    relay: bool = False  # events mode: hops as labkit's runtime makes them (trainers relay: a middle stage's answer
    # carries a payload back; the last stage answers one loss request, forward and backward in one booking of its
    # peer); False = the paper's hops
    stream_chunks: int = 1  # events mode: payloads stream in this many chunks and a peer computes a chunk as soon
    # as it is in, so transfer hides behind compute (SWARM App. F); 1 = the whole payload first, then compute
    duration: float = 600.0  # simulated seconds
    trace: Trace = ()  # (time, change in peers) events
    churn: ChurnModel | None = None  # if set, the trace is generated from it (with `seed`)
    gamma: float = 0.1  # router EMA smoothing
    debias_ema: bool = True  # a peer's first answer replaces the router's prior (False: the paper's plain EMA)
    epsilon: float = 1e-6  # router entry priority above the stage minimum
    bin_seconds: float = 60.0  # width of the throughput-over-time bins
    seed: int = 0  # seeds the trace, the leaver draws and service noise

    def __post_init__(self) -> None:
        o = "Scenario"
        _check(self.model in MODELS, o, "model", self.model, f"one of {list(MODELS)}")
        _check(_int(self.stages) and 1 <= self.stages <= model_shape(self.model)[1], o, "stages", self.stages,
               f"an integer in [1, {model_shape(self.model)[1]}] (the model's blocks)")
        if self.layer_split is not None:
            split = tuple(self.layer_split)
            object.__setattr__(self, "layer_split", split)
            blocks = model_shape(self.model)[1]
            _check(len(split) == self.stages and all(_int(n) and n >= 1 for n in split) and sum(split) == blocks, o,
                   "layer_split", split, f"None or {self.stages} integers >= 1 summing to the model's {blocks} blocks")
        if isinstance(self.peers, list):
            object.__setattr__(self, "peers", tuple(self.peers))
        _check(isinstance(self.peers, tuple) and all(isinstance(g, PeerGroup) for g in self.peers), o, "peers",
               self.peers, "a list of PeerGroup")
        bad = [g.stage for g in self.peers if g.stage >= self.stages]
        _check(not bad, o, "peers", bad[:1], f"stages in [0, {self.stages})")
        empty = sorted(set(range(self.stages)) - {g.stage for g in self.peers})
        _check(not empty, o, "peers", f"stage {empty[0] if empty else ''} with no peers",
               f"at least one peer on every stage 0..{self.stages - 1}")
        _check(self.join_device is None or (isinstance(self.join_device, str) and self.join_device in DEVICES), o,
               "join_device", self.join_device, f"None or one of {sorted(DEVICES)}")
        for name in ("trainers", "window", "microbatch", "seq_len"):
            value = getattr(self, name)
            _check(_int(value) and value >= 1, o, name, value, "an integer >= 1")
        _check(isinstance(self.checkpointing, bool), o, "checkpointing", self.checkpointing, "True or False")
        _check(_num(self.efficiency) and 0 < self.efficiency <= 1, o, "efficiency", self.efficiency, "a number in (0, 1]")
        check_network(o, self.rtt_ms, self.bandwidth_mbps)
        _check(_num(self.overhead_ms) and 0 <= self.overhead_ms <= MAX_MS, o, "overhead_ms", self.overhead_ms,
               f"a number of milliseconds from 0 to {MAX_MS:g} (an hour)")
        _check(_num(self.service_cv) and (self.service_cv == 0 or CV_RANGE[0] <= self.service_cv <= CV_RANGE[1]), o,
               "service_cv", self.service_cv, f"0 (no noise) or a number from {CV_RANGE[0]:g} to {CV_RANGE[1]:g}")
        if isinstance(self.links, list):
            object.__setattr__(self, "links", tuple(self.links))
        _check(all(isinstance(k, Link) for k in self.links), o, "links", self.links, "a list of Link")
        _check(_num(self.compression) and 1 <= self.compression <= MAX_COMPRESSION, o, "compression", self.compression,
               f"a number from 1 to {MAX_COMPRESSION:g}")
        _check(self.global_batch is None or (_int(self.global_batch) and self.global_batch >= self.microbatch), o,
               "global_batch", self.global_batch, f"None or an integer >= microbatch={self.microbatch}")
        _check(self.boundary_seconds is None or (self.global_batch is not None and _num(self.boundary_seconds)
                                                 and 0 <= self.boundary_seconds <= MAX_SECONDS), o, "boundary_seconds",
               self.boundary_seconds, f"None, or with a global batch a number of seconds from 0 to {MAX_SECONDS:g}")
        for name in ("rebalance_period", "move_seconds"):
            value = getattr(self, name)
            low = 0 if name == "move_seconds" else 1e-9
            _check(value is None or (_num(value) and low <= value <= MAX_SECONDS), o, name, value,
                   "None or a finite number of seconds " + (">= 0" if low == 0 else "> 0") + f", at most {MAX_SECONDS:g}")
        _check(isinstance(self.directed_joins, bool), o, "directed_joins", self.directed_joins, "True or False")
        _check(self.load_estimate in ("exact", "measured"), o, "load_estimate", self.load_estimate,
               "'exact' or 'measured'")
        _check(_num(self.announce_period) and 0 <= self.announce_period <= MAX_SECONDS, o, "announce_period",
               self.announce_period, f"a number of seconds from 0 to {MAX_SECONDS:g}")
        _check(_int(self.stream_chunks) and 1 <= self.stream_chunks <= 1_000_000, o, "stream_chunks",
               self.stream_chunks, "an integer from 1 (no overlap) to 1,000,000")
        for name in ("duration", "bin_seconds"):
            value = getattr(self, name)
            _check(_num(value) and value > 0, o, name, value, "a finite number of seconds > 0")
        object.__setattr__(self, "trace", check_trace(self.trace))
        _check(self.churn is None or isinstance(self.churn, ChurnModel), o, "churn", self.churn, "None or a ChurnModel")
        _check(self.churn is None or not self.trace, o, "trace", self.trace, "empty when churn generates the trace")
        _check(_num(self.gamma) and 0 < self.gamma <= 1, o, "gamma", self.gamma, "a number in (0, 1]")
        _check(isinstance(self.debias_ema, bool), o, "debias_ema", self.debias_ema, "True or False")
        _check(isinstance(self.relay, bool), o, "relay", self.relay, "True or False")
        _check(self.routers in ("shared", "trainer"), o, "routers", self.routers, "'shared' or 'trainer'")
        _check(self.host_cores is None or (_int(self.host_cores) and 1 <= self.host_cores <= 4096), o, "host_cores",
               self.host_cores, "None or an integer number of cores from 1 to 4096")
        _check(_num(self.epsilon) and 0 <= self.epsilon <= MAX_SECONDS, o, "epsilon", self.epsilon,
               f"a number from 0 to {MAX_SECONDS:g}")
        _check(_int(self.seed) and 0 <= self.seed < 2**32, o, "seed", self.seed,
               "an integer >= 0 and < 2^32 (the seed range of numpy and numba)")
        self._check_sizes()

    def _check_sizes(self) -> None:
        """Bound what the simulator allocates and loops over (see MAX_PEERS and the others)."""
        o = "Scenario"
        _check(self.trainers * self.window <= MAX_SLOTS, o, "trainers", self.trainers,
               f"trainers x window (here {self.window}) at most {MAX_SLOTS:,} microbatches in flight")
        _check(self.duration / self.bin_seconds <= MAX_BINS, o, "duration", self.duration,
               f"at most {MAX_BINS:,} bins of bin_seconds={self.bin_seconds:g} s: shorten the run or widen the bins")
        if self.rebalance_period is not None:
            _check(self.duration / self.rebalance_period <= MAX_ROUNDS, o, "rebalance_period", self.rebalance_period,
                   f"at least duration / {MAX_ROUNDS:,} = {self.duration / MAX_ROUNDS:g} s (at most "
                   f"{MAX_ROUNDS:,} rebalancing rounds)")
        joins = self.peer_slots - self.initial_peers
        _check(self.peer_slots <= MAX_PEERS, o, "peers", f"{self.initial_peers:,} + {joins:,.0f} joining",
               f"at most {MAX_PEERS:,} peers, initial plus (expected) joins")
        leaves = -sum(d for _, d in self.trace if d < 0)
        _check(leaves <= MAX_PEERS, o, "trace", f"{leaves:,} leaving", f"at most {MAX_PEERS:,} leaving peers in all")

    @property
    def initial_peers(self) -> int:
        return sum(g.count for g in self.peers)

    @property
    def peer_slots(self) -> float:
        """Initial peers plus the trace's joins (the churn model's expected joins)."""
        joins = self.churn.hours * self.churn.join_per_hour if self.churn else sum(d for _, d in self.trace if d > 0)
        return self.initial_peers + joins

    @property
    def joins_by_policy(self) -> bool:
        """Whether newcomers take `rebalance_join`'s stage (rebalancing on and directed joins)."""
        return self.rebalance_period is not None and self.directed_joins

    def events_trace(self) -> Trace:
        """The membership trace: the churn model's (seeded) if set, else `trace`."""
        return self.churn.trace(self.initial_peers, self.seed) if self.churn else self.trace

    @classmethod
    def from_dict(cls, data: Any) -> SimScenario:
        """A scenario from JSON-like data (peers, links and churn as nested dicts)."""
        _check(isinstance(data, dict), "Scenario", "json", type(data).__name__, "an object of SimScenario fields")
        data = dict(data)
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ConfigError("Scenario", unknown[0], data[unknown[0]], f"unknown field; fields are {sorted(names)}")
        nested = {"peers": PeerGroup, "links": Link}
        for key, kind in nested.items():
            if key in data:
                _check(isinstance(data[key], list) and all(isinstance(x, dict) for x in data[key]), "Scenario", key,
                       data[key], f"a list of {kind.__name__} objects")
                data[key] = tuple(_build(kind, x) for x in data[key])
        if isinstance(data.get("churn"), dict):
            data["churn"] = _build(ChurnModel, data["churn"])
        return cls(**data)

    @classmethod
    def load(cls, path: str | Path) -> SimScenario:
        """A scenario from a JSON file; every bad file raises one ConfigError (FileNotFoundError if missing)."""
        return cls.from_dict(read_json(path, "Scenario", "a JSON file of SimScenario fields"))


def _build(kind: type, data: dict[str, Any]) -> Any:
    names = {f.name for f in fields(kind)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ConfigError(kind.__name__, unknown[0], data[unknown[0]], f"unknown field; fields are {sorted(names)}")
    required = [f.name for f in fields(kind) if f.default is MISSING]
    missing = [n for n in required if n not in data]
    _check(not missing, kind.__name__, missing[0] if missing else "", None, "a value: the field is required")
    return kind(**data)
