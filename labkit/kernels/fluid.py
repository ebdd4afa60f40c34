"""Fluid (interval) model of a SWARM pipeline for long churn traces, as one numba loop.

Between events (a trace change, a rebalancing tick, a migration finishing) membership is fixed,
so throughput is a closed form: IWRR's fixed point gives every peer work in proportion to its
speed, each stage serves sum(1/service) microbatches/s and the pipeline runs at the slowest
stage, capped by the trainers' window over the round trip (Little's law) and slowed by the
all-reduce at every global batch. Joins and moves use `rebalance_join` / `rebalance_move`,
fed with M/G/1 queue estimates (exact means, or the runtime's published counts drawn around them,
`labkit.kernels.measured_load`), so the decisions are the policy's own. Twin: `fluid_run.py_func`.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from labkit.kernels.measured_load import measured_queues
from labkit.kernels.rebalance import rebalance_join, rebalance_move

JOINED, KILLED, MOVED, READY = 0, 1, 2, 3


@njit(cache=True)
def balanced_stages(live: np.ndarray, service: np.ndarray, num_stages: int) -> np.ndarray:
    """A perfectly balanced stage for each `live` peer (-1 for the others).

    Greedy water-filling: fastest peers first, each to the stage with the least capacity so far.
    For identical peers this maximises the minimum stage capacity exactly (every peer adds the
    same capacity, so topping up the current minimum is optimal); for mixed devices it is a
    feasible assignment, so the optimum it yields is a lower bound.
    """
    out = np.full(live.shape[0], -1, np.int64)
    idx = np.nonzero(live)[0]
    speed = np.zeros(idx.shape[0])
    for j in range(idx.shape[0]):
        for s in range(num_stages):
            speed[j] += 1.0 / service[idx[j], s]
    cap = np.zeros(num_stages)
    for j in np.argsort(-speed, kind="mergesort"):
        i = idx[j]
        best = 0
        for s in range(1, num_stages):
            if cap[s] < cap[best]:
                best = s
        cap[best] += 1.0 / service[i, best]
        out[i] = best
    return out


@njit(cache=True)
def in_system(rho: float, cv: float) -> float:
    """Pollaczek-Khinchine mean number in an M/G/1 system at utilisation rho (< 1)."""
    return rho + rho * rho * (1.0 + cv * cv) / (2.0 * (1.0 - rho))


@njit(cache=True)
def pipeline_rate(stage: np.ndarray, ready: np.ndarray, service: np.ndarray, num_stages: int, window: int,
                  hop: np.ndarray, cv: float, group: int, ar_time: np.ndarray, ar_rtt: float) -> tuple[float, np.ndarray]:
    """(throughput, per-stage capacity) of the current membership, microbatches per second.

    The trainers keep `window` microbatches in flight; they sit either on the wire (throughput x
    network seconds per microbatch, Little's law) or at a peer, which holds M/G/1's mean number in
    system at utilisation x / capacity of its stage. A microbatch crosses each stage twice; the
    network seconds of a crossing average `hop[i]` (peer i's round trip + payload) with IWRR's
    weights 1 / response time, so near peers count more, as the router prefers them. The x that
    balances this population (bisection below the slowest stage's capacity) is the throughput. `group` microbatches make a global
    batch (0 = no all-reduce); a stage of n peers then all-reduces in 2(n-1)/n * ar_time[s] +
    2 * ar_rtt seconds (butterfly all-reduce), during which nobody computes.
    """
    cap = np.zeros(num_stages)
    counts = np.zeros(num_stages)
    weight = np.zeros(num_stages)
    wire = np.zeros(num_stages)
    for i in range(stage.shape[0]):
        s = stage[i]
        if s >= 0 and ready[i]:
            cap[s] += 1.0 / service[i, s]
            counts[s] += 1.0
            weight[s] += 1.0 / (2.0 * hop[i] + service[i, s])
            wire[s] += 2.0 * hop[i] / (2.0 * hop[i] + service[i, s])
    top = cap.min()
    if top <= 0.0:
        return 0.0, cap
    trip = 0.0
    for s in range(num_stages):
        trip += wire[s] / weight[s]
    lo, hi = 0.0, top
    for _ in range(50):
        x = 0.5 * (lo + hi)
        population = x * trip
        for s in range(num_stages):
            population += counts[s] * in_system(x / cap[s], cv)
        if population > window:
            hi = x
        else:
            lo = x
    x = lo
    if group > 0:
        t_ar = 0.0
        for s in range(num_stages):
            n = counts[s]
            if n > 1:
                t_ar = max(t_ar, 2.0 * (n - 1.0) / n * ar_time[s] + 2.0 * ar_rtt)
        x = group / (group / x + t_ar)
    return x, cap


@njit(cache=True)
def optimum_rate(stage: np.ndarray, service: np.ndarray, num_stages: int, window: int, hop: np.ndarray, cv: float,
                 group: int, ar_time: np.ndarray, ar_rtt: float) -> float:
    """Throughput of the live peers (stage >= 0) all serving at once, on the better of two
    layouts: balanced by `balanced_stages`, or where they are now. The balanced one is optimal for
    identical peers; with mixed devices or a planned placement the present one can beat it, so
    taking both keeps the optimum at or above what the live peers achieve where they stand."""
    live = stage >= 0
    balanced = balanced_stages(live, service, num_stages)
    x_balanced = pipeline_rate(balanced, balanced >= 0, service, num_stages, window, hop, cv, group, ar_time, ar_rtt)[0]
    x_present = pipeline_rate(stage, live, service, num_stages, window, hop, cv, group, ar_time, ar_rtt)[0]
    return max(x_balanced, x_present)


@njit(cache=True)
def fluid_queues(stage: np.ndarray, ready: np.ndarray, service: np.ndarray, num_stages: int, window: int,
                 hop: np.ndarray, cv: float) -> np.ndarray:
    """Per-peer queue lengths (M/G/1 mean number in system) that Algorithm 2 reads."""
    x, cap = pipeline_rate(stage, ready, service, num_stages, window, hop, cv, 0, np.zeros(1), 0.0)
    q = np.zeros(stage.shape[0])
    for i in range(stage.shape[0]):
        s = stage[i]
        if s >= 0 and ready[i]:
            q[i] = in_system(x / cap[s], cv)
    return q


@njit(cache=True)
def pick_leaver(stage: np.ndarray, u: float, v: float, num_stages: int) -> int:
    """A uniformly drawn stage among those with peers, then a uniformly drawn peer of it."""
    counts = np.zeros(num_stages, np.int64)
    for i in range(stage.shape[0]):
        if stage[i] >= 0:
            counts[stage[i]] += 1
    nonempty = np.nonzero(counts)[0]
    if nonempty.shape[0] == 0:
        return -1
    s = nonempty[min(int(u * nonempty.shape[0]), nonempty.shape[0] - 1)]
    k = min(int(v * counts[s]), counts[s] - 1)
    for i in range(stage.shape[0]):
        if stage[i] == s:
            if k == 0:
                return i
            k -= 1
    return -1


@njit(cache=True)
def fluid_run(stage: np.ndarray, service: np.ndarray, hop: np.ndarray, ev_t: np.ndarray, ev_delta: np.ndarray,
              ev_u: np.ndarray, ev_v: np.ndarray, num_stages: int, window: int, group: int, ar_time: np.ndarray,
              ar_rtt: float, cv: float, period: float, directed: bool, move_seconds: np.ndarray, duration: float,
              bin_seconds: float, log_t: np.ndarray, log_peer: np.ndarray, log_stage: np.ndarray,
              log_code: np.ndarray, announce: float,
              draws: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """Run the fluid model from t = 0 to `duration`; returns (work, optimal, busy, peer_sec, n_log).

    stage[i]: initial stage of peer slot i, -1 for slots that join later (in slot order);
    service[i, s]: seconds per microbatch of peer i at stage s; ev_*: unit trace events (+1 join,
    -1 leave) with uniform draws u (stage) and v (peer); period: rebalancing T (0 = never);
    directed: joiners take `rebalance_join`'s stage, else a uniform one drawn with u;
    move_seconds[s]: download time to serve stage s. draws: empty = Algorithm 2 reads the exact
    mean queues; else uniforms for `measured_queues` (records up to 2 x `announce` seconds old).
    work/optimal: microbatches done / possible per bin; busy[b, s] / peer_sec[b, s]: busy /
    serving peer-seconds of stage s in bin b.
    """
    n_bins = int(np.ceil(duration / bin_seconds))
    work = np.zeros(n_bins)
    optimal = np.zeros(n_bins)
    busy = np.zeros((n_bins, num_stages))
    peer_sec = np.zeros((n_bins, num_stages))
    ready_at = np.zeros(stage.shape[0])
    ready = stage >= 0
    next_slot = 0
    while next_slot < stage.shape[0] and stage[next_slot] >= 0:
        next_slot += 1
    n_log = 0
    t, k = 0.0, 0
    next_tick = period if period > 0 else np.inf
    dirty = True
    x, x_opt = 0.0, 0.0
    cap = np.zeros(num_stages)
    n_ready = np.zeros(num_stages)
    measured = draws.shape[0] > 0
    q_now, q_before, t_change, n_draw = np.zeros(stage.shape[0]), np.zeros(stage.shape[0]), 0.0, 0
    while t < duration:
        if dirty:  # membership changed: recompute throughput and the optimum of the live peers
            if measured:  # the means the published counts scatter around, before and since the change
                q_before, t_change = q_now, t
                q_now = fluid_queues(stage, ready, service, num_stages, window, hop, cv)
            x, cap = pipeline_rate(stage, ready, service, num_stages, window, hop, cv, group, ar_time, ar_rtt)
            x_opt = optimum_rate(stage, service, num_stages, window, hop, cv, group, ar_time, ar_rtt)
            n_ready = np.zeros(num_stages)
            for i in range(stage.shape[0]):
                if stage[i] >= 0 and ready[i]:
                    n_ready[stage[i]] += 1.0
            dirty = False
        t_next = min(duration, next_tick, ev_t[k] if k < ev_t.shape[0] else np.inf)
        for i in range(stage.shape[0]):
            if stage[i] >= 0 and not ready[i]:
                t_next = min(t_next, ready_at[i])
        # integrate the constant rates over [t, t_next), split at bin edges
        a = t
        while a < t_next:
            b = min(int(a / bin_seconds), n_bins - 1)
            e = min(t_next, (b + 1) * bin_seconds)
            work[b] += x * (e - a)
            optimal[b] += x_opt * (e - a)
            for s in range(num_stages):
                peer_sec[b, s] += n_ready[s] * (e - a)
                if cap[s] > 0:
                    busy[b, s] += x / cap[s] * (e - a) * n_ready[s]
            a = e
        t = t_next
        if t >= duration:
            break
        for i in range(stage.shape[0]):  # migrations and downloads that finish now
            if stage[i] >= 0 and not ready[i] and ready_at[i] <= t:
                ready[i] = True
                dirty = True
                n_log = _log(log_t, log_peer, log_stage, log_code, n_log, t, i, stage[i], READY)
        while k < ev_t.shape[0] and ev_t[k] <= t:
            if ev_delta[k] < 0:
                i = pick_leaver(stage, ev_u[k], ev_v[k], num_stages)
                if i >= 0:
                    n_log = _log(log_t, log_peer, log_stage, log_code, n_log, t, i, stage[i], KILLED)
                    stage[i] = -1
                    ready[i] = False
            elif next_slot < stage.shape[0]:
                i = next_slot
                next_slot += 1
                if directed:
                    serving = np.where(ready, stage, -1)
                    if measured:
                        q, n_draw = measured_queues(serving, q_now, q_before, t - t_change, announce, draws, n_draw)
                    else:
                        q = fluid_queues(stage, ready, service, num_stages, window, hop, cv)
                    stage[i] = rebalance_join(serving, q, num_stages)
                else:
                    stage[i] = min(int(ev_u[k] * num_stages), num_stages - 1)
                ready[i] = False
                ready_at[i] = t + move_seconds[stage[i]]
                n_log = _log(log_t, log_peer, log_stage, log_code, n_log, t, i, stage[i], JOINED)
            dirty = True
            k += 1
        if next_tick <= t:  # Algorithm 2 on the published queues of the peers that serve now
            serving = np.where(ready, stage, -1)
            if measured:
                q, n_draw = measured_queues(serving, q_now, q_before, t - t_change, announce, draws, n_draw)
            else:
                q = fluid_queues(stage, ready, service, num_stages, window, hop, cv)
            i, source, target = rebalance_move(serving, q, np.arange(stage.shape[0]), num_stages)
            if i >= 0:
                stage[i] = target
                ready[i] = False
                ready_at[i] = t + move_seconds[target]
                dirty = True
                n_log = _log(log_t, log_peer, log_stage, log_code, n_log, t, i, target, MOVED)
            next_tick += period
    return work, optimal, busy, peer_sec, n_log


@njit(cache=True)
def _log(log_t, log_peer, log_stage, log_code, n, t, peer, stage, code):
    if n < log_t.shape[0]:
        log_t[n], log_peer[n], log_stage[n], log_code[n] = t, peer, stage, code
    return n + 1
