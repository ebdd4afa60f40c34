"""The one event schema every executor emits (in-process, Dask, simulator).

Events are plain JSON-able dicts so charts, reports, widgets and tests read them the same way
whether a run is real or simulated. `t` is seconds since the run started (virtual seconds in the
simulator). Build events with these helpers so the field names never drift.
"""

from __future__ import annotations

from typing import Any

Event = dict[str, Any]

DIRECTIONS = ("forward", "backward")
PEER_STATES = ("joined", "alive", "banned", "killed", "moved", "left")
RUN_STATES = ("started", "paused", "resumed", "finished", "stopped", "diverged", "failed")


def hop(t: float, *, trainer: str, stage: int, peer: str, direction: str, nbytes: int, seconds: float, microbatch: int,
        timing: dict[str, float] | None = None, link_seconds: float = 0.0) -> Event:
    """One microbatch crossing one stage: `nbytes` sent to the peer plus received back, in `seconds`
    of which `timing` says where they went when measured (labkit.runtime.request_queue.timing:
    the peer's queue and compute; over Dask also dispatch, request, served, reply) and
    `link_seconds` were the network's (emulated or simulated; 0 when direct)."""
    return {"type": "hop", "t": t, "trainer": trainer, "stage": stage, "peer": peer, "direction": direction,
            "bytes": int(nbytes), "seconds": seconds, "microbatch": microbatch, "timing": timing or {},
            "link_seconds": link_seconds}


def step(t: float, *, step: int, loss: float, samples: int, tokens: int) -> Event:
    """One optimizer step of the whole swarm: mean training loss over exactly `samples` samples."""
    return {"type": "step", "t": t, "step": step, "loss": loss, "samples": samples, "tokens": tokens}


def peer(t: float, *, peer: str, stage: int, state: str, queue: int) -> Event:
    """A peer's state and request-queue length (`state` is one of PEER_STATES)."""
    return {"type": "peer", "t": t, "peer": peer, "stage": stage, "state": state, "queue": int(queue)}


def load(t: float, *, peer: str, stage: int, queue: int) -> Event:
    """A peer's request-queue length, published a few times a second (the stage-load charts)."""
    return {"type": "load", "t": t, "peer": peer, "stage": stage, "queue": int(queue)}


def evaluation(t: float, *, step: int, val_loss: float) -> Event:
    """Validation loss (mean cross-entropy, nats per byte) after `step` optimizer steps."""
    return {"type": "eval", "t": t, "step": step, "val_loss": val_loss}


def run(t: float, *, state: str, reason: str = "") -> Event:
    """The run's life cycle: started, paused (a stage lost its last peer), resumed, finished, ..."""
    return {"type": "run", "t": t, "state": state, "reason": reason}


def setting(t: float, *, name: str, value: Any) -> Event:
    """A run setting changed mid-run (e.g. name="codec", value="int8")."""
    return {"type": "setting", "t": t, "name": name, "value": value}


def worker_unused(t: float, worker: str, why: str) -> Event:
    """A Dask worker the run leaves unused, and why (hung at the launch, a failed join, ...)."""
    return setting(t, name="worker_unused", value=f"{worker}: {why}")


def sync(t: float, *, step: int, stage: int, kind: str, peers: int, nbytes: int) -> Event:
    """A stage's data-parallel sync: gradient all-reduce or DiLoCo outer step, with bytes sent."""
    return {"type": "sync", "t": t, "step": step, "stage": stage, "kind": kind, "peers": peers, "bytes": int(nbytes)}


def swap(t: float, *, replica: str, submodel: int, phase: str, load_start: float | None, load_end: float | None,
         compute_start: float, compute_end: float) -> Event:
    """One ATOM sub-model's turn on a replica's device: its load host -> device (None when it was
    still resident) and its compute, in seconds of the run (ATOM's Figure 12 timeline)."""
    return {"type": "swap", "t": t, "replica": replica, "submodel": submodel, "phase": phase, "load_start": load_start,
            "load_end": load_end, "compute_start": compute_start, "compute_end": compute_end}


def router(t: float, *, trainer: str, peers: list[dict[str, Any]]) -> Event:
    """A trainer's view of the peers it routes to: per peer its stage, EMA response time (seconds),
    IWRR priority (seconds charged; the smallest of a stage is picked next) and request deadline
    (seconds, `labkit.swarm.deadline`), about once a second."""
    return {"type": "router", "t": t, "trainer": trainer, "peers": peers}


def hop_line(e: Event) -> str:
    """One hop as a line of the opt-in trace, e.g. `t0 → s1p0 forward 12.3 KB 4.1 ms`."""
    return f"{e['trainer']} → {e['peer']} {e['direction']} {e['bytes'] / 1000:.1f} KB {e['seconds'] * 1000:.1f} ms"
