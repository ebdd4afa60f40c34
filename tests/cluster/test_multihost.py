"""The Dask backend across machines: network namespaces with addresses of their own stand in for
hosts (tests/cluster/hosts.py). The scheduler runs on one, worker processes on two others, the
test process drives the run from the root namespace through the bridge, as the README's
multi-machine recipe says: `dask scheduler`, `dask worker tcp://SCHEDULER:8786 --nthreads 1` on
each host (no --host: a worker's address is the one it reaches the scheduler from), then
`launch(config, scheduler=...)`. Every DHT node announces its own host's address, and one host's
death (SIGKILL of every process in its namespace) is survived on the other with exact accounting.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from distributed import Client
from distributed.comm import get_address_host

import labkit
from labkit.config import RunConfig
from tests.cluster.helpers import assert_exact_accounting
from tests.cluster.hosts import Host, emulated_hosts, start_dask, why_no_hosts

pytestmark = pytest.mark.slow
WORKERS = {"a": 3, "b": 3}  # each: a peer of each stage and a trainer (the coordinator runs in this process)


@dataclass
class Machines:
    scheduler: str
    a: Host
    b: Host


@pytest.fixture(scope="module")
def machines(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Machines]:
    """A scheduler host and two worker hosts (`WORKERS` worker processes each), torn down with
    every namespace, veth and bridge after the module, also when it fails."""
    reason = why_no_hosts()
    if reason is not None:
        pytest.skip(reason)
    with emulated_hosts(3) as (head, a, b):
        yield Machines(start_dask(head, [(a, WORKERS["a"]), (b, WORKERS["b"])], tmp_path_factory.mktemp("hosts")), a, b)


def _dht_addresses(run_id: str) -> list[str]:
    """On a worker: the addresses its DHT node of run `run_id` announces."""
    from labkit.backends.dask.dht import node_for

    return node_for(run_id, []).maddrs()


def _peers_on(run: labkit.RunHandle) -> dict[str, dict[str, int]]:
    """Host address -> {peer: stage} of the run's live peers."""
    found: dict[str, dict[str, int]] = {}
    for stage in run.state()["stages"]:
        for peer in stage["peers"]:
            found.setdefault(get_address_host(peer["worker"]), {})[peer["peer"]] = stage["stage"]
    return found


def test_two_hosts_train_and_one_host_dying_leaves_exact_accounting(machines: Machines, small_run: RunConfig,
                                                                     tmp_path: Path) -> None:
    """2 stages x 2 peers, a peer of each stage on each host; every worker's DHT node announces
    its own host's address. Host b dies mid-run: its two peers are evicted, its trainer starts
    again on host a, and the run keeps stepping there, every step summing the global batch."""
    cfg = small_run.replace(stages=2, peers=(2, 2), trainers=2, steps=500)
    a, b = machines.a, machines.b
    run = labkit.launch(cfg, backend="dask", scheduler=machines.scheduler, run_dir=tmp_path)
    try:
        run.wait_for(step=4, timeout=300)
        on = _peers_on(run)
        assert set(on) == {a.address, b.address}, on
        assert all(sorted(peers.values()) == [0, 1] for peers in on.values()), f"a peer of each stage per host: {on}"
        with Client(machines.scheduler, timeout=30) as client:
            run_id = run.wait_for(event={"type": "setting", "name": "cluster"})["value"]["run_id"]
            announced = client.run(_dht_addresses, run_id)
        assert {get_address_host(w) for w in announced} == {a.address, b.address}, announced
        for worker, maddrs in announced.items():
            assert maddrs and all(m.startswith(f"/ip4/{get_address_host(worker)}/tcp/") for m in maddrs), (worker, maddrs)
        at_kill = run.state()["step"]
        b.kill()
        for peer in on[b.address]:
            run.wait_for(event={"type": "peer", "peer": peer, "state": "killed"}, timeout=60)
        run.wait_for(event={"type": "setting", "name": "trainer_lost"}, timeout=60)
        run.wait_for(step=at_kill + 6, timeout=300)
    finally:
        run.stop()
    summary = run.wait(120)
    assert summary["status"] == "stopped", summary
    assert_exact_accounting(run, cfg)
    killed = [e for e in run.events.history("peer") if e["state"] == "killed"]
    assert sorted(e["peer"] for e in killed) == sorted(on[b.address]), killed
    gone = max(e["t"] for e in killed)
    after = [e for e in run.events.history("hop") if e["t"] > gone]
    assert after and {e["peer"] for e in after} <= set(on[a.address]), "only host a serves after b died"
    steps = run.events.history("step")
    assert steps[-1]["loss"] < steps[0]["loss"], [s["loss"] for s in steps]
    print(f"steps: {len(steps)} ({at_kill} before the kill); killed: {[e['peer'] for e in killed]}; "
          f"loss {steps[0]['loss']:.3f} -> {steps[-1]['loss']:.3f}")
