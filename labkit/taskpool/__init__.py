"""The task pool paper's parameter-server pipeline stage as pure policy: frontal and backward servers,
unreliable clients and the task pool that takes over a vanished client's work.

`StagePool` is one stage's bookkeeping, driven by explicit calls with explicit times (the
in-process and Dask executors call it from their servers, the simulator in virtual time);
`segments` holds the index arithmetic (even split across a stage boundary, split by compute).
Pure logic: numpy only, no threads, sockets or torch.
"""

from __future__ import annotations

from labkit.taskpool.pool import StagePool
from labkit.taskpool.rates import smoothed_rate
from labkit.taskpool.segments import cuts, owners, segments, split_by_compute
from labkit.taskpool.tasks import Done, Slice, Task, Work

__all__ = ["Done", "Slice", "StagePool", "Task", "Work", "cuts", "owners", "segments", "smoothed_rate",
           "split_by_compute"]
