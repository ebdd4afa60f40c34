"""Where a world's peers sit and how long their virtual devices take: pure functions of a
scenario, shared by the real runtime's emulation (pacing, links, executors' worlds) and the
simulator's models of those executors.

Peer `s{stage}p{k}` takes the seat of its stage's k-th initial peer in file order; any other name
(a peer added mid-run) sits where the scenario's joiners do.
"""

from __future__ import annotations

import re

from labkit.sim.hardware import StageCosts, service_seconds, stage_costs
from labkit.sim.links import join_group
from labkit.sim.scenario import PeerGroup, SimScenario

_PEER_NAME = re.compile(r"s(\d+)p(\d+)")


def _initial_group(scenario: SimScenario, peer: str) -> PeerGroup | None:
    """The group of peer `peer` (named `s{stage}p{k}`) if it is its stage's k-th initial peer;
    None for a peer added mid-run (a joiner)."""
    m = _PEER_NAME.fullmatch(peer)
    stage, k = (int(m[1]), int(m[2])) if m else (-1, -1)
    groups = [g for g in scenario.peers if g.stage == stage for _ in range(g.count)]
    return groups[k] if k < len(groups) else None


def peer_region(scenario: SimScenario, peer: str) -> str:
    """Where peer `peer` sits: its initial group's region, or the joiners' (`join_group`)."""
    return (_initial_group(scenario, peer) or join_group(scenario)).region


def peer_device(scenario: SimScenario, peer: str) -> str:
    """The device preset peer `peer` emulates in a world: its initial group's, or for a joiner the
    scenario's `join_device` (else the joiners' group's), as the simulator's joiners have."""
    initial = _initial_group(scenario, peer)
    return initial.device if initial else scenario.join_device or join_group(scenario).device


def world_costs(scenario: SimScenario) -> StageCosts:
    """The simulator's per-stage costs of one of the world's microbatches: the world's model (what
    its devices and links are timed for, which may be far larger than the stand-in the run
    trains), microbatch, sequence length, checkpointing, compression and layer split."""
    return stage_costs(model=scenario.model, stages=scenario.stages, microbatch=scenario.microbatch,
                       seq_len=scenario.seq_len, checkpointing=scenario.checkpointing,
                       compression=scenario.compression, split=scenario.layer_split)


def device_table(scenario: SimScenario, device: str) -> tuple[list[float], list[float]]:
    """(forward, backward) seconds per stage of one of the world's microbatches on `device`, by
    the simulator's cost model (`world_costs`, `service_seconds`)."""
    return service_seconds(world_costs(scenario), device, scenario.efficiency, scenario.overhead_ms)
