"""The task-pool run behind the one run handle: servers and clients per stage, in this process.

Verbs that make sense for clients work (state, stop, kill_peer and add_peer on clients,
set_peer_delay, peer_state, snapshot and checkpoint, wait and wait_for); the others raise one
error saying why. A checkpoint has the run's stages, so a SWARM run of the same shape resumes it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from labkit import events
from labkit.config import RunConfig
from labkit.data import Corpus, WindowSampler
from labkit.runtime.links import load_links
from labkit.runtime.run import Run
from labkit.executors.taskpool.client import LocalClients
from labkit.executors.taskpool.core import TaskPoolCore
from labkit.executors.taskpool.ports import ClientHost
from labkit.executors.taskpool.world import WorldClients


def launch(cfg: RunConfig, *, run_dir: str | Path | None = None, resume: str | Path | None = None,
           trace: bool = False, clients: Callable[[RunConfig], ClientHost] = LocalClients) -> Run:
    """Start a task-pool run whose servers live in this process and whose clients live where
    `clients` puts them (computers fed by threads of this process by default); returns at once."""
    def build(cfg: RunConfig, corpus: Corpus, states: Sequence[Mapping[str, Any]], step: int,
              emit: Callable[[events.Event], None], clock: Callable[[], float]) -> TaskPoolCore:
        sampler = WindowSampler(corpus.train, cfg.model.seq_len, cfg.seed)
        host = WorldClients(cfg, load_links(cfg), emit, clock) if cfg.world is not None else clients(cfg)
        for worker, why in host.left_out.items():
            emit(events.worker_unused(clock(), worker, why))
        try:
            return TaskPoolCore(cfg, sampler, emit, clock, [dict(s) for s in states], host, step)
        except Exception:
            host.close()
            raise

    return Run(cfg, build, run_dir=run_dir, resume=resume, trace=trace)
