"""Periodic checkpoints of a core that holds its committed state itself (ATOM's replicas, the
synchronous pipeline, the task pool's servers), written by the run shell.

SWARM's peers write their own shards (labkit/runtime/shards.py). The other cores give the shell
their committed state at a step boundary anyway (snapshots, evaluations), so every
`RunConfig.checkpoint_every` steps the shell writes it in the same format (`checkpoints/step-*/`,
a shard a stage and a manifest), and `resume=<run directory>` goes on after the run's process died
for every executor. The write happens in the step hook, with the core's lock held: the next step
waits for it (`benchmarks/checkpoint_cost.py` measures what that costs).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from labkit import events
from labkit.config import RunConfig
from labkit.runtime.shards import Checkpoints, checkpoint_folder
from labkit.swarm.sync import SyncSchedule


class HeldCheckpoints:
    """The periodic checkpoints of one run, under `run_dir`'s `checkpoints/`."""

    def __init__(self, cfg: RunConfig, run_dir: str | Path, emit: Callable[[events.Event], None],
                 clock: Callable[[], float]) -> None:
        folder, self.remove = checkpoint_folder(run_dir)
        self._books = Checkpoints(folder, cfg.checkpoint_every, cfg.peer_timeout,
                                  lambda step: emit(events.setting(clock(), name="checkpoint", value=step)))

    def write(self, step: int, cfg: RunConfig, states: Sequence[dict[str, Any]]) -> None:
        """A checkpoint of `states` at `step` now (the start: a death before the first periodic one
        resumes from here), the next one due `checkpoint_every` steps later."""
        self._books.write_now(step, cfg, SyncSchedule(cfg.sync), list(states))

    def after_step(self, step: int, committed: Callable[[], tuple[RunConfig, list[dict[str, Any]]]]) -> None:
        """Write `committed()` if a checkpoint is due at `step` (the caller holds the core's lock
        and knows the committed state is consistent)."""
        if self._books.due(step):
            self.write(step, *committed())
