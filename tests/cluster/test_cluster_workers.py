"""`cluster_workers` always lists every worker, even while the client's periodic scheduler-info
refresh runs (in distributed 2026.8 that refresh empties `Client.scheduler_info()`'s worker table
now and then; a peer placed at such a moment failed a run with "all 0 workers")."""

from __future__ import annotations

import dask
from distributed import Client, LocalCluster

from labkit.backends.dask.workers import cluster_workers


def test_every_worker_is_listed_while_the_client_refreshes_its_cache() -> None:
    with (dask.config.set({"distributed.client.scheduler-info-interval": "5ms"}),
          LocalCluster(n_workers=3, processes=False, dashboard_address=None) as cluster, Client(cluster) as client):
        client.wait_for_workers(3)
        expected = set(cluster.scheduler.workers)
        assert all(set(cluster_workers(client)) == expected for _ in range(300))
