"""What a task-pool run needs of a client's computer and of the place clients live: the ports
that the in-process clients (`StageClient`) and the Dask client actors both fill."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

import torch

from labkit.taskpool import Task


class ClientLost(RuntimeError):
    """The client's process is gone (its Dask worker died): what it held is lost."""


class ClientPort(Protocol):
    """One client's computer: a copy of its stage's module (see `StageClient`)."""

    def load(self, params: Mapping[str, torch.Tensor], version: int) -> None: ...
    def speed(self) -> float: ...
    def forward(self, task: Task, inputs: torch.Tensor) -> torch.Tensor: ...
    def backward(self, task: Task, inputs: torch.Tensor | None,
                 grad_out: torch.Tensor) -> tuple[torch.Tensor | None, list[torch.Tensor]]: ...
    def params(self) -> dict[str, torch.Tensor]: ...
    def close(self) -> None: ...


class ClientHost(Protocol):
    """Where clients live: threads of this process, or actors on the workers of a Dask cluster."""

    dashboard: str | None  # where its workers are watched (Dask's dashboard), if anywhere
    left_out: Mapping[str, str]  # workers it leaves unused (hung at the launch), each with why

    def spawn(self, name: str, stage: int, params: Mapping[str, torch.Tensor]) -> ClientPort:
        """Start client `name` of `stage` computing with `params`."""

    def hold(self, client: str, task: Task, reload: bool, real: float) -> float:
        """Seconds `client` holds `task`'s result after `real` seconds of compute (`reload`: it
        loaded new parameters first): 0, or what is left of its virtual device's time in a world."""

    def watch(self, lost: Callable[[str, str], None]) -> None:
        """Call `lost(client, reason)` when a client's process is seen gone, whatever it is doing."""

    def close(self) -> None:
        """Release what the clients used."""
