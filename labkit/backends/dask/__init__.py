"""The Dask backend: every peer and trainer an actor on its own worker of a Dask cluster, peers
found through a hivemind DHT. By role: `handle` (what the driver holds), `coordinator_actor`,
`peer_actor`, `trainer_actor`, `fleet` (placement and watching), `remote` (the transport), `dht`."""

from labkit.backends.dask.handle import DaskRun, launch

__all__ = ["DaskRun", "launch"]
