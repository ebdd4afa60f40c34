"""What-if beside the real run: measured speeds, the scaled scenario, knob errors, the panel."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest

import labkit
from labkit.config import ConfigError, RunConfig
from labkit.events import Event, hop, peer
from labkit.lab.whatif_panel import WhatIfPanel
from labkit.lab.whatif import (DEFAULT_PERIOD, PeerSpeed, activation_bytes, measured_speeds,
                               measured_world, what_if, what_if_scenario)
from labkit.runtime.eventlog import EventLog

CONFIG = RunConfig(stages=2, peers=2, trainers=4, microbatch=4, global_batch=16, rebalance_period=60.0)
# service seconds (forward, backward) per peer; s0p1 is twice as fast as s0p0; the last stage's
# "forward" request computes forward, loss and backward
SERVICE = {"s0p0": (0.010, 0.020), "s0p1": (0.005, 0.010), "s1p0": (0.040, None), "s1p1": (0.040, None)}


def swarm_events(extra: list[Event] = ()) -> list[Event]:
    """20 microbatches per peer: 18 round trips that met an empty queue, 2 that queued 10x longer."""
    out = [peer(0.0, peer=name, stage=int(name[1]), state="joined", queue=0) for name in SERVICE]
    for k in range(20):
        queued = 10.0 if k % 10 == 3 else 1.0
        for name, (fwd, bwd) in SERVICE.items():
            for direction, seconds in (("forward", fwd), ("backward", bwd)):
                if seconds is not None:
                    out.append(hop(k + 0.5, trainer="t0", stage=int(name[1]), peer=name, direction=direction,
                                   nbytes=1000, seconds=seconds * queued, microbatch=k))
    return out + list(extra)


def test_speeds_are_the_service_times_the_hops_show() -> None:
    speeds = measured_speeds(swarm_events(), CONFIG)
    assert sorted(speeds) == sorted(SERVICE)
    assert speeds["s0p0"].seconds == pytest.approx(0.030) and speeds["s0p0"].stage == 0
    assert speeds["s1p0"].seconds == pytest.approx(0.040) and speeds["s1p0"].stage == 1
    assert speeds["s0p0"].seconds / speeds["s0p1"].seconds == pytest.approx(2.0)
    assert speeds["s0p0"].hops == 20


def test_killed_and_moved_peers_are_not_measured() -> None:
    gone = [peer(30.0, peer="s0p1", stage=0, state="killed", queue=0),
            peer(31.0, peer="s1p1", stage=1, state="moved", queue=0)]
    assert sorted(measured_speeds(swarm_events(gone), CONFIG)) == ["s0p0", "s1p0"]


def test_scenario_is_the_measured_swarm_scaled_up() -> None:
    speeds = measured_speeds(swarm_events(), CONFIG)
    s = what_if_scenario(speeds, CONFIG, scale=10, rtt_ms=80.0, bandwidth_mbps=50.0, churn_per_hour=12.0)
    assert s.initial_peers == 4 * 10 and [g.stage for g in s.peers] == [0, 0, 1, 1]
    assert (s.trainers, s.rtt_ms, s.bandwidth_mbps, s.rebalance_period) == (40, 80.0, 50.0, 60.0)
    assert s.churn.join_per_hour == 6.0 and s.churn.leave_per_peer_hour == pytest.approx(6.0 / 40)
    world = measured_world(s, speeds, CONFIG)
    service = world.fwd + world.bwd
    assert service[0, 0] == pytest.approx(0.030) and service[10, 0] == pytest.approx(0.015)  # s0p0, s0p1 copies
    assert service[20, 1] == pytest.approx(0.040)
    assert service[0, 1] / service[10, 1] == pytest.approx(2.0)  # twice as slow on any stage
    assert world.activation_bytes == activation_bytes(CONFIG) == 64 * 64 * 4 * 4.0  # d x seq x microbatch x fp32
    off = what_if_scenario(speeds, CONFIG.replace(rebalance_period=0.0), churn_per_hour=0.0)
    assert off.rebalance_period == DEFAULT_PERIOD and off.churn is None


@pytest.mark.parametrize(("knob", "value", "allowed"), [
    ("scale", 0, "an integer in [1, 1000]"), ("rtt_ms", -1.0, "ms in [0,"), ("bandwidth_mbps", 0.0, "Mb/s in (0,"),
    ("churn_per_hour", -3.0, "per hour in [0,"), ("window", 0, "an integer in [1,")])
def test_bad_knobs_raise_naming_knob_value_and_rule(knob: str, value: float, allowed: str) -> None:
    with pytest.raises(ConfigError, match=rf"WhatIf\.{knob}={value!r} is not allowed: .*{re.escape(allowed)}"):
        what_if_scenario(measured_speeds(swarm_events(), CONFIG), CONFIG, **{knob: value})


def test_nothing_measured_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="nothing measured yet"):
        what_if_scenario({}, CONFIG)
    with pytest.raises(ValueError, match="nothing measured yet on stage 1"):
        what_if_scenario({"s0p0": PeerSpeed(peer="s0p0", stage=0, seconds=0.01, hops=3)}, CONFIG)


@pytest.mark.parametrize("scale", [10, 100])
def test_what_if_runs_both_policies_in_seconds(scale: int) -> None:
    r = what_if(measured_speeds(swarm_events(), CONFIG), CONFIG, scale=scale, churn_per_hour=60.0)
    assert r.peers == 4 * scale and 0 < r.with_rebalancing and 0 < r.without_rebalancing
    assert {row["run"] for row in r.series} == {"with rebalancing", "without rebalancing", "optimal"}
    assert r.seconds < 30  # numba compiles on a cold cache (~12 s once); warm it is well under a second
    assert r.line().startswith(f"{scale}x peers at 100 ms, 100 Mb/s, 60 churn/h: ")


def test_panel_shows_errors_in_one_line() -> None:
    log = EventLog()
    panel = WhatIfPanel(SimpleNamespace(config=CONFIG, events=log))
    assert panel.simulate_button in panel.widget().children[1].children
    panel.simulate_button.click()
    assert isinstance(panel.last.exception(timeout=60), ValueError)
    assert panel.result_line.value.startswith("nothing measured yet")
    for e in swarm_events():
        log.emit(e)
    panel.rtt_ms.value = -5.0
    panel.simulate_button.click()
    assert isinstance(panel.last.exception(timeout=60), ConfigError)
    assert "WhatIf.rtt_ms=-5.0 is not allowed" in panel.result_line.value
    panel.close()


def test_panel_on_a_real_run(small_run: RunConfig) -> None:
    run = labkit.launch(small_run.replace(steps=2000))
    run.wait_for(step=3)
    panel = WhatIfPanel(run)
    panel.simulate_button.click()
    result = panel.last.result(timeout=120)
    # the optimum counts the peers' own layout too (fluid.optimum_rate): never exceeded
    assert 0 < result.with_rebalancing <= 100.01 and 0 < result.without_rebalancing <= 100.01
    line = panel.result_line.value
    assert f"with rebalancing {result.mean_tokens_per_s('with rebalancing'):,.0f} tokens/s" in line
    assert f"({result.with_rebalancing:.1f} % of its optimum)" in line
    assert f"without {result.mean_tokens_per_s('without rebalancing'):,.0f} tokens/s" in line
    assert f"({result.without_rebalancing:.1f} %); optimum: the same live peers all serving, best placed" in line
    assert panel.error is not None and "its own error on this run: at 1x it predicts" in line
    assert f"({panel.error:+.0%})" in line
    assert panel.chart.chart.to_dict()["data"]["values"] == result.series
    panel.close()
