"""How fast a peer answers: at full speed, slowed down on purpose (demos, tests), or at the speed
of the virtual device it emulates.

A peer on a virtual device (a preset of the simulator, labkit/sim/hardware.py, given by the
run's world file) computes the run's model for real, so training stays exact, and then holds each
request until the time that device would take for the world's model and microbatch, by the
simulator's own cost model. The world's model may be far larger than the run's (SWARM's xxlarge
priced, nano trained), so that 2 CPU cores keep up with dozens of virtual GPUs. A
request whose real compute took longer than its emulated time is an overrun: it is answered at
once and its hop's timing says by how much (`overrun`, next to `emulated`), since the world then
runs slower than the one it describes. A SWARM peer that joins or moves serves nothing until the
state download the simulator charges it has passed (`join_seconds`), however fast its real start.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from labkit.config import RunConfig
from labkit.runtime.links import load_links
from labkit.sim.scenario import SimScenario
from labkit.sim.seats import device_table, peer_device, world_costs
from labkit.sim.world import download_seconds


def payload_scale(cfg: RunConfig, scenario: SimScenario | None) -> float:
    """How many bytes a world's link counts for each byte the run sends a trainer-peer hop: the
    world's model's activations of one microbatch (fp16, less its `compression`) over the run's
    fp32 ones, so its links carry the world's payloads; 1 outside a world. (A stage's ring is
    not scaled: it carries the run's own gradients.)"""
    if cfg.world is None:
        return 1.0
    return world_costs(scenario).activation_bytes / (cfg.microbatch * cfg.model.seq_len * cfg.model.d_model * 4)


class Pacing:
    """Paces one peer's data requests; `died()` is the error a kill raises in a held request."""

    def __init__(self, killed: threading.Event, died: Callable[[], Exception],
                 table: tuple[list[float], list[float]] | None = None) -> None:
        self.killed, self.died = killed, died
        self.delay = 0.0  # extra seconds per request: makes a peer slow on purpose
        self.table = table  # the virtual device's (forward, backward) seconds per stage; None = real speed
        self.last: dict[str, float] = {}  # the last request's emulated seconds and overrun (its timing)
        self.overruns = 0  # requests whose real compute took longer than the device would have

    def emulated(self, method: str, stage: int) -> float:
        """Seconds the virtual device takes for `method` at `stage` (the last stage's loss request
        is its forward and backward)."""
        fwd, bwd = self.table
        return {"forward": fwd[stage], "backward": bwd[stage], "loss": fwd[stage] + bwd[stage]}[method]

    @contextmanager
    def request(self, method: str, stage: int) -> Iterator[None]:
        """Around one data request: its delay first, then (on a virtual device) hold its answer
        until the device would have given it; a kill ends either at once."""
        self.last = {}
        if self.delay and self.killed.wait(self.delay):
            raise self.died()
        started = time.perf_counter()
        yield
        if self.table is None:
            return
        emulated = self.emulated(method, stage)
        real = time.perf_counter() - started
        self.last = {"emulated": emulated, "overrun": max(0.0, real - emulated)}
        if real > emulated:
            self.overruns += 1
        elif self.killed.wait(emulated - real):
            raise self.died()


def peer_pacing(cfg: RunConfig, scenario: SimScenario | None, peer: str, killed: threading.Event,
                died: Callable[[], Exception]) -> Pacing:
    """Peer `peer`'s pacing: on its virtual device when the run has a world (`cfg.world`, whose
    scenario is `scenario`), else at real speed."""
    table = None if cfg.world is None else device_table(scenario, peer_device(scenario, peer))
    return Pacing(killed, died, table)


def join_seconds(cfg: RunConfig) -> list[float]:
    """Seconds a peer joining (or moving to) each stage takes to start in the run's world, at the
    least: the state download the simulator charges it (`download_seconds`); 0 outside a world,
    where a joiner takes what its real start takes."""
    if cfg.world is None:
        return [0.0] * cfg.stages
    scenario = load_links(cfg)
    return [float(x) for x in download_seconds(scenario, world_costs(scenario).stage_params)]
