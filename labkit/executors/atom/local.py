"""ATOM's replicas as engines of this process (threads): the in-process `ReplicaHost`."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from labkit import events
from labkit.config import RunConfig
from labkit.data import Corpus, WindowSampler
from labkit.executors.atom.engine import ReplicaEngine, plan_submodels, swap_event
from labkit.executors.atom.ports import ReplicaPort


class LocalReplicas:
    """Replicas in this process, sharing one sub-model plan profiled on `atom.device` here; a
    replica's heartbeat count is read off its engine."""

    dashboard = None  # threads of this process: no dashboard

    def __init__(self, cfg: RunConfig, corpus: Corpus, params: Mapping[str, Any],
                 emit: Callable[[events.Event], None], clock: Callable[[], float]) -> None:
        self.cfg, self.emit, self.clock = cfg, emit, clock
        self.sampler = WindowSampler(corpus.train, cfg.model.seq_len, cfg.seed)
        self.plan = plan_submodels(cfg, params, cfg.executor.device)
        emit(events.setting(clock(), name="atom_partition", value=self.plan.describe()))

    def spawn(self, name: str, state: Mapping[str, Any] | None, source: ReplicaPort | None, step: int) -> ReplicaEngine:
        def on_span(span: Any) -> None:
            self.emit(swap_event(self.clock(), name, span))
        return ReplicaEngine(self.cfg, self.sampler, source.state() if source is not None else state,
                             self.cfg.executor.device, self.plan, self.clock, on_span)

    def heartbeats(self, replicas: Mapping[str, ReplicaPort], step: int) -> dict[str, int]:
        return {name: engine.round_samples for name, engine in replicas.items()}

    def watch(self, lost: Callable[[str, str], None]) -> None:
        """Nothing to watch: a replica here leaves only when it is killed."""

    def exchange_seconds(self, replicas: Sequence[str]) -> float:
        """0: the replicas' gradients are summed in this process."""
        return 0.0

    def close(self) -> None:
        """Nothing to release: the replicas' threads end with the run."""
