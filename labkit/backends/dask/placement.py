"""Which Dask worker hosts what: pure rules over the scheduler's worker table.

`workers` maps a worker's address to its scheduler info (its "resources" say whether it was
started with `--resources GPU=1`; its "host", which machine it is on). Peers want a worker of
their own, GPU workers first, spread over machines within a stage; trainers prefer CPU workers,
leaving GPUs to peers.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping
from typing import Any

Workers = Mapping[str, Mapping[str, Any]]


def has_gpu(info: Mapping[str, Any]) -> bool:
    return info.get("resources", {}).get("GPU", 0) > 0


def peer_worker(workers: Workers, taken: Collection[str], initial: Collection[str],
                stage_hosts: Collection[str] = ()) -> str | None:
    """A worker hosting nothing of the run: one that joined after the run started first (it came
    to serve), then GPU workers, then one on the machine with the fewest of the stage's peers
    (`stage_hosts`: the hosts they run on), so that losing a machine leaves the stage its peers
    elsewhere; None when every worker is taken."""
    free = [w for w in workers if w not in taken]
    crowd = Counter(stage_hosts)
    if not free:
        return None
    return min(free, key=lambda w: (w in initial, not has_gpu(workers[w]), crowd[workers[w].get("host")], w))


def trainer_workers(workers: Workers, hosted: Mapping[str, int], count: int) -> list[str]:
    """`count` workers for trainers: free CPU workers first, then free GPU workers; with too few,
    the rest share them in turn. With none free (`hosted`: how many of the run's actors each
    worker holds) they share the workers holding the fewest, CPU first: two trainers restarted
    one after the other then never land on one worker, where one fault would take both (a
    30-minute chaos run put both on the lowest address again and again). [] when the cluster has
    no worker at all (every one killed and not yet restarted by its nanny)."""
    free = sorted((w for w in workers if not hosted.get(w)), key=lambda w: (has_gpu(workers[w]), w))
    pool = free or sorted(workers, key=lambda w: (hosted[w], has_gpu(workers[w]), w))
    return [pool[i % len(pool)] for i in range(count)] if pool else []
