"""The fluid simulator's Algorithm 2 on exact mean queues or on the runtime's published counts."""

import dataclasses

import numpy as np
import pytest

from labkit.config import ConfigError
from labkit.sim import simulate
from labkit.sim.presets import even_peers, table5


def _moves(estimate: str) -> list[tuple[float, str, int]]:
    s = dataclasses.replace(table5(60.0, seed=3), peers=even_peers("T4", 40, 4), churn=None, duration=1800.0,
                            load_estimate=estimate)
    return [(e["t"], e["peer"], e["stage"]) for e in simulate(s, "fluid").events if e.get("state") == "moved"]


def test_published_counts_move_peers_a_balanced_swarms_exact_loads_never_would():
    assert _moves("exact") == []
    moved = _moves("measured")
    assert len(moved) >= 10  # 30 rounds: noise picks a source and a target most of them
    assert _moves("measured") == moved  # the draws are the scenario's, seeded


def test_without_rebalancing_the_estimate_changes_nothing():
    runs = [simulate(dataclasses.replace(table5(None, seed=1), duration=7200.0, load_estimate=e), "fluid")
            for e in ("exact", "measured")]
    np.testing.assert_array_equal(runs[0].work, runs[1].work)


@pytest.mark.parametrize(("field", "value"), [("load_estimate", "mean"), ("announce_period", -1.0)])
def test_a_bad_load_estimate_names_its_field(field: str, value: object):
    with pytest.raises(ConfigError, match=field):
        dataclasses.replace(table5(60.0), **{field: value})
