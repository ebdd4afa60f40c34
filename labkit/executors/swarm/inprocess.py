"""Start a SWARM run whose peers and trainers are threads of this process, its coordinator behind
the one run shell."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from labkit import events
from labkit.backends.inprocess.backend import ThreadPeers
from labkit.config import RunConfig
from labkit.data import Corpus
from labkit.executors.swarm.core import SwarmCore
from labkit.runtime.coordinator import Coordinator
from labkit.runtime.run import Run
from labkit.runtime.shards import checkpoint_folder


def launch(cfg: RunConfig, *, run_dir: str | Path | None = None, resume: str | Path | None = None,
                     trace: bool = False) -> Run:
    """Start `cfg` with every peer and trainer a thread of this process; returns its handle at once."""
    def build(cfg: RunConfig, corpus: Corpus, states: Sequence[Mapping[str, Any]], step: int,
              emit: Callable[[events.Event], None], clock: Callable[[], float]) -> SwarmCore:
        folder, remove = checkpoint_folder(run_dir)
        coordinator = Coordinator(cfg, emit, ThreadPeers(cfg, corpus, clock), [dict(s) for s in states], step=step,
                                  checkpoints=folder)
        return SwarmCore(coordinator, on_close=(remove,))

    return Run(cfg, build, run_dir=run_dir, resume=resume, trace=trace)
