"""What an ATOM run needs of its replicas and of the place they live: the ports the in-process
threads (`LocalReplicas`) and the Dask actors (`DaskReplicas`) both fill."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import torch

from labkit.swarm.ledger import Task


class ReplicaLost(RuntimeError):
    """The replica's process is gone (its Dask worker died): what it held is lost."""


class ReplicaPort(Protocol):
    """What the run needs of one replica, wherever it lives (see `ReplicaEngine`)."""

    def iteration(self, tasks: Sequence[Task]) -> list[float]: ...
    def gradients(self) -> list[torch.Tensor]: ...
    def apply(self, total: Sequence[torch.Tensor], step: int) -> None: ...
    def state(self) -> dict[str, Any]: ...
    def interrupt(self) -> None: ...
    def close(self) -> None: ...


class ReplicaHost(Protocol):
    """Where replicas live: in this process, or as actors on the workers of a Dask cluster."""

    dashboard: str | None  # where its workers are watched (Dask's dashboard), if anywhere

    def spawn(self, name: str, state: Mapping[str, Any] | None, source: ReplicaPort | None, step: int) -> ReplicaPort:
        """Start replica `name` from `state`, or from a copy of live replica `source`'s."""

    def heartbeats(self, replicas: Mapping[str, ReplicaPort], step: int) -> dict[str, int]:
        """Each replica's published count of samples processed in `step`."""

    def watch(self, lost: Callable[[str, str], None]) -> None:
        """Call `lost(replica, reason)` when a replica's process is seen gone or hung, whatever it is
        doing (one that hangs between its iterations has no call waiting on it to fail)."""

    def exchange_seconds(self, replicas: Sequence[str]) -> float:
        """Seconds the global batch's gradients take to go round `replicas`, which the step waits
        for: 0 where nothing carries them (in this process, or on Dask, where the actors' sum is
        taken here); in a world the ring all-reduce over its links (`labkit.executors.atom.world`)."""

    def close(self) -> None:
        """Release what the replicas used (nothing in this process; a cluster on Dask)."""
