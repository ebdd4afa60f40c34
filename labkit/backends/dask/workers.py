"""The workers of a Dask cluster, asked of the scheduler each time."""

from __future__ import annotations

from typing import Any

from distributed import Client


def cluster_workers(client: Client) -> dict[str, dict[str, Any]]:
    """Address -> info (resources, name, ...) of every worker the scheduler knows now.

    Not `Client.scheduler_info()`: in distributed 2026.8 it refreshes a shared cache and then
    reads it, and the client's periodic refresh can empty the cache's worker table in between."""
    return dict(client.sync(client.scheduler.identity, n_workers=-1)["workers"])
