"""The runtime's published queue lengths as Algorithm 2 reads them: noisy counts, stale records."""

import numpy as np
import pytest

from labkit.kernels.measured_load import geometric_draw, measured_queues
from labkit.kernels.rebalance import rebalance_move


@pytest.mark.parametrize("mean", [0.5, 4.0, 30.0])
def test_a_published_count_is_geometric_with_the_queues_mean(mean: float):
    u = np.random.default_rng(1).random(200_000)
    counts = np.array([geometric_draw(mean, x) for x in u])
    assert np.all(counts == np.floor(counts)) and counts.min() == 0
    assert counts.mean() == pytest.approx(mean, rel=0.02)
    assert counts.var() == pytest.approx(mean * (1 + mean), rel=0.05)  # M/M/1's number in system
    assert geometric_draw(0.0, 0.7) == 0.0


# stages 0, 1, 2 of two peers each; since the last change stage 1 holds the longest queues,
# before it stage 2 did
STAGE = np.array([0, 0, 1, 1, 2, 2], np.int64)
Q_NOW = np.array([1.0, 1.0, 5.0, 5.0, 2.0, 2.0])
Q_BEFORE = np.array([1.0, 1.0, 2.0, 2.0, 5.0, 5.0])
MIDDLE = np.full(16, 0.5)  # every record 1 s old (0.5 s read + 0.5 s announce phase), counts at the median


def _target(since_change: float) -> int:
    q, _ = measured_queues(STAGE, Q_NOW, Q_BEFORE, since_change, 1.0, MIDDLE, 0)
    return int(rebalance_move(STAGE, q, np.arange(6), 3)[2])


def test_a_record_older_than_the_change_sends_the_mover_where_the_old_queues_were():
    assert int(rebalance_move(STAGE, Q_NOW, np.arange(6), 3)[2]) == 1  # the exact means
    assert _target(since_change=10.0) == 1  # records younger than the change: the same stage
    assert _target(since_change=0.5) == 2  # records from before it: the stage that was loaded then
    for fn in (measured_queues, measured_queues.py_func):
        q, k = fn(STAGE, Q_NOW, Q_BEFORE, 0.5, 1.0, MIDDLE, 3)
        assert k == 3 + 1 + 2 * 6
        np.testing.assert_array_equal(q, [geometric_draw(m, 0.5) for m in Q_BEFORE])


def test_noisy_counts_move_a_peer_between_stages_whose_mean_loads_are_equal():
    stage = np.repeat(np.arange(4), 40).astype(np.int64)
    mean = np.full(160, 17.0)
    assert rebalance_move(stage, mean, np.arange(160), 4)[0] == -1  # equal means: nobody moves
    draws = np.random.default_rng(0).random(1024)
    q, _ = measured_queues(stage, mean, mean, 100.0, 1.0, draws, 0)
    peer, source, target = rebalance_move(stage, q, np.arange(160), 4)
    assert peer >= 0 and source != target
    assert not np.allclose(q[stage == source].sum(), q[stage == target].sum())
