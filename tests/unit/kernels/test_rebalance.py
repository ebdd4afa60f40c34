"""Algorithm 2 kernels against their plain-Python twins on random queue tables."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from labkit.kernels.rebalance import rebalance_join, rebalance_join_py, rebalance_move, rebalance_move_py


@st.composite
def queue_tables(draw):
    num_stages = draw(st.integers(1, 5))
    n = draw(st.integers(0, 30))
    stage = np.array(draw(st.lists(st.integers(-1, num_stages - 1), min_size=n, max_size=n)), np.int64)
    queue = np.array(draw(st.lists(st.integers(0, 4), min_size=n, max_size=n)), np.float64)
    rank = np.array(draw(st.permutations(range(n))), np.int64)
    return stage, queue, rank, num_stages


@settings(max_examples=300, deadline=None)
@given(queue_tables())
def test_move_and_join_match_twins(table):
    stage, queue, rank, num_stages = table
    assert tuple(int(x) for x in rebalance_move(stage, queue, rank, num_stages)) == rebalance_move_py(stage, queue, rank, num_stages)
    assert rebalance_join(stage, queue, num_stages) == rebalance_join_py(stage, queue, num_stages)


def test_move_goes_from_least_to_most_loaded_stage():
    stage = np.array([0, 0, 1, 2], np.int64)
    queue = np.array([1.0, 0.0, 5.0, 3.0])
    rank = np.arange(4)
    assert tuple(rebalance_move(stage, queue, rank, 3)) == (1, 0, 1)
