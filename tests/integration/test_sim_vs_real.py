"""experiments/sim_vs_real.py's `compare`, which real_headlines.py builds on, on a world file with
no rebalancing field (as real_headlines' worlds): the run and its prediction side by side, with
figures that can be read (a KeyError here once broke every real_headlines row but Table 5's)."""

from __future__ import annotations

from pathlib import Path

from experiments.sim_vs_real import base_config, compare, world


def test_compare_runs_a_world_without_a_rebalancing_field_both_ways(tmp_path: Path) -> None:
    name, fields, codec = world(2, 2, False, False)
    del fields["rebalance_period"]
    row = compare(name, fields, base_config(3, codec), "inprocess", tmp_path)
    assert row["real"] > 0 and row["sim"] > 0 and abs(row["gap"]) < 1.0, row
    assert set(row["real_share"]) == {"s0p0", "s0p1", "s1p0", "s1p1"} and "replayed_gap" not in row, row
