"""A world both ways: a real run of a world file (`RunConfig(world=...)`) and the simulator's
prediction of the same file, measured alike (experiments/sim_vs_real.py, notebook 13).

The simulator gets the file itself plus what the file cannot say about the run: the runtime's hops
(`relay`) and routers (one per trainer), its step barrier at the run's global batch with the real
run's median gap between a step's last answer and the next step's first request (`boundary_seconds`:
the boundary reduces the stand-in's gradients, which the world does not price), and the wire bytes
of the run's codec (`compression`). Nothing else comes from the real run, unless it is asked to
make the real run's membership decisions (`replay_moves`: its moves and its joiners' stages,
`real_membership`), to tell Algorithm 2's choices apart from the rest. A run on real compute
(links only, no virtual devices) is predicted with every peer on one host of this machine's cores,
each stage's compute measured alone beforehand (`solo_seconds`).
"""

from __future__ import annotations

import dataclasses
import os
import statistics
import time
from collections import Counter
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from labkit.config import RunConfig
from labkit.events import Event
from labkit.model.assembly import initial_states, stage_module
from labkit.sim import SimScenario
from labkit.sim.events_sim import run_events
from labkit.sim.world import build_world
from labkit.wire import get_codec

WARMUP = 0.1  # share of a run's hop span left out of the shares (routers trying each peer once)


def of_type(events: list[Event], kind: str) -> list[Event]:
    return [e for e in events if e["type"] == kind]


def boundary_gaps(events: list[Event]) -> list[float]:
    """Per step but the last: seconds from its last answer to the next step's first request."""
    hops = of_type(events, "hop")
    out = []
    for step in of_type(events, "step")[:-1]:
        last = max((h["t"] for h in hops if h["t"] <= step["t"]), default=None)
        first = min((h["t"] - h["seconds"] for h in hops if h["t"] - h["seconds"] >= step["t"]), default=None)
        if last is not None and first is not None:
            out.append(first - last)
    return out


def codec_compression(cfg: RunConfig) -> float:
    """How many times smaller the run's codec puts its activations on the wire than fp32."""
    x = torch.randn(cfg.microbatch, cfg.model.seq_len, cfg.model.d_model)
    return x.numel() * 4 / get_codec(cfg.compression.codec).encode(x).nbytes


def initial_names(s: SimScenario) -> list[str]:
    """The runtime's names of the file's peers, in the file's order (the simulator's peer indices):
    the k-th initial peer of stage s is `s{s}p{k}`."""
    count: Counter[int] = Counter()
    names = []
    for g in s.peers:
        for _ in range(g.count):
            names.append(f"s{g.stage}p{count[g.stage]}")
            count[g.stage] += 1
    return names


def runtime_names(s: SimScenario, events: list[Event]) -> dict[str, list[tuple[float, str]]]:
    """Per simulated peer, from when on it bears which of the runtime's names: the k-th initial
    peer of stage s is `s{s}p{k}` (file order); a joiner, or a peer moved to stage s, takes the
    stage's next number, as the runtime names them (`Membership._next_name`)."""
    first = initial_names(s)
    names: dict[str, list[tuple[float, str]]] = {f"peer-{i:05d}": [(0.0, name)] for i, name in enumerate(first)}
    count = Counter(g.stage for g in s.peers for _ in range(g.count))  # the next number of each stage
    for e in of_type(events, "peer"):
        if e["state"] in ("moved", "joined") and e["t"] > 0:
            names.setdefault(e["peer"], []).append((e["t"], f"s{e['stage']}p{count[e['stage']]}"))
            count[e["stage"]] += 1
    return names


def real_membership(s: SimScenario, events: list[Event], started: float
                    ) -> tuple[list[tuple[float, int, int]], list[int]]:
    """The run's moves as the simulator's (seconds since the start that the peer left its stage,
    peer index, stage), and the stages its trace's joiners took, in turn. A peer is known by its
    place in the world (`place`, the first name of its line), which is the k-th initial peer's name
    or, for a joiner, its own (the simulator's joiners take the indices after the initial peers in
    join order, as the trace replays them)."""
    index = {name: i for i, name in enumerate(initial_names(s))}
    moved_to = {e["to"] for e in of_type(events, "peer") if e["state"] == "moved"}
    joiners = [e for e in of_type(events, "peer")
               if e["state"] == "joined" and e["t"] > started and e["peer"] not in moved_to]
    first = len(index)
    index.update({e["peer"]: first + k for k, e in enumerate(joiners)})
    return ([(e["left_at"] - started, index[e["place"]], e["to_stage"])
             for e in of_type(events, "peer") if e["state"] == "moved" and e["place"] in index],
            [e["stage"] for e in joiners])


def _named(e: Event, names: dict[str, list[tuple[float, str]]]) -> Event:
    """Event `e` of the simulator under the runtime's name its peer bore at its time."""
    if "peer" not in e or e["peer"] not in names:
        return e
    return e | {"peer": [name for t, name in names[e["peer"]] if t <= e["t"]][-1]}


def solo_seconds(cfg: RunConfig, repeats: int = 15) -> tuple[list[float], list[float]]:
    """Per stage, the median seconds one microbatch of `cfg` takes forward and backward computed
    alone on one thread (the last stage's loss request, forward and backward, counts as its
    forward): what a peer costs with a core to itself, for a run without virtual devices."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _solo(cfg, repeats)
    finally:
        torch.set_num_threads(threads)  # the caller's setting, as it was


def _solo(cfg: RunConfig, repeats: int) -> tuple[list[float], list[float]]:
    m = cfg.model
    tokens = torch.randint(0, 256, (cfg.microbatch, m.seq_len))
    fwd, bwd = [], []
    for stage, state in enumerate(initial_states(cfg)):
        module = stage_module(cfg, stage, state["params"])
        x = tokens if module.is_first else torch.randn(cfg.microbatch, m.seq_len, m.d_model, requires_grad=True)
        times: tuple[list[float], list[float]] = ([], [])
        for _ in range(repeats):
            start = time.perf_counter()
            out = module(x)
            if stage == cfg.stages - 1:
                out = F.cross_entropy(out.flatten(0, 1), tokens.flatten())
            middle = time.perf_counter()
            out.backward(None if stage == cfg.stages - 1 else torch.ones_like(out))
            end = time.perf_counter()
            times[0].append(end - start if stage == cfg.stages - 1 else middle - start)
            times[1].append(0.0 if stage == cfg.stages - 1 else end - middle)
        fwd.append(statistics.median(times[0]))
        bwd.append(statistics.median(times[1]))
    return fwd, bwd


def simulate_like(s: SimScenario, cfg: RunConfig, events: list[Event], *, loads: bool = False,
                  solo: tuple[list[float], list[float]] | None = None, replay_moves: bool = False) -> list[Event]:
    """The simulator's events for world `s` as the run of `cfg` whose `events` are given runs it:
    the same span from its start, peers under the runtime's names (`runtime_names`). A run
    without virtual devices (`cfg.links` only) gives `solo` (`solo_seconds`): every peer then
    computes in those seconds on one host of 2 cores, sending the run's own bytes. With
    `replay_moves` the simulator makes the real run's moves and sends its trace's joiners to the
    stages the real ones took (`real_membership`), instead of its own Algorithm 2's choices."""
    started = next(e["t"] for e in of_type(events, "run") if e["state"] == "started")
    steps = of_type(events, "step")
    s = dataclasses.replace(s, relay=True, routers="trainer", global_batch=cfg.global_batch,
                            boundary_seconds=statistics.median(boundary_gaps(events)),
                            compression=codec_compression(cfg), duration=steps[-1]["t"] - started, bin_seconds=1.0)
    world = None
    if solo is not None:
        s = dataclasses.replace(s, host_cores=os.cpu_count(), compression=1.0)
        world = build_world(s)
        fwd, bwd = np.array(solo[0]), np.array(solo[1])
        m = cfg.model
        world = dataclasses.replace(world, fwd=np.broadcast_to(fwd, world.fwd.shape).copy(),
                                    bwd=np.broadcast_to(bwd, world.bwd.shape).copy(),
                                    activation_bytes=cfg.microbatch * m.seq_len * m.d_model * 4 / codec_compression(cfg))
    moves, join_stages = real_membership(s, events, started) if replay_moves else (None, None)
    sim = run_events(s, world, loads=loads, moves=moves, join_stages=join_stages).events
    names = runtime_names(s, sim)
    return [_named(e, names) for e in sim]


def steps_rate(times: list[float], microbatches_per_step: int) -> float:
    """Microbatches a second over the steps after the first, from the steps' end times."""
    return (len(times) - 1) * microbatches_per_step / (times[-1] - times[0])


def measure(events: list[Event], microbatches_per_step: int) -> dict[str, Any]:
    """Microbatches/s over the steps after the first, and each peer's share of its stage's
    forward hops after the first WARMUP of the hops' span."""
    steps = of_type(events, "step")
    rate = steps_rate([s["t"] for s in steps], microbatches_per_step)
    hops = of_type(events, "hop")
    start, end = min(h["t"] for h in hops), max(h["t"] for h in hops)
    steady = [h for h in hops if h["t"] >= start + WARMUP * (end - start) and h["direction"] == "forward"]
    per_peer = Counter((h["stage"], h["peer"]) for h in steady)
    per_stage = Counter(h["stage"] for h in steady)
    return {"rate": rate, "share": {p: n / per_stage[st] for (st, p), n in sorted(per_peer.items())}}
