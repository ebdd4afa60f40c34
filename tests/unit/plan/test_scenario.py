"""Scenarios: presets, JSON round trip, and bad inputs rejected with one clear message."""

from __future__ import annotations

import json

import numpy as np
import pytest

from labkit.config import ConfigError
from labkit.plan.dtfm import plan_dtfm
from labkit.plan.network import NetworkScenario
from labkit.plan.presets import NETWORK_PRESETS, preset

GOOD = {"name": "t", "devices": [{"name": "a"}, {"name": "b", "kind": "RTX4090"}],
        "delay": [[0, 0.01], [0.02, 0]], "bandwidth": [[0, 1e9], [2e9, 0]]}


def _with(**changes) -> dict:
    return json.loads(json.dumps(GOOD)) | changes


@pytest.mark.parametrize("name", sorted(NETWORK_PRESETS))
def test_every_preset_builds_and_round_trips(name: str, tmp_path) -> None:
    s = preset(name)
    s.save(tmp_path / "s.json")
    back = NetworkScenario.load(tmp_path / "s.json")
    assert back.names() == s.names() and back.devices == s.devices
    assert np.array_equal(back.delay, s.delay) and np.array_equal(back.bandwidth, s.bandwidth)


def test_dtfm_presets_follow_the_papers_numbers() -> None:
    world = preset("dtfm_world", n=64, jitter=0.0)
    assert len({d.region for d in world.devices}) == 8
    inside = world.bandwidth[0, 1] * 8 / 1e9  # same region, Gbit/s
    assert inside == pytest.approx(2.0) and world.delay[0, 1] == pytest.approx(5e-3)
    off = world.bandwidth[(world.bandwidth < 1.9e9 / 8) & (world.bandwidth > 0)] * 8 / 1e9
    assert off.min() >= 0.3 - 1e-9 and off.max() <= 1.3 + 1e-9
    multi = preset("dtfm_multidc", n=64, jitter=0.0)
    assert multi.delay[0, 63] == pytest.approx(10e-3) and multi.bandwidth[0, 63] * 8 / 1e9 == pytest.approx(1.12)
    assert preset("dtfm_spot", n=16).n == 16 and preset("dtfm_regional", n=12).n == 12


@pytest.mark.parametrize("data, words", [
    (_with(delay=[[0, 0.01]]), ["delay", "square"]),
    (_with(delay=[[0, 1, 1], [1, 0, 1], [1, 1, 0]]), ["delay", "2x2", "one row and column per device"]),
    (_with(delay=[[0, -0.01], [0.02, 0]]), ["delay[0][1]", "-0.01", ">= 0"]),
    (_with(bandwidth=[[0, float("nan")], [2e9, 0]]), ["bandwidth[0][1]", "no NaN"]),
    (_with(bandwidth=[[0, 0.0], [2e9, 0]]), ["bandwidth[0][1]", "> 0 bytes/s between distinct devices"]),
    (_with(devices=[{"name": "a", "kind": "TPU"}, {"name": "b"}]), ["kind", "'TPU'", "one of", "V100"]),
    (_with(devices=[{"name": "a"}, {"name": "a"}]), ["devices", "unique device names"]),
    (_with(devices=[{"name": "a", "speed": 1}, {"name": "b"}]), ["speed", "keys name, kind"]),
    ({"name": "t", "devices": []}, ["delay", "present"]),
])
def test_bad_scenarios_are_rejected_with_a_clear_message(data: dict, words: list[str]) -> None:
    with pytest.raises(ConfigError) as err:
        NetworkScenario.from_dict(data)
    assert str(err.value).count("\n") == 0
    for w in words:
        assert w in str(err.value)


def test_stage_count_must_divide_the_devices() -> None:
    with pytest.raises(ConfigError, match=r"stages=5 is not allowed: a divisor of the 16 devices: \[1, 2, 4, 8, 16\]"):
        plan_dtfm(preset("dtfm_world", n=16), stages=5)


def test_preset_sizes_and_names_are_checked() -> None:
    with pytest.raises(ConfigError, match="dtfm_world.n=60 is not allowed: an integer >= 8 and a multiple of 8"):
        preset("dtfm_world", n=60)
    with pytest.raises(ConfigError, match="preset.name='mars' is not allowed: one of"):
        preset("mars")
    with pytest.raises(ConfigError, match="method='greedy' is not allowed"):
        plan_dtfm(preset("dtfm_world", n=16), stages=4, method="greedy")
