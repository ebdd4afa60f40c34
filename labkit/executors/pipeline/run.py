"""Start a synchronous-pipeline run behind the run handle: its peers in this process, or where `hosts` puts them."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from labkit import events
from labkit.config import RunConfig
from labkit.data import Corpus, WindowSampler
from labkit.executors.pipeline.core import PipelineCore
from labkit.executors.pipeline.peers import LocalStages, StageHost
from labkit.runtime.run import Run


def launch(cfg: RunConfig, *, run_dir: str | Path | None = None, resume: str | Path | None = None,
           trace: bool = False, hosts: Callable[[RunConfig], StageHost] = LocalStages) -> Run:
    """Start a pipeline run whose peers live where `hosts` puts them (threads of this process by
    default); returns its handle at once. Its checkpoints have the run's stages, so a SWARM run of
    the same shape resumes them, and it resumes theirs."""
    def build(cfg: RunConfig, corpus: Corpus, states: Sequence[Mapping[str, Any]], step: int,
              emit: Callable[[events.Event], None], clock: Callable[[], float]) -> PipelineCore:
        sampler = WindowSampler(corpus.train, cfg.model.seq_len, cfg.seed)
        host = hosts(cfg)
        for worker, why in host.left_out.items():
            emit(events.worker_unused(clock(), worker, why))
        return PipelineCore(cfg, sampler, emit, clock, [dict(s) for s in states], host, step)

    return Run(cfg, build, run_dir=run_dir, resume=resume, trace=trace)
