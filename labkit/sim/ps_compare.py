"""The task pool paper's comparison in virtual time: the task pool against SWARM on the same world and the
same disconnection draws (Table 2, Figure 2). A draw is a fraction of the batch, placed on each
method's own undisturbed batch time, so that every disconnection falls inside the batch for both.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from labkit.plan.network import NetworkScenario
from labkit.sim.ps_swarm import swarm_batch
from labkit.sim.ps_taskpool import taskpool_batch
from labkit.sim.ps_world import BatchRun, PsWorld, disconnections

METHODS: dict[str, Callable[..., BatchRun]] = {"taskpool": taskpool_batch, "swarm": swarm_batch}


def batch_stats(world: PsWorld, method: str, rate: float, batches: int, seed: int = 0) -> dict[str, float]:
    """Mean seconds, lost and repeated forward runs per batch over `batches` draws at `rate`."""
    run = METHODS[method]
    clean = run(world)
    draws = [disconnections(world, rate, seed + b) for b in range(batches)] if rate > 0 else []
    results = [run(world, {i: f * clean.seconds for i, f in d.items()}) for d in draws] or [clean]
    return {"seconds": float(np.mean([r.seconds for r in results])), "lost": float(np.mean([r.lost for r in results])),
            "repeated_beyond_lost": float(np.mean([r.repeated_beyond_lost for r in results])),
            "clean_seconds": clean.seconds}


def with_unreliable(network: NetworkScenario, count: int) -> NetworkScenario:
    """`network` with exactly `count` unreliable devices: the slowest first, then from the end
    of the device list (the task pool paper's §4.2 unreliable ratio over one fixed set of devices)."""
    order = sorted(range(network.n), key=lambda i: (network.devices[i].flops, -i))
    chosen = set(order[:count])
    devices = tuple(dataclasses.replace(d, reliable=i not in chosen) for i, d in enumerate(network.devices))
    return dataclasses.replace(network, name=f"{network.name}-u{count}", devices=devices)
