"""Emulated links: the token-bucket arithmetic, where a scenario places peers, and the one error a
bad `RunConfig.links` gives (pure and fast: no run, no clock)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from labkit.config import ConfigError, RunConfig
from labkit.runtime.links import Links, load_links
from labkit.sim.seats import peer_region
from labkit.sim.links import TokenBucket, join_group, region_link, stage_regions
from labkit.sim.scenario import Link, PeerGroup, SimScenario


def test_an_idle_bucket_without_burst_sends_n_bytes_in_n_over_rate_seconds() -> None:
    assert TokenBucket(rate=1000.0).send(250, now=5.0) == pytest.approx(0.25)


def test_a_message_sent_behind_another_waits_for_it() -> None:
    b = TokenBucket(rate=1000.0)
    assert b.send(500, now=0.0) == pytest.approx(0.5)
    assert b.send(500, now=0.2) == pytest.approx(0.8)  # 300 bytes of the first still queued at 0.2
    assert b.send(100, now=2.0) == pytest.approx(0.1)  # the queue drained long ago


def test_an_idle_bucket_refills_up_to_its_burst_and_no_further() -> None:
    b = TokenBucket(rate=100.0, burst=50.0)
    assert b.send(50, now=0.0) == 0.0  # starts full: a burst leaves at once
    assert b.send(30, now=0.1) == pytest.approx(0.2)  # 10 tokens back, 20 bytes owed
    assert b.send(50, now=100.0) == 0.0  # refilled to 50, not to 10,000
    assert b.send(1, now=100.0) == pytest.approx(0.01)


def test_a_late_clock_reading_refunds_nothing() -> None:
    b = TokenBucket(rate=10.0)
    b.send(10, now=1.0)
    assert b.send(10, now=0.5) == pytest.approx(2.0)  # an earlier `now` (another thread's) is no refill


@pytest.mark.parametrize("rate, burst", [(0.0, 0.0), (-1.0, 0.0), (1.0, -1.0), (float("nan"), 0.0)])
def test_a_bucket_refuses_a_rate_or_burst_it_cannot_pace(rate: float, burst: float) -> None:
    with pytest.raises(ValueError, match="rate > 0"):
        TokenBucket(rate=rate, burst=burst)


def _scenario(**changes) -> SimScenario:
    fields = dict(name="two", model="nano", stages=2, trainer_region="eu",
                  peers=(PeerGroup(device="T4", count=1, stage=0, region="eu"),
                         PeerGroup(device="T4", count=1, stage=0, region="us"),
                         PeerGroup(device="V100", count=2, stage=1, region="us")),
                  links=(Link(a="eu", b="eu", rtt_ms=2.0, bandwidth_mbps=1000.0),
                         Link(a="us", b="eu", rtt_ms=100.0, bandwidth_mbps=8.0)), rtt_ms=50.0, bandwidth_mbps=80.0)
    return SimScenario(**(fields | changes))


def test_regions_are_linked_either_way_round_and_by_default_otherwise() -> None:
    s = _scenario()
    assert region_link(s, "eu", "us") == region_link(s, "us", "eu") == (0.1, 1e6)
    assert region_link(s, "us", "us") == (0.05, 1e7)  # no us-us link: the scenario's default


def test_the_kth_peer_of_a_stage_sits_where_the_kth_of_its_groups_does() -> None:
    s = _scenario(join_device="V100")
    assert stage_regions(s) == (("eu", "us"), ("us", "us"))
    assert [peer_region(s, p) for p in ("s0p0", "s0p1", "s1p1")] == ["eu", "us", "us"]
    assert join_group(s).region == peer_region(s, "s0p2") == "us"  # a peer added mid-run sits with the joiners
    links = Links(s, s.trainer_region)  # a trainer's
    assert links.link("s0p0").latency == pytest.approx(0.001) and links.link("s0p1").up.rate == 1e6
    ring = Links(s, peer_region(s, "s0p0"))  # peer s0p0's, to its stage's other peers
    assert ring.link("s0p1").latency == pytest.approx(region_link(s, "eu", "us")[0] / 2)


def _write(tmp_path: Path, data: object) -> str:
    path = tmp_path / "links.json"
    path.write_text(json.dumps(data))
    return str(path)


def test_a_run_takes_the_scenario_that_matches_its_stages_and_peers(tmp_path: Path) -> None:
    path = _write(tmp_path, {"stages": 2, "model": "nano", "peers": [{"device": "T4", "count": 2, "stage": 0},
                                                                      {"device": "T4", "count": 1, "stage": 1}]})
    assert load_links(RunConfig(peers=(2, 1), links=path)).stages == 2
    assert load_links(RunConfig()) is None


@pytest.mark.parametrize("data, says", [
    ({"stages": 2, "model": "nano", "peers": [{"device": "T4", "count": 1, "stage": 0},
                                               {"device": "T4", "count": 1, "stage": 1}]},
     "run's 2 stages of [2, 2] peers (it places 2 stages of [1, 1] peers)"),
    ({"stages": 3, "model": "nano", "peers": [{"device": "T4", "count": 2, "stage": s} for s in range(3)]},
     "it places 3 stages"),
    ({"stages": 2, "peers": [], "rtt": 5}, "a valid scenario file (Scenario.rtt=5 is not allowed"),
])
def test_a_scenario_that_does_not_fit_the_run_is_one_error_naming_links(tmp_path: Path, data: dict, says: str) -> None:
    with pytest.raises(ConfigError, match="RunConfig.links=") as err:
        load_links(RunConfig(links=_write(tmp_path, data)))
    assert says in str(err.value)


def test_a_missing_scenario_file_and_a_bad_links_value_are_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="the path of an existing scenario file"):
        load_links(RunConfig(links=str(tmp_path / "nowhere.json")))
    for bad in ("", 3):
        with pytest.raises(ConfigError, match="RunConfig.links="):
            RunConfig(links=bad)
    with pytest.raises(ConfigError, match="None with executor='atom'"):
        RunConfig(executor="atom", links="x.json")
