"""The device side of a swap: a byte budget that is never exceeded, and a loader that copies a
sub-model host -> device off the compute thread.

One code path for both devices: the loader is a thread. On CUDA it issues the copies from pinned
host memory on its own `torch.cuda.Stream` and waits on that stream's event, so the compute stream
keeps running; on the CPU it copies into a separate buffer (the "device" copy).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import torch

Tensors = dict[str, torch.Tensor]


class BudgetExceeded(RuntimeError):
    """The executor was about to place more bytes on the device than its budget allows."""


class DeviceBudget:
    """Bytes the executor has placed on the device (parameters, gradients, stashed activations)."""

    def __init__(self, limit: int) -> None:
        self.limit, self.used, self.peak = int(limit), 0, 0
        self._lock = threading.Lock()

    def take(self, nbytes: int, what: str) -> None:
        """Count `nbytes` more, or raise without counting them if that would pass the limit."""
        with self._lock:
            if self.used + nbytes > self.limit:
                raise BudgetExceeded(f"{what} needs {nbytes:,} B with {self.used:,} of the budget's "
                                     f"{self.limit:,} B in use")
            self.used += nbytes
            self.peak = max(self.peak, self.used)

    def give(self, nbytes: int) -> None:
        with self._lock:
            self.used -= nbytes


def nbytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes of a group of tensors."""
    return sum(t.numel() * t.element_size() for t in tensors)


@dataclass
class Loaded:
    """A sub-model's tensors on the device, with when its copy ran (seconds of the run's clock)."""

    tensors: Tensors
    nbytes: int
    start: float
    end: float


class Loader:
    """Copies sub-models host -> device on one loader thread, counting each against `budget`."""

    def __init__(self, device: torch.device, budget: DeviceBudget, clock: Callable[[], float] = time.perf_counter) -> None:
        self.device, self.budget, self.clock = device, budget, clock
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="atom-loader")
        self._stream = torch.cuda.Stream(device) if device.type == "cuda" else None

    def load(self, index: int, host: Mapping[str, torch.Tensor]) -> Future:
        """Start copying sub-model `index` now; the future resolves to its `Loaded` copy."""
        size = nbytes(host.values())
        self.budget.take(size, f"loading sub-model {index}")
        future = self._pool.submit(self._copy, dict(host), size)
        future.add_done_callback(lambda f: self.budget.give(size) if f.exception() else None)
        return future

    def _copy(self, host: Tensors, size: int) -> Loaded:
        start = self.clock()
        if self._stream is None:
            tensors = {name: t.detach().clone() for name, t in host.items()}
        else:
            with torch.cuda.stream(self._stream):
                tensors = {name: t.detach().to(self.device, non_blocking=True) for name, t in host.items()}
                done = torch.cuda.Event()
                done.record(self._stream)
            done.synchronize()
        return Loaded(tensors, size, start, self.clock())

    def ready(self, future: Future) -> Loaded:
        """Wait for a load; on CUDA its tensors are then tied to the compute stream, which uses them."""
        loaded: Loaded = future.result()
        if self._stream is not None:
            compute = torch.cuda.current_stream(self.device)
            for t in loaded.tensors.values():
                t.record_stream(compute)
        return loaded

    def release(self, loaded: Loaded) -> None:
        """Drop a sub-model's device copy (the host keeps the master)."""
        loaded.tensors.clear()
        self.budget.give(loaded.nbytes)

    def close(self) -> None:
        self._pool.shutdown(wait=True)
