"""The Dask backend: workers of a run as actors on the workers of a Dask cluster, peers found
through a hivemind DHT; the run's core stays in the process holding the run. By role:
`connect` (the cluster), `fleet` (SWARM's peers and trainers: placement and watching),
`actor_fleet` (one actor per worker, for the other executors), `work_server` (the coordinator's
work, served to trainers), `peer_actor`, `trainer_actor`, `remote` (the transport), `dht`."""
