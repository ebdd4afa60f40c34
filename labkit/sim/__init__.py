"""SWARM at internet scale in virtual time: devices, links, churn traces, two granularities.

`simulate(scenario)` runs a `SimScenario` either microbatch by microbatch (`mode="events"`) or as a
fluid model over intervals of constant membership (`mode="fluid"`, for 32-hour traces). Both apply
the real routing (IWRR) and rebalancing (Algorithm 2) kernels and emit `labkit.events` dicts.
"""

from __future__ import annotations

from labkit.sim.events_sim import run_events
from labkit.sim.fluid import run_fluid
from labkit.sim.result import SimResult
from labkit.sim.scenario import Link, PeerGroup, SimScenario
from labkit.sim.traces import ChurnModel

MODES = ("events", "fluid")


def simulate(scenario: SimScenario, mode: str = "events") -> SimResult:
    """Run `scenario` microbatch by microbatch ("events") or as the interval model ("fluid")."""
    if mode not in MODES:
        raise ValueError(f"mode={mode!r} is not allowed: one of {list(MODES)}")
    return run_events(scenario) if mode == "events" else run_fluid(scenario)


__all__ = ["ChurnModel", "Link", "PeerGroup", "SimResult", "SimScenario", "simulate", "MODES"]
