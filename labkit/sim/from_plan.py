"""Simulate a planner's `Plan`: its devices serve its stages, over its scenario's network.

Each plan stage becomes peer groups (one per device kind and region), the network becomes one
`Link` per region pair (round trip = delay there and back, bandwidth = the slower direction,
each averaged over the device pairs between the two regions), and the plan's layer split is
rescaled to the simulated model's depth. Runtime and simulator then run the same plan.
"""

from __future__ import annotations

from collections import Counter
from itertools import combinations
from typing import Any

import numpy as np

from labkit.config import ConfigError
from labkit.plan.network import NetworkScenario
from labkit.plan.plan import Plan, rescale_split
from labkit.sim.hardware import DEVICES, model_shape
from labkit.sim.scenario import Link, PeerGroup, SimScenario


def scenario_from_plan(plan: Plan, network: NetworkScenario, *, model: str = "small",
                       **settings: Any) -> SimScenario:
    """A simulator scenario running `plan` on `network`'s devices and links; `settings` are other
    `SimScenario` fields (duration, trainers, rebalance_period, ...).

    >>> scenario_from_plan(plan, presets.dtfm_world(), model="small", duration=60)  # doctest: +SKIP
    """
    device = {d.name: d for d in network.devices}
    missing = sorted({n for s in plan.stages for n in s.devices} - set(device))
    if missing:
        raise ConfigError("scenario_from_plan", "plan", missing[:3], f"devices of the network {network.name!r}")
    groups = []
    for stage, s in enumerate(plan.stages):
        for (kind, region), count in sorted(Counter((device[n].kind, device[n].region or "default") for n in s.devices).items()):
            if kind not in DEVICES:
                raise ConfigError("scenario_from_plan", "kind", kind, f"a device the simulator knows: one of {sorted(DEVICES)}")
            groups.append(PeerGroup(device=kind, count=count, stage=stage, region=region))
    regions = sorted({g.region for g in groups})
    index = {r: [i for i, d in enumerate(network.devices) if (d.region or "default") == r] for r in regions}
    links = []
    for a, b in combinations(regions, 2):
        pairs = np.ix_(index[a], index[b])
        rtt = float(np.mean(network.delay[pairs] + network.delay.T[pairs]))
        bandwidth = float(np.mean(np.minimum(network.bandwidth[pairs], network.bandwidth.T[pairs])))
        links.append(Link(a=a, b=b, rtt_ms=rtt * 1e3, bandwidth_mbps=bandwidth * 8 / 1e6))
    split = rescale_split(plan.layer_split, model_shape(model)[1])
    return SimScenario(name=f"{plan.method}:{plan.scenario}", model=model, stages=len(plan.stages), layer_split=split,
                       peers=tuple(groups), links=tuple(links), trainer_region=regions[0], **settings)
