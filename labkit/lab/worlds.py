"""A world both ways: a real run of a world file (`RunConfig(world=...)`) and the simulator's
prediction of the same file, measured alike (experiments/sim_vs_real.py, notebook 13).

The simulator gets the file itself plus what the file cannot say about the run: the runtime's
hops (`relay`), its step barrier at the run's global batch with the real run's median gap between a step's last answer
and the next step's first request (`boundary_seconds`: the boundary reduces the stand-in's
gradients, which the world does not price), and the wire bytes of the run's codec
(`compression`). Nothing else comes from the real run.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections import Counter
from typing import Any

import torch

from labkit.config import RunConfig
from labkit.events import Event
from labkit.sim import SimScenario
from labkit.sim.events_sim import run_events
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


def runtime_names(s: SimScenario) -> dict[str, str]:
    """The simulator's initial peer names -> the runtime's (`s{stage}p{k}`, file order)."""
    names, k = {}, Counter()
    for i, g in enumerate(g for g in s.peers for _ in range(g.count)):
        names[f"peer-{i:05d}"] = f"s{g.stage}p{k[g.stage]}"
        k[g.stage] += 1
    return names


def simulate_like(s: SimScenario, cfg: RunConfig, events: list[Event], *, loads: bool = False) -> list[Event]:
    """The simulator's events for world `s` as the run of `cfg` whose `events` are given runs it:
    the same span from its start, peers under the runtime's names."""
    started = next(e["t"] for e in of_type(events, "run") if e["state"] == "started")
    steps = of_type(events, "step")
    s = dataclasses.replace(s, relay=True, global_batch=cfg.global_batch,
                            boundary_seconds=statistics.median(boundary_gaps(events)),
                            compression=codec_compression(cfg), duration=steps[-1]["t"] - started, bin_seconds=1.0)
    rename = runtime_names(s)
    return [e | {"peer": rename.get(e["peer"], e["peer"])} if "peer" in e else e
            for e in run_events(s, loads=loads).events]


def measure(events: list[Event], microbatches_per_step: int) -> dict[str, Any]:
    """Microbatches/s over the steps after the first, and each peer's share of its stage's
    forward hops after the first WARMUP of the hops' span."""
    steps = of_type(events, "step")
    rate = (len(steps) - 1) * microbatches_per_step / (steps[-1]["t"] - steps[0]["t"])
    hops = of_type(events, "hop")
    start, end = min(h["t"] for h in hops), max(h["t"] for h in hops)
    steady = [h for h in hops if h["t"] >= start + WARMUP * (end - start) and h["direction"] == "forward"]
    per_peer = Counter((h["stage"], h["peer"]) for h in steady)
    per_stage = Counter(h["stage"] for h in steady)
    return {"rate": rate, "share": {p: n / per_stage[st] for (st, p), n in sorted(per_peer.items())}}
