"""The task pool paper's setting compiled for the virtual-time comparison of the task pool and SWARM: a
clustering `Plan` on a `NetworkScenario` (its devices, per-pair delay and bandwidth), a model
`Workload`, and the disconnection draws both methods share.

Every device of a plan stage computes: clients and, as Eq. 1's second line has it, the stage's
servers. A pass of a slice costs its tokens x the stage's layers x the block's FLOPs per token
(one third forward, two thirds backward) over the device's FLOP/s, the planner's own units; a
transfer from i to j costs delay + bytes / bandwidth (nothing from a device to itself).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from labkit.plan.network import NetworkScenario
from labkit.plan.plan import Plan
from labkit.plan.workload import Workload


@dataclass(frozen=True)
class PsStage:
    """Device indices of one stage: frontal servers, backward servers, every computing member."""

    frontal: tuple[int, ...]
    backward: tuple[int, ...]
    members: tuple[int, ...]


@dataclass(frozen=True, eq=False)
class PsWorld:
    """Numbers both simulations run on; `tokens` per microbatch, `microbatches` per batch."""

    names: tuple[str, ...]
    reliable: np.ndarray  # (N,) committed devices (never disconnect)
    stages: tuple[PsStage, ...]
    fwd: np.ndarray  # (N, K) forward seconds per token of device i at stage k
    delay: np.ndarray  # (N, N) seconds
    bandwidth: np.ndarray  # (N, N) bytes per second
    bytes_per_token: float  # activations (= gradients) of one token at a stage boundary
    tokens: int
    microbatches: int
    slack: float = 3.0  # a task is given up on after grace + slack x its expected seconds
    grace: float = 1.0

    @property
    def bwd(self) -> np.ndarray:
        return 2.0 * self.fwd

    def hop(self, i: int, j: int, tokens: int) -> float:
        """Seconds to move `tokens` tokens' activations (or gradients) from device i to device j."""
        return 0.0 if i == j else float(self.delay[i, j] + tokens * self.bytes_per_token / self.bandwidth[i, j])

    def speed(self, i: int, k: int) -> float:
        """Tokens per second device i turns around at stage k: fetch from the slowest frontal server,
        forward, send to the slowest backward server (what the servers measure of a client)."""
        st = self.stages[k]
        wire = sum(max((self.bytes_per_token / self.bandwidth[s, t] for s, t in pairs if s != t), default=0.0)
                   for pairs in ([(f, i) for f in st.frontal], [(i, b) for b in st.backward]))
        return 1.0 / (self.fwd[i, k] + wire)


@dataclass(frozen=True)
class BatchRun:
    """One simulated batch: its seconds and its forward work in token-stage runs."""

    seconds: float
    forward_runs: int  # tokens x stages run forward (recomputations included)
    lost: int  # forward runs whose result died with a device (the lost slices)
    repeated_beyond_lost: int  # forward runs beyond one per token-stage plus one per loss


def ps_world(network: NetworkScenario, plan: Plan, workload: Workload, **timeouts: float) -> PsWorld:
    """Compile `plan` on `network` for `workload`; `timeouts` may set slack and grace."""
    index = {name: i for i, name in enumerate(network.names())}
    stages = []
    for st in plan.stages:
        servers = [d for d, r in zip(st.devices, st.roles) if r != "client"] or list(st.devices)
        fs = st.with_role("frontal") or tuple(servers)
        bs = st.with_role("backward") or tuple(servers)
        stages.append(PsStage(tuple(index[d] for d in fs), tuple(index[d] for d in bs),
                              tuple(index[d] for d in st.devices)))
    flops = np.array([d.flops for d in network.devices])
    per_token = workload.layer_flops_per_token() / 3.0 * np.array(plan.layer_split, dtype=float)
    return PsWorld(names=tuple(network.names()), reliable=np.array([d.reliable for d in network.devices]),
                   stages=tuple(stages), fwd=per_token[None, :] / flops[:, None], delay=network.delay,
                   bandwidth=network.bandwidth, bytes_per_token=workload.d_model * workload.bytes_per_value,
                   tokens=workload.microbatch * workload.seq_len, microbatches=workload.minibatches(), **timeouts)


def disconnections(world: PsWorld, rate: float, seed: int) -> dict[int, float]:
    """The task pool paper's §4.1 case 4 / §4.2: each unreliable device vanishes during the batch with
    probability `rate`, at a uniform fraction of it (it is back for the next batch)."""
    rng = np.random.default_rng(seed)
    drops = {}
    for i in np.flatnonzero(~world.reliable):
        hit, when = rng.random(), rng.random()
        if hit < rate:
            drops[int(i)] = float(when)
    return drops
