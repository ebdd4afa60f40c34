"""The task pool paper's setting compiled for the virtual-time comparison of the task pool and SWARM: a
clustering `Plan` on a `NetworkScenario` (its devices, per-pair delay and bandwidth), a model
`Workload`, and the disconnection draws both methods share.

Every device of a plan stage computes: clients and, as Eq. 1's second line has it, the stage's
servers. A pass of a slice costs its tokens x the stage's layers x the block's FLOPs per token
(one third forward, two thirds backward) over the device's FLOP/s, the planner's own units; a
transfer from i to j costs delay + bytes / bandwidth (nothing from a device to itself). Activations
cross only the boundaries between stages (the paper's §3.2: the FS "receive forward activations
from their predecessors", the BS "pass the activations to the next stage"): stage 0 has no
predecessor and takes the batch's token ids; the last stage has no successor and turns the loss
around where its forward ran, as a SWARM peer does.
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
    input_bytes_per_token: float = 8.0  # stage 0's input: one int64 token id per token

    @property
    def bwd(self) -> np.ndarray:
        return 2.0 * self.fwd

    def hop(self, i: int, j: int, tokens: int, per_token: float | None = None) -> float:
        """Seconds to move `tokens` tokens' activations (or gradients, or `per_token` bytes each) from i to j."""
        size = self.bytes_per_token if per_token is None else per_token
        return 0.0 if i == j else float(self.delay[i, j] + tokens * size / self.bandwidth[i, j])

    def fetch_bytes(self, k: int) -> float:
        """Bytes per token a client of stage k fetches for a forward: token ids at stage 0, else activations."""
        return self.input_bytes_per_token if k == 0 else self.bytes_per_token

    def speed(self, i: int, k: int) -> float:
        """Tokens per second device i turns around at stage k: fetch from the slowest frontal server,
        forward, send to the slowest backward server (none at the last stage; what the servers measure)."""
        st = self.stages[k]
        sends = [(i, b) for b in st.backward] if k < len(self.stages) - 1 else []
        wire = sum(max((size / self.bandwidth[s, t] for s, t in pairs if s != t), default=0.0)
                   for size, pairs in ((self.fetch_bytes(k), [(f, i) for f in st.frontal]), (self.bytes_per_token, sends)))
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
