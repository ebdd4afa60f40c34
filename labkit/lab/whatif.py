"""What-if beside the real run: the live swarm's measured peer speeds, scaled up in the simulator.

`measured_speeds` reads each live peer's service time from its hop events; `what_if_scenario`
builds the same swarm `scale` times larger on a chosen network with churn; `what_if` runs it with
the fluid (numba) kernel with rebalancing on and off and reports each one's tokens/s and % of
its own optimum (its live peers all serving, best placed: `labkit.sim.summary`), in seconds.
Without rebalancing nobody moves, so a swarm that starts balanced stays near 100 %; each move
costs a download, so compare the tokens/s to see which is faster. `live_error` asks the same
model to predict the live run itself (1x, the network its hops measured, no churn) against what
the run measured: the what-if's own error, which the lab shows beside its answers
(labkit/lab/whatif_panel.py).
"""

from __future__ import annotations

import dataclasses
import time
from collections import deque
from collections.abc import Iterable
from typing import Any

import altair as alt
import numpy as np

from labkit.config import ConfigError, RunConfig
from labkit.events import Event
from labkit.lab.health import GONE
from labkit.sim import ChurnModel, PeerGroup, SimScenario
from labkit.sim.fluid import run_fluid
from labkit.sim.summary import percent_of_optimal, throughput_series
from labkit.sim.scenario import MAX_SLOTS
from labkit.sim.world import World, build_world

SAMPLE_HOPS = 256  # sliding window: the last hops of each peer and direction that count
QUANTILE = 0.1  # of those round trips, the one taken as the service time (see measured_speeds)
CODEC_BYTES = {"fp32": 4.0, "fp16": 2.0, "bf16": 2.0, "int8": 1.0}  # bytes per activation value on the wire
SIM_WIRE_BYTES = 2.0  # bytes per value the simulator's cost model assumes before `compression`
DEFAULT_PERIOD = 300.0  # rebalancing period (s) when the run has rebalancing off: the paper's T
MAX_SCALE = 1000  # replicas of each measured peer
MAX_PEERS = 20_000  # simulated initial peers: keeps one what-if within seconds
MAX_RTT_MS = 10_000.0
MAX_BANDWIDTH_MBPS = 1_000_000.0
MAX_CHURN_PER_HOUR = 10_000.0
MAX_DURATION_S = 7 * 86_400.0
MAX_WINDOW = 1024
BINS = 120  # points of the throughput series
PLACEHOLDER = "press Simulate to scale the live swarm up"  # the chart before the first what-if


@dataclasses.dataclass(frozen=True)
class PeerSpeed:
    """One live peer's measured service time: seconds per microbatch, forward plus backward."""

    peer: str
    stage: int
    seconds: float
    hops: int  # round trips the estimate rests on


def measured_speeds(events: Iterable[Event], config: RunConfig, *, window: int = SAMPLE_HOPS,
                    quantile: float = QUANTILE) -> dict[str, PeerSpeed]:
    """Per live peer (by name): its stage and seconds per microbatch, from its hop events.

    A hop's `seconds` is a trainer's round trip: queueing at the peer, the peer's compute and the
    wire. Per peer and direction this takes the `quantile` (default 10 %) of its last `window`
    round trips: the fast tail is the hops that met an empty queue, so it approximates pure
    service time, yet unlike the minimum it is not set by one lucky timer reading. A peer's time is
    forward plus backward; on the last stage the "forward" request also computes loss and
    backward, so it is the whole time there. Peers that were killed, moved, banned or left are
    dropped, and so are peers not yet measured in both directions.
    """
    trips: dict[tuple[str, str], deque[float]] = {}
    stage: dict[str, int] = {}
    gone: set[str] = set()
    for e in events:
        if e["type"] == "hop":
            trips.setdefault((e["peer"], e["direction"]), deque(maxlen=window)).append(e["seconds"])
            stage[e["peer"]] = e["stage"]
        elif e["type"] == "peer":
            (gone.add if e["state"] in GONE else gone.discard)(e["peer"])
    last = config.stages - 1
    out: dict[str, PeerSpeed] = {}
    for peer in sorted(set(stage) - gone):
        directions = ("forward",) if stage[peer] == last else ("forward", "backward")
        if all((peer, d) in trips for d in directions):
            seconds = sum(float(np.quantile(trips[peer, d], quantile)) for d in directions)
            out[peer] = PeerSpeed(peer=peer, stage=stage[peer], seconds=seconds, hops=len(trips[peer, "forward"]))
    return out


def _knob(ok: bool, name: str, value: object, allowed: str) -> None:
    if not ok:
        raise ConfigError("WhatIf", name, value, allowed)


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and np.isfinite(value)


def check_knobs(speeds: dict[str, PeerSpeed], config: RunConfig, *, scale: int, rtt_ms: float,
                bandwidth_mbps: float, churn_per_hour: float, duration_s: float, window: int) -> None:
    """Raise one ConfigError (knob, value, what is allowed), or ValueError if a stage is unmeasured."""
    if not speeds:
        raise ValueError("nothing measured yet: the run has no hops from a live peer (wait for its first step)")
    unmeasured = sorted(set(range(config.stages)) - {s.stage for s in speeds.values()})
    if unmeasured:
        raise ValueError(f"nothing measured yet on stage {unmeasured[0]}: no hops from a live peer there")
    _knob(isinstance(scale, int) and not isinstance(scale, bool) and 1 <= scale <= MAX_SCALE, "scale", scale,
          f"an integer in [1, {MAX_SCALE}] (copies of each measured peer)")
    _knob(len(speeds) * scale <= MAX_PEERS, "scale", scale,
          f"at most {MAX_PEERS // len(speeds)} here: {len(speeds)} measured peers x scale at most {MAX_PEERS:,}")
    _knob(_number(rtt_ms) and 0 <= rtt_ms <= MAX_RTT_MS, "rtt_ms", rtt_ms, f"a number of ms in [0, {MAX_RTT_MS:g}]")
    _knob(_number(bandwidth_mbps) and 0 < bandwidth_mbps <= MAX_BANDWIDTH_MBPS, "bandwidth_mbps", bandwidth_mbps,
          f"a number of Mb/s in (0, {MAX_BANDWIDTH_MBPS:g}]")
    _knob(_number(churn_per_hour) and 0 <= churn_per_hour <= MAX_CHURN_PER_HOUR, "churn_per_hour", churn_per_hour,
          f"a number of joins plus leaves per hour in [0, {MAX_CHURN_PER_HOUR:g}]")
    _knob(_number(duration_s) and 60 <= duration_s <= MAX_DURATION_S, "duration_s", duration_s,
          f"a number of simulated seconds in [60, {MAX_DURATION_S:g}]")
    _knob(isinstance(window, int) and not isinstance(window, bool) and 1 <= window <= MAX_WINDOW, "window", window,
          f"an integer in [1, {MAX_WINDOW}] (microbatches each trainer keeps in flight; the runtime's keep 1)")
    _knob(config.trainers * scale * window <= MAX_SLOTS, "window", window,
          f"trainers ({config.trainers}) x scale x window at most {MAX_SLOTS:,} microbatches in flight")


def activation_bytes(config: RunConfig) -> float:
    """Bytes of one microbatch's boundary activations on the wire: d_model x seq_len x microbatch
    x the codec's bytes per value, divided by the boundary layers' factor if any."""
    m = config.model
    factor = config.compression.factor if config.compression.boundary != "none" else 1
    return m.d_model * m.seq_len * config.microbatch * CODEC_BYTES[config.compression.codec] / factor


def what_if_scenario(speeds: dict[str, PeerSpeed], config: RunConfig, *, scale: int = 10, rtt_ms: float = 100.0,
                     bandwidth_mbps: float = 100.0, churn_per_hour: float = 6.0, duration_s: float = 4 * 3600.0,
                     window: int = 1, seed: int = 0) -> SimScenario:
    """The measured swarm `scale` times larger, on one network, with churn, rebalancing on.

    `peers[j]` holds `scale` copies of the j-th measured peer (name order); their device is a
    placeholder, since SimScenario describes peers by device preset only: `measured_world` sets
    their measured service times. Trainers and the global batch grow with the swarm (a DiLoCo run
    syncs every inner_steps batches). Each trainer keeps `window` microbatches in flight: 1 as the
    runtime's trainers do; more asks what if they pipelined as SWARM's do. Churn: `churn_per_hour`
    membership changes, half joins and half leaves, so the population hovers around its start.
    Rebalancing period: the run's, or DEFAULT_PERIOD if the run has it off.
    """
    check_knobs(speeds, config, scale=scale, rtt_ms=rtt_ms, bandwidth_mbps=bandwidth_mbps,
                churn_per_hour=churn_per_hour, duration_s=duration_s, window=window)
    peers = tuple(PeerGroup(device="T4", count=scale, stage=s.stage) for _, s in sorted(speeds.items()))
    n = len(peers) * scale
    churn = None if churn_per_hour == 0 else ChurnModel(
        hours=duration_s / 3600.0, join_per_hour=churn_per_hour / 2, leave_per_peer_hour=churn_per_hour / 2 / n)
    sync_every = config.sync.inner_steps if config.sync.mode == "diloco" else 1
    # SimScenario.compression must be >= 1 (fp16 or smaller); fp32's payload comes from measured_world
    compression = max(1.0, SIM_WIRE_BYTES * config.microbatch * config.model.seq_len * config.model.d_model
                      / activation_bytes(config))
    return SimScenario(
        name=f"what-if {scale}x", model=config.model.size, stages=config.stages, layer_split=config.layer_split,
        peers=peers, trainers=config.trainers * scale, window=window, microbatch=config.microbatch,
        seq_len=config.model.seq_len, checkpointing=config.activation_checkpointing, rtt_ms=float(rtt_ms),
        bandwidth_mbps=float(bandwidth_mbps), compression=compression,
        global_batch=config.global_batch * scale * sync_every,
        rebalance_period=config.rebalance_period or DEFAULT_PERIOD, duration=float(duration_s), churn=churn,
        bin_seconds=duration_s / BINS, seed=seed)


def measured_world(scenario: SimScenario, speeds: dict[str, PeerSpeed], config: RunConfig) -> World:
    """`scenario` compiled with the measured service times in place of the placeholder device.

    A peer's speed relative to the median of its stage carries to every stage: service[i, s] =
    (its seconds / its stage's median) x stage s's median, so a peer twice as slow is twice as
    slow wherever Algorithm 2 moves it. Peers that join later take the measured peers' speeds in
    turn. Only the sum of forward and backward matters to the fluid kernel; it is split 1:2.
    """
    ordered = [s for _, s in sorted(speeds.items())]
    base = np.array([np.median([s.seconds for s in ordered if s.stage == k]) for k in range(scenario.stages)])
    relative = np.array([s.seconds / base[s.stage] for s in ordered])
    world = build_world(scenario)
    slots = world.fwd.shape[0]
    initial = np.repeat(np.arange(len(ordered)), [g.count for g in scenario.peers])
    joiners = np.arange(slots - initial.size) % len(ordered)
    service = relative[np.concatenate([initial, joiners])][:, None] * base[None, :]
    return dataclasses.replace(world, fwd=service / 3.0, bwd=service * 2.0 / 3.0,
                               activation_bytes=activation_bytes(config))


@dataclasses.dataclass(frozen=True)
class WhatIfResult:
    """% of optimal with and without rebalancing (each of its own optimum), tokens/s per bin, wall seconds."""

    scale: int
    rtt_ms: float
    bandwidth_mbps: float
    churn_per_hour: float
    peers: int  # simulated peers at the start
    with_rebalancing: float  # % of optimal
    without_rebalancing: float
    series: list[dict[str, Any]]  # rows: t (virtual s), tokens_per_s, run ("with/without rebalancing", "optimal")
    seconds: float  # wall time of both simulations

    def mean_tokens_per_s(self, run: str) -> float:
        """Simulated tokens/s of `run` ("with rebalancing", "without rebalancing", "optimal"), all bins."""
        return float(np.mean([row["tokens_per_s"] for row in self.series if row["run"] == run]))

    def line(self) -> str:
        """One line for the panel: each run's tokens/s and % of its optimum, and what the optimum is."""
        return (f"{self.scale}x peers at {self.rtt_ms:g} ms, {self.bandwidth_mbps:g} Mb/s, "
                f"{self.churn_per_hour:g} churn/h: with rebalancing {self.mean_tokens_per_s('with rebalancing'):,.0f} "
                f"tokens/s ({self.with_rebalancing:.1f} % of its optimum), without {self.mean_tokens_per_s('without rebalancing'):,.0f} "
                f"tokens/s ({self.without_rebalancing:.1f} %); optimum: the same live peers all serving, best placed ({self.seconds:.1f} s)")


def what_if(speeds: dict[str, PeerSpeed], config: RunConfig, **knobs: Any) -> WhatIfResult:
    """Simulate `what_if_scenario(speeds, config, **knobs)` with rebalancing on and off (fluid kernel)."""
    start = time.perf_counter()
    on = what_if_scenario(speeds, config, **knobs)
    runs = {"with rebalancing": on, "without rebalancing": dataclasses.replace(on, rebalance_period=None)}
    results = {name: run_fluid(s, measured_world(s, speeds, config), with_events=False) for name, s in runs.items()}
    tokens = config.model.seq_len
    series = [{"t": row["t"], "tokens_per_s": row["samples_per_s"] * tokens, "run": name}
              for name, r in results.items() for row in throughput_series(r)]
    series += [{"t": row["t"], "tokens_per_s": row["optimal_samples_per_s"] * tokens, "run": "optimal"}
               for row in throughput_series(results["with rebalancing"])]
    return WhatIfResult(scale=on.peers[0].count, rtt_ms=on.rtt_ms, bandwidth_mbps=on.bandwidth_mbps,
                        churn_per_hour=2.0 * on.churn.join_per_hour if on.churn else 0.0, peers=on.initial_peers,
                        with_rebalancing=percent_of_optimal(results["with rebalancing"]),
                        without_rebalancing=percent_of_optimal(results["without rebalancing"]),
                        series=series, seconds=time.perf_counter() - start)


def live_error(events: list[Event], config: RunConfig) -> tuple[float, float] | None:
    """(predicted, measured) tokens/s of the live run itself, or None before two steps: the what-if
    at 1x on the network its hops measured (their round trips include it), no churn, the run's
    rebalancing and in-flight microbatches; measured over its steps after the first."""
    steps = [e for e in events if e["type"] == "step"]
    if len(steps) < 2 or steps[-1]["t"] <= steps[0]["t"]:
        return None
    measured = sum(e["tokens"] for e in steps[1:]) / (steps[-1]["t"] - steps[0]["t"])
    result = what_if(measured_speeds(events, config), config, scale=1, rtt_ms=0.0, bandwidth_mbps=MAX_BANDWIDTH_MBPS,
                     churn_per_hour=0.0, duration_s=600.0, window=config.inflight)
    return result.mean_tokens_per_s("with rebalancing" if config.rebalance_period else "without rebalancing"), measured


def whatif_chart(result: WhatIfResult | None) -> alt.TopLevelMixin:
    """Simulated tokens/s over time with and without rebalancing, and the optimum of the run with it."""
    rows = result.series if result else []
    title = (f"What-if: {result.peers} peers ({result.scale}x the live run), simulated tokens/s"
             if result else "What-if: simulated tokens/s (press Simulate)")
    lines = alt.Chart(alt.Data(values=rows)).mark_line().encode(
        x=alt.X("t:Q", title="simulated seconds"),
        y=alt.Y("tokens_per_s:Q", title="simulated tokens/s"),
        color=alt.Color("run:N", title="simulated run"),
        strokeDash=alt.StrokeDash("run:N", legend=None),
    ).properties(title=title, width=360, height=220)
    if result:
        return lines
    hint = alt.Chart(alt.Data(values=[{"text": PLACEHOLDER}])).mark_text(fontSize=13, color="#666").encode(
        text="text:N", x=alt.value(180), y=alt.value(110))  # the middle of the empty plot
    return lines + hint
