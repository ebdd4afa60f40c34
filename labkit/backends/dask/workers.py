"""The workers of a Dask cluster: asked of the scheduler each time, and made fit for compute."""

from __future__ import annotations

import ctypes
import ctypes.util
from typing import Any

import torch
from distributed import Client

from labkit.config import RunConfig

# glibc's mallopt parameters, and the values its dynamic mmap threshold would grow to anyway
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD = 32 * 1024 * 1024  # glibc's largest: blocks below it are reused from the heap
TRIM_THRESHOLD = 2 * MMAP_THRESHOLD  # free heap kept before it is given back to the system


def cluster_workers(client: Client) -> dict[str, dict[str, Any]]:
    """Address -> info (resources, name, ...) of every worker the scheduler knows now.

    Not `Client.scheduler_info()`: in distributed 2026.8 it refreshes a shared cache and then
    reads it, and the client's periodic refresh can empty the cache's worker table in between."""
    return dict(client.sync(client.scheduler.identity, n_workers=-1)["workers"])


def prepare_worker(cfg: RunConfig) -> None:
    """Fit this worker process for torch compute: `cfg.threads` torch threads, and malloc that
    reuses freed tensor memory.

    Dask's nanny starts workers with MALLOC_TRIM_THRESHOLD_=65536, which also freezes glibc's
    mmap threshold at 128 KiB: every activation is then a fresh mmap whose pages fault in, and a
    stage's forward and backward ran 1.5x slower than in a plain process (docs/benchmarks.md).
    Set here, at run time, it works whatever started the worker (LocalCluster, `dask worker`)."""
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    name = ctypes.util.find_library("c")
    libc = ctypes.CDLL(name) if name else None
    if libc is not None and hasattr(libc, "mallopt"):  # glibc; elsewhere malloc is left as it is
        libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
        libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
