"""Which Dask worker hosts what: pure rules over the scheduler's worker table.

`workers` maps a worker's address to its scheduler info (its "resources" say whether it was
started with `--resources GPU=1`). Peers want a worker of their own, GPU workers first; the
coordinator and trainers prefer CPU workers, leaving GPUs to peers.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

Workers = Mapping[str, Mapping[str, Any]]


def has_gpu(info: Mapping[str, Any]) -> bool:
    return info.get("resources", {}).get("GPU", 0) > 0


def coordinator_worker(workers: Workers) -> str:
    """A CPU worker if there is one (by address, for a stable choice), else any."""
    return min(workers, key=lambda w: (has_gpu(workers[w]), w))


def peer_worker(workers: Workers, taken: Collection[str], initial: Collection[str]) -> str | None:
    """A worker hosting nothing of the run: one that joined after the run started first (it came
    to serve), then GPU workers; None when every worker is taken."""
    free = [w for w in workers if w not in taken]
    return min(free, key=lambda w: (w in initial, not has_gpu(workers[w]), w)) if free else None


def trainer_workers(workers: Workers, taken: Collection[str], count: int, fallback: str) -> list[str]:
    """`count` workers for trainers: free CPU workers first, then free GPU workers; with too few,
    the rest share `fallback` (the coordinator's worker)."""
    free = sorted((w for w in workers if w not in taken), key=lambda w: (has_gpu(workers[w]), w))
    return [free[i] if i < len(free) else fallback for i in range(count)]
