"""The Dask backend: workers of a run as actors on the workers of a Dask cluster, peers found
through a hivemind DHT; the run's core stays in the process holding the run. By role:
`connect` (the cluster), `actor_fleet` (the one fleet: every executor's actors, their placement,
the one worker watcher, the DHT join), `placement` (its rules), `work_server` (the coordinator's
work, served to trainers), `peer_actor`, `trainer_actor`, `remote` (the transport), `dht`."""
