"""Coarse granularity: the fluid model over intervals of constant membership (32-hour traces)."""

from __future__ import annotations

import time

import numpy as np

from labkit import events
from labkit.kernels.fluid import JOINED, KILLED, MOVED, READY, fluid_run
from labkit.sim.result import SimResult
from labkit.sim.scenario import SimScenario
from labkit.sim.world import World, build_world

_STATES = {JOINED: "joined", KILLED: "killed", MOVED: "moved", READY: "alive"}
LOAD_DRAWS = 1 << 20  # uniforms the measured load estimate cycles through (2 per peer and round)


def load_draws(s: SimScenario) -> np.ndarray:
    """The uniforms of `s`'s measured load estimate (seeded by the scenario), none for exact loads."""
    if s.load_estimate == "exact":
        return np.zeros(0)
    return np.random.default_rng([s.seed, 2]).random(LOAD_DRAWS)


def run_fluid(s: SimScenario, world: World | None = None, *, with_events: bool = True) -> SimResult:
    """Simulate `s` with the fluid kernel; peer events (joined/killed/moved/alive) if asked."""
    start = time.perf_counter()
    w = world or build_world(s)
    service = w.fwd + w.bwd
    cap = 4 * (len(w.ev_t) + int(s.duration / s.rebalance_period if s.rebalance_period else 0)) + 16
    log_t, log_peer = np.zeros(cap), np.zeros(cap, np.int64)
    log_stage, log_code = np.zeros(cap, np.int64), np.zeros(cap, np.int64)
    work, optimal, busy, peer_sec, n_log = fluid_run(
        w.stage0.copy(), service, w.hop_seconds, w.ev_t, w.ev_delta, w.ev_u, w.ev_v, s.stages,
        s.trainers * s.window, w.group, w.ar_time, w.ar_rtt, s.service_cv, s.rebalance_period or 0.0, s.joins_by_policy,
        w.move_seconds, s.duration, s.bin_seconds, log_t, log_peer, log_stage, log_code, s.announce_period,
        load_draws(s))
    out: list[events.Event] = []
    if with_events:
        out.append(events.run(0.0, state="started", reason=f"fluid simulation of {s.name}"))
        out += [events.peer(0.0, peer=w.names[i], stage=int(w.stage0[i]), state="joined", queue=0)
                for i in np.nonzero(w.stage0 >= 0)[0]]
        for k in range(min(n_log, cap)):
            out.append(events.peer(float(log_t[k]), peer=w.names[log_peer[k]], stage=int(log_stage[k]),
                                   state=_STATES[int(log_code[k])], queue=0))
        out.append(events.run(s.duration, state="finished"))
    return SimResult(mode="fluid", bin_seconds=s.bin_seconds, samples_per_microbatch=s.microbatch, work=work,
                     optimal=optimal, stage_busy=busy, peer_seconds=peer_sec, events=out,
                     wall_seconds=time.perf_counter() - start)
