"""A `SimScenario` compiled to the arrays both simulators run on: service times, links, trace draws.

Hop model: a trainer sends a microbatch's boundary activations (or, backward, their gradients)
to a peer and gets the answer back: one round trip plus one payload over the trainer-peer link,
so each stage boundary is crossed once per direction as in a pipeline. Compute: FLOPs of the
stage over the device's `efficiency` x fp16 tensor peak, plus `overhead_ms` per block and pass.
All-reduces and state downloads use the scenario's default link (rtt_ms, bandwidth_mbps).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from labkit.sim.hardware import service_seconds
from labkit.sim.links import join_group, region_link
from labkit.sim.scenario import SimScenario
from labkit.sim.seats import world_costs

ADAM_STATE_BYTES = 12.0  # fp32 parameters + two Adam moments: what a migrating peer downloads
GRAD_BYTES = 2.0  # fp16 gradients in the all-reduce


@dataclass(frozen=True)
class World:
    """Numeric form of a scenario. Slot i is a peer; slots past the initial peers join later."""

    names: list[str]  # peer name per slot
    devices: list[str]  # device preset per slot
    stage0: np.ndarray  # (P,) initial stage, -1 for slots that join later
    fwd: np.ndarray  # (P, S) forward seconds per microbatch of peer i at stage s
    bwd: np.ndarray  # (P, S) backward seconds
    hop_rtt: np.ndarray  # (P,) round trip between the trainers' region and the peer's
    hop_bytes_s: np.ndarray  # (P,) bandwidth of that link, bytes per second
    activation_bytes: float  # payload of one hop
    ev_t: np.ndarray  # unit membership events: time
    ev_delta: np.ndarray  # +1 join, -1 leave
    ev_u: np.ndarray  # uniform draw choosing the stage
    ev_v: np.ndarray  # uniform draw choosing the peer within the stage
    ar_time: np.ndarray  # (S,) seconds to send one copy of the stage's gradients
    ar_rtt: float  # round trip used by the all-reduce
    move_seconds: np.ndarray  # (S,) download time of a stage's state
    group: int  # microbatches per global batch, 0 = no all-reduce

    @property
    def hop_seconds(self) -> np.ndarray:
        """(P,) network seconds of one hop to each peer, without queueing."""
        return self.hop_rtt + self.activation_bytes / self.hop_bytes_s


def download_seconds(s: SimScenario, stage_params: Sequence[float]) -> np.ndarray:
    """(S,) seconds a joining or moving peer downloads a stage's state before it serves: the
    scenario's `move_seconds`, else the stage's fp32 parameters and Adam moments over the default link."""
    if s.move_seconds is not None:
        return np.full(s.stages, float(s.move_seconds))
    return np.array(stage_params, dtype=float) * ADAM_STATE_BYTES / (s.bandwidth_mbps * 1e6 / 8.0)


def build_world(s: SimScenario) -> World:
    """Compile a scenario: initial peers in group order, then one slot per join of the trace."""
    costs = world_costs(s)  # the runtime's virtual devices and joiners' downloads price the same
    trace = s.events_trace()
    joins = sum(d for _, d in trace if d > 0)
    joiner = join_group(s)
    groups = [(g.device, g.region, g.stage) for g in s.peers for _ in range(g.count)]
    groups += [(s.join_device or joiner.device, joiner.region, -1)] * joins
    devices = [d for d, _, _ in groups]
    per_device = {d: service_seconds(costs, d, s.efficiency, s.overhead_ms) for d in set(devices)}
    fwd = np.array([per_device[d][0] for d in devices]).reshape(len(devices), s.stages)
    bwd = np.array([per_device[d][1] for d in devices]).reshape(len(devices), s.stages)
    links = [region_link(s, s.trainer_region, r) for _, r, _ in groups]
    rtt0, bw0 = s.rtt_ms / 1e3, s.bandwidth_mbps * 1e6 / 8.0
    rng = np.random.default_rng([s.seed, 1])
    unit = [(t, 1 if d > 0 else -1) for t, d in trace for _ in range(abs(d))]
    # one stage draw per trace event (SWARM App. I: an event's removed peers leave one uniformly
    # random stage), so a burst of preemptions empties one stage, not a spread of them
    event_u = rng.random(len(trace))
    stage_u = np.array([u for (_, d), u in zip(trace, event_u) for _ in range(abs(d))])
    params = np.array(costs.stage_params, dtype=float)
    return World(
        names=[f"peer-{i:05d}" for i in range(len(groups))], devices=devices,
        stage0=np.array([st for _, _, st in groups], np.int64), fwd=fwd, bwd=bwd,
        hop_rtt=np.array([r for r, _ in links]), hop_bytes_s=np.array([b for _, b in links]),
        activation_bytes=costs.activation_bytes,
        ev_t=np.array([t for t, _ in unit], float), ev_delta=np.array([d for _, d in unit], np.int64),
        ev_u=stage_u, ev_v=rng.random(len(unit)),
        ar_time=params * GRAD_BYTES / s.compression / bw0, ar_rtt=rtt0,
        move_seconds=download_seconds(s, costs.stage_params),
        group=0 if s.global_batch is None else -(-s.global_batch // s.microbatch))
