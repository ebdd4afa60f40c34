"""Fine granularity: every microbatch hop, with trainers, peer queues, churn and rebalancing.

The numba loop `run_until` moves microbatches; between its calls this driver applies the trace
(leavers drawn by `pick_leaver`, uniformly over stages as in SWARM App. I), joins (stage from
`rebalance_join`, or uniform without rebalancing), Algorithm 2 every T seconds on the peers'
real queue lengths (`rebalance_move`), and downloads that keep joiners and movers idle a while.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import numpy as np

from labkit import events
from labkit.config import ConfigError
from labkit.kernels.eventsim import PARKED, RETRY, run_until, seed_noise
from labkit.kernels.fluid import optimum_rate, pick_leaver
from labkit.kernels.iwrr import INITIAL_EMA, iwrr_entry
from labkit.kernels.rebalance import rebalance_join, rebalance_move
from labkit.sim.result import SimResult
from labkit.sim.scenario import SimScenario
from labkit.sim.world import World, build_world

MAX_HOPS = 1_000_000  # hop events kept: each is an event in memory and a line of events.jsonl
MAX_PEER_RECORDS = 5_000_000  # rebalancing rounds x peers: every round records each serving peer


class _Swarm:
    """Mutable arrays of one event simulation plus the bookkeeping of membership changes."""

    def __init__(self, s: SimScenario, w: World, max_hops: int) -> None:
        self.s, self.w, S, P, W = s, w, s.stages, len(w.names), s.trainers * s.window
        self.stage, self.ready_at = w.stage0.copy(), np.full(P, np.inf)
        self.ready_at[self.stage >= 0] = 0.0
        self.free_at, self.qlen, self.epoch = np.zeros(P), np.zeros(P, np.int64), np.zeros(P, np.int64)
        # a router per trainer as the runtime's (a row of priorities, EMAs and their weights each), or one for all
        routers = s.trainers if s.routers == "trainer" else 1
        self.prio, self.ema, self.order = np.zeros((routers, P)), np.zeros((routers, P)), np.zeros(P, np.int64)
        self.weight = np.zeros((routers, P))  # share of each EMA that is measured (labkit.kernels.iwrr.ema_fold)
        self.banned, self.counter = np.ones(P, np.bool_), 0
        self.cores = np.zeros((s.host_cores or 0, W, 2))  # each core's bookings (start, end) on a shared host
        self.router = (self.prio, self.ema, self.weight, self.order, self.banned, s.gamma, s.window if routers > 1 else W,
                       np.zeros((routers, S), np.bool_))
        for i in np.nonzero(self.stage >= 0)[0]:
            self.announce(int(i))
        # every slot starts by issuing its first hop at t = 0 (a sorted array is a valid heap), but
        # with a step barrier only as many as the first step has microbatches: the rest wait
        barrier = s.boundary_seconds is not None and w.group > 0
        first = min(W, w.group) if barrier else W
        self.slots = (np.where(np.arange(W) < first, 0, PARKED).astype(np.int64), np.full((W, S), -1, np.int64),
                      np.zeros((W, S), np.int64), np.zeros(W), np.arange(W, dtype=np.int64))
        self.heap = (np.zeros(W), np.arange(W, dtype=np.int64), np.arange(W, dtype=np.int64),
                     np.full(W, RETRY, np.int64), np.array([first, W], np.int64))
        self.counters = np.array([first, 0, 0, first, first], np.int64)
        n = np.arange(P + 2, dtype=float)
        t_ar = np.where(n > 1, 2 * (n - 1) / np.maximum(n, 1) * w.ar_time[:, None] + 2 * w.ar_rtt, 0.0)
        self.sync = (w.group, t_ar, float(s.boundary_seconds) if barrier else -1.0)
        bins = math.ceil(s.duration / s.bin_seconds)
        self.work, self.busy, self.optimal = np.zeros(bins), np.zeros((bins, S)), np.zeros(bins)
        self.peer_seconds = np.zeros((bins, S))
        self.out = (self.work, self.busy, s.bin_seconds, np.zeros(100_000), np.zeros(1, np.int64))
        self.hops = (np.zeros(max_hops), np.zeros(max_hops, np.int64), np.zeros(max_hops, np.int64),
                     np.zeros(max_hops, np.int64), np.zeros(max_hops, np.int64), np.zeros(max_hops),
                     np.zeros(max_hops, np.int64), np.zeros(1, np.int64))
        self.service = w.fwd + w.bwd

    def announce(self, i: int) -> None:
        """Peer i starts serving its stage: it enters the router as `Router.announce` does."""
        s = int(self.stage[i])
        for r in range(self.prio.shape[0]):
            self.prio[r, i], self.ema[r, i] = iwrr_entry(self.stage, self.prio[r], self.ema[r], self.banned, s,
                                                         self.s.epsilon, INITIAL_EMA)
        self.weight[:, i] = 0.0 if self.s.debias_ema else 1.0
        self.counter += 1
        self.order[i], self.banned[i] = self.counter, False

    def leave(self, i: int, new_stage: int, t: float) -> None:
        """Peer i stops serving: it left (new_stage -1) or downloads `new_stage`'s state."""
        self.stage[i], self.banned[i], self.qlen[i] = new_stage, True, 0
        self.epoch[i] += 1
        self.ready_at[i] = np.inf if new_stage < 0 else t + self.w.move_seconds[new_stage]
        self.free_at[i] = self.ready_at[i] if new_stage >= 0 else 0.0

    def serving(self) -> np.ndarray:
        return np.where(self.banned, -1, self.stage)

    def rate_of_optimum(self) -> float:
        s, w = self.s, self.w
        return optimum_rate(self.stage, self.service, s.stages, s.trainers * s.window, w.hop_seconds, s.service_cv,
                            w.group, w.ar_time, w.ar_rtt)

    def advance(self, t_end: float) -> None:
        w, s = self.w, self.s
        links = (w.hop_rtt / 2, w.hop_rtt / 2, w.hop_seconds - w.hop_rtt, float(s.stream_chunks), s.relay)
        run_until(t_end, s.stages, (self.stage, self.free_at, self.qlen, self.epoch),
                  self.router, (w.fwd, w.bwd, s.service_cv, self.cores),
                  links, self.slots, self.heap, self.counters, self.sync, self.out, self.hops)


def check_events(s: SimScenario, max_hops: int) -> None:
    """Raise one ConfigError if an events-mode run of `s` would keep more than MAX_HOPS hops or
    MAX_PEER_RECORDS peer records."""
    if not (isinstance(max_hops, int) and not isinstance(max_hops, bool) and 0 <= max_hops <= MAX_HOPS):
        raise ConfigError("simulate", "max_hops", max_hops, f"an integer from 0 to {MAX_HOPS:,} (hop events kept)")
    if s.peer_slots * s.duration / (s.rebalance_period or math.inf) > MAX_PEER_RECORDS:
        raise ConfigError("Scenario", "rebalance_period", s.rebalance_period,
                          f"at least {s.peer_slots * s.duration / MAX_PEER_RECORDS:g} s for {s.peer_slots:,.0f} peers "
                          f"in events mode: every round records each peer, at most {MAX_PEER_RECORDS:,} records "
                          "(or use the fluid mode)")


def run_events(s: SimScenario, world: World | None = None, *, max_hops: int = 200_000,
               progress: Callable[[float], None] | None = None, loads: bool = False,
               moves: list[tuple[float, int, int]] | None = None, join_stages: list[int] | None = None) -> SimResult:
    """Simulate `s` microbatch by microbatch; hop, peer, step and run events (hops capped), and
    with `loads` every serving peer's queue length each `bin_seconds` (load events, as the
    runtime publishes them). `moves`: (seconds, peer index, stage) moves made at those times
    instead of Algorithm 2's rounds, and `join_stages`: the stages the trace's joins take, in turn
    (a real run's membership decisions replayed; a move whose peer is not serving then is skipped).

    `progress(t)` is called with the virtual time reached after each membership segment.
    """
    start = time.perf_counter()
    check_events(s, max_hops)
    w = world or build_world(s)
    seed_noise(s.seed)
    sw = _Swarm(s, w, max_hops)
    out = [events.run(0.0, state="started", reason=f"event simulation of {s.name}")]
    out += [events.peer(0.0, peer=w.names[i], stage=int(sw.stage[i]), state="joined", queue=0)
            for i in np.nonzero(sw.stage >= 0)[0]]
    period = (s.rebalance_period or math.inf) if moves is None else math.inf
    scripted, m = sorted(moves or []), 0
    initial = int((w.stage0 >= 0).sum())  # the trace's n-th join takes peer index initial + n
    next_tick, k, next_slot, t = period, 0, initial, 0.0
    next_load = s.bin_seconds if loads else math.inf
    rank = np.arange(len(w.names), dtype=np.int64)
    x_opt = sw.rate_of_optimum()
    while t < s.duration:
        pending = sw.ready_at[sw.banned & (sw.stage >= 0)]
        t_next = min(s.duration, next_tick, next_load, w.ev_t[k] if k < len(w.ev_t) else math.inf,
                     pending.min(initial=math.inf), scripted[m][0] if m < len(scripted) else math.inf)
        _spread(sw.optimal, x_opt, t, t_next, s.bin_seconds)
        per_stage = np.bincount(sw.serving()[sw.serving() >= 0], minlength=s.stages)
        for stage in range(s.stages):
            _spread(sw.peer_seconds[:, stage], float(per_stage[stage]), t, t_next, s.bin_seconds)
        sw.advance(t_next)
        if progress is not None:
            progress(t_next)
        t = t_next
        if t >= s.duration:
            break
        for i in np.nonzero(sw.banned & (sw.stage >= 0) & (sw.ready_at <= t))[0]:
            sw.announce(int(i))
            out.append(events.peer(t, peer=w.names[i], stage=int(sw.stage[i]), state="alive", queue=0))
        while k < len(w.ev_t) and w.ev_t[k] <= t:
            if w.ev_delta[k] < 0:
                i = pick_leaver(sw.stage, w.ev_u[k], w.ev_v[k], s.stages)
                if i >= 0:
                    out.append(events.peer(t, peer=w.names[i], stage=int(sw.stage[i]), state="killed", queue=int(sw.qlen[i])))
                    sw.leave(i, -1, t)
            elif next_slot < len(w.names):
                i, next_slot = next_slot, next_slot + 1
                joined = (join_stages[i - initial] if join_stages is not None and i - initial < len(join_stages)
                          else rebalance_join(sw.serving(), sw.qlen.astype(float), s.stages) if s.joins_by_policy
                          else min(int(w.ev_u[k] * s.stages), s.stages - 1))
                sw.leave(i, int(joined), t)
                out.append(events.peer(t, peer=w.names[i], stage=int(joined), state="joined", queue=0))
            k += 1
        while m < len(scripted) and scripted[m][0] <= t:
            _, i, target = scripted[m]
            m += 1
            if sw.serving()[i] >= 0 and sw.stage[i] != target:
                sw.leave(i, target, t)
                out.append(events.peer(t, peer=w.names[i], stage=target, state="moved", queue=0))
        if next_load <= t:
            out += [events.load(t, peer=w.names[i], stage=int(sw.stage[i]), queue=int(sw.qlen[i]))
                    for i in np.nonzero(sw.serving() >= 0)[0]]
            next_load += s.bin_seconds
        if next_tick <= t:
            out += [events.peer(t, peer=w.names[i], stage=int(sw.stage[i]), state="alive", queue=int(sw.qlen[i]))
                    for i in np.nonzero(sw.serving() >= 0)[0]]
            i, source, target = rebalance_move(sw.serving(), sw.qlen.astype(float), rank, s.stages)
            if i >= 0:
                sw.leave(int(i), int(target), t)
                out.append(events.peer(t, peer=w.names[i], stage=int(target), state="moved", queue=0))
            next_tick += period
        x_opt = sw.rate_of_optimum()
    out += _hop_and_step_events(s, w, sw)
    out.append(events.run(s.duration, state="finished"))
    entered, finished, lost = (int(c) for c in sw.counters[:3])
    redone = sw.sync[2] >= 0  # with a step barrier a lost microbatch is redone within its step, not entered again
    counters = {"entered": entered, "finished": finished, "lost": lost,
                "in_flight": entered - finished - (0 if redone else lost)}
    return SimResult(mode="events", bin_seconds=s.bin_seconds, samples_per_microbatch=s.microbatch, work=sw.work,
                     optimal=sw.optimal, stage_busy=sw.busy, peer_seconds=sw.peer_seconds, events=out,
                     counters=counters, wall_seconds=time.perf_counter() - start)


def _spread(bins: np.ndarray, rate: float, a: float, b: float, width: float) -> None:
    """Add rate x time over [a, b) into fixed-width bins; the last bin takes whatever is past it.
    A boundary `a` that `a / width` rounds to just below its bin index counts in the next bin, so
    rounding can never leave the loop without progress."""
    last = len(bins) - 1
    while a < b:
        k = min(int(a / width), last)
        if k < last and (k + 1) * width <= a:
            k += 1
        e = b if k == last else min(b, (k + 1) * width)
        bins[k] += rate * (e - a)
        a = e


def _hop_and_step_events(s: SimScenario, w: World, sw: _Swarm) -> list[events.Event]:
    hop_t, hop_slot, hop_stage, hop_peer, hop_dir, hop_sec, hop_mb, hop_box = sw.hops
    n = min(int(hop_box[0]), len(hop_t))
    out = [events.hop(float(hop_t[j]), trainer=f"trainer-{hop_slot[j] // s.window}", stage=int(hop_stage[j]),
                      peer=w.names[hop_peer[j]], direction=events.DIRECTIONS[hop_dir[j]],
                      nbytes=int(w.activation_bytes), seconds=float(hop_sec[j]), microbatch=int(hop_mb[j]),
                      link_seconds=float(w.hop_seconds[hop_peer[j]]))
           for j in range(n)]
    step_t, step_box = sw.out[3], sw.out[4]
    samples = w.group * s.microbatch
    out += [events.step(float(step_t[j]), step=j + 1, loss=math.nan, samples=samples, tokens=samples * s.seq_len)
            for j in range(min(int(step_box[0]), len(step_t)))]
    return sorted(out, key=lambda e: e["t"])
