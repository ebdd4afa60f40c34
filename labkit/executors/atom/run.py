"""The ATOM run behind the one run handle: profile the model, search a partition that fits the
device budget, start the replicas (threads here, or actors on Dask workers), and leave the same
record a SWARM run leaves.

Verbs that make sense for whole-model replicas work (state, stop, kill_peer and add_peer on
replicas, peer_state, snapshot and checkpoint, wait and wait_for); the stage verbs raise one
error saying why. A checkpoint holds one stage, the whole model, so a one-stage SWARM run (or
another ATOM run) resumes it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from labkit import events
from labkit.config import RunConfig
from labkit.data import Corpus
from labkit.executors.atom.local import LocalReplicas
from labkit.executors.atom.replicas import AtomReplicas
from labkit.executors.atom.world import WorldReplicas
from labkit.runtime.run import Run

HostFactory = Callable[[RunConfig, Corpus, Mapping[str, Any], Callable[[events.Event], None], Callable[[], float]], Any]


def launch(cfg: RunConfig, *, run_dir: str | Path | None = None, resume: str | Path | None = None,
           trace: bool = False, hosts: HostFactory = LocalReplicas) -> Run:
    """Start an ATOM run whose replicas live where `hosts` puts them (threads of this process by
    default; `ReplicaHost` is the port); returns its handle at once."""
    if hosts is LocalReplicas and cfg.executor.device == "cuda" and not torch.cuda.is_available():
        raise ValueError("atom.device='cuda' is not allowed here: torch.cuda.is_available() is False (a CPU "
                         "build of torch, or no GPU visible); use 'cpu'")
    if hosts is LocalReplicas and cfg.world is not None:
        hosts = WorldReplicas  # each replica on its world seat's virtual device

    def build(cfg: RunConfig, corpus: Corpus, states: Sequence[Mapping[str, Any]], step: int,
              emit: Callable[[events.Event], None], clock: Callable[[], float]) -> AtomReplicas:
        host = hosts(cfg, corpus, states[0]["params"], emit, clock)
        try:
            return AtomReplicas(cfg, host, emit, clock, states[0], step)
        except Exception:
            host.close()
            raise

    try:
        return Run(cfg, build, run_dir=run_dir, resume=resume, trace=trace)
    except ValueError as exc:
        raise ValueError(f"executor='atom' resumes a one-stage checkpoint (the whole model, as ATOM and "
                         f"one-stage SWARM runs write): {exc}") from None
