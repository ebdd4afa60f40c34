"""Scenario files: bad values raise one ConfigError naming the field, the value and what is allowed."""

import json
import math

import pytest

from labkit.config import ConfigError, ModelConfig, MODEL_SIZES
from labkit.sim.hardware import block_flops_per_token, stage_costs
from labkit.sim.presets import SIM_PRESETS
from labkit.sim.scenario import SimScenario

GOOD = {"stages": 2, "model": "small", "peers": [{"device": "T4", "count": 2, "stage": 0}, {"device": "V100", "count": 1, "stage": 1}]}


@pytest.mark.parametrize(("change", "needle"), [
    ({"bandwidth_mbps": -5}, "Scenario.bandwidth_mbps=-5"),
    ({"links": [{"a": "x", "b": "y", "rtt_ms": 10, "bandwidth_mbps": -1}]}, "Link.bandwidth_mbps=-1"),
    ({"rtt_ms": math.nan}, "Scenario.rtt_ms=nan"),
    ({"links": [{"a": "x", "b": "y", "rtt_ms": math.nan, "bandwidth_mbps": 10}]}, "Link.rtt_ms=nan"),
    ({"peers": [{"device": "K80", "count": 1, "stage": 0}]}, "PeerGroup.device='K80'"),
    ({"peers": [{"device": "T4", "count": 1, "stage": 0}]}, "stage 1 with no peers"),
    ({"rebalance_period": 0}, "Scenario.rebalance_period=0"),
    ({"rebalance_period": -60.0}, "Scenario.rebalance_period=-60.0"),
    ({"wobble": 1}, "Scenario.wobble=1"),
    ({"peers": [{"device": "T4", "stage": 0}]}, "PeerGroup.count=None"),
])
def test_bad_scenario_file_raises_one_clear_error(tmp_path, change, needle):
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps({**GOOD, **change}))
    with pytest.raises(ConfigError) as err:
        SimScenario.from_dict(json.loads(path.read_text()))
    message = str(err.value)
    assert needle in message and "is not allowed" in message and "\n" not in message


def test_good_file_and_presets_load():
    assert SimScenario.from_dict(GOOD).initial_peers == 3
    assert all(isinstance(make(), SimScenario) for make in SIM_PRESETS.values())


def test_flop_formula_is_the_model_configs():
    for size in MODEL_SIZES:
        cfg = ModelConfig(size=size, seq_len=512)
        assert block_flops_per_token(cfg.d_model, 512) == cfg.block_flops_per_token()


def test_checkpointing_adds_one_forward():
    plain = stage_costs(model="small", stages=3, microbatch=2, seq_len=128, checkpointing=False)
    ckpt = stage_costs(model="small", stages=3, microbatch=2, seq_len=128, checkpointing=True)
    for f, b, b2 in zip(plain.fwd_flops, plain.bwd_flops, ckpt.bwd_flops):
        assert b == pytest.approx(2 * f) and b2 == pytest.approx(3 * f)
