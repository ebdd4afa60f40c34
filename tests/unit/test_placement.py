"""Placement rules of the Dask backend over a scheduler's worker table."""

from __future__ import annotations

from labkit.backends.dask.placement import peer_worker, trainer_workers

GPU, CPU = {"resources": {"GPU": 1}}, {"resources": {}}
WORKERS = {"tcp://a:1": CPU, "tcp://b:1": GPU, "tcp://c:1": CPU, "tcp://d:1": GPU}


def test_peers_take_gpu_workers_first_and_newcomers_before_both() -> None:
    initial = set(WORKERS)
    assert peer_worker(WORKERS, {"tcp://a:1"}, initial) == "tcp://b:1"
    assert peer_worker(WORKERS, {"tcp://a:1", "tcp://b:1", "tcp://d:1"}, initial) == "tcp://c:1"
    assert peer_worker(WORKERS, set(WORKERS), initial) is None
    grown = {**WORKERS, "tcp://e:1": CPU}  # joined after the run started: it came to serve
    assert peer_worker(grown, {"tcp://a:1"}, initial) == "tcp://e:1"


def test_a_stage_s_peers_spread_over_machines() -> None:
    """Two machines (hosts 10.0.0.3 and 10.0.0.4): the next peer of a stage goes to the machine
    with fewer of that stage's peers, even where the other has a lower address."""
    two = {"tcp://10.0.0.3:1": {**CPU, "host": "10.0.0.3"}, "tcp://10.0.0.3:2": {**CPU, "host": "10.0.0.3"},
           "tcp://10.0.0.4:1": {**CPU, "host": "10.0.0.4"}}
    assert peer_worker(two, set(), set(two)) == "tcp://10.0.0.3:1"
    assert peer_worker(two, {"tcp://10.0.0.3:1"}, set(two), ["10.0.0.3"]) == "tcp://10.0.0.4:1"
    assert peer_worker(two, {"tcp://10.0.0.3:1"}, set(two), []) == "tcp://10.0.0.3:2", "another stage's peer"


def test_trainers_take_free_cpu_workers_then_share_the_fallback() -> None:
    hosted = {"tcp://a:1": 1, "tcp://b:1": 1}  # coordinator and one peer
    assert trainer_workers(WORKERS, hosted, 3) == ["tcp://c:1", "tcp://d:1", "tcp://c:1"]
    everyone = dict.fromkeys(WORKERS, 1)
    assert trainer_workers(WORKERS, everyone, 3) == ["tcp://a:1", "tcp://c:1", "tcp://b:1"]
    assert trainer_workers({}, {}, 1) == [], "no worker at all (all restarting): none to give, no error"


def test_a_restarted_trainer_shares_the_least_crowded_worker_not_its_partner_s() -> None:
    """Every worker holds a peer and `a` holds the other trainer too: the restarted trainer goes
    to `c`, so that one fault cannot take both trainers."""
    hosted = {**dict.fromkeys(WORKERS, 1), "tcp://a:1": 2}
    assert trainer_workers(WORKERS, hosted, 1) == ["tcp://c:1"]
    assert trainer_workers(WORKERS, {**hosted, "tcp://c:1": 2}, 1) == ["tcp://b:1"], "then a GPU worker, not a"
