"""IWRR kernels against their plain-Python twins on random peer arrays."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from labkit.kernels.iwrr import (ema_fold, ema_fold_py, iwrr_entry, iwrr_entry_py, iwrr_pick, iwrr_pick_py,
                                iwrr_route_batch, iwrr_route_batch_py)


@st.composite
def peer_arrays(draw):
    n = draw(st.integers(1, 40))
    stage = np.array(draw(st.lists(st.integers(-1, 2), min_size=n, max_size=n)), np.int64)
    # priorities on a coarse grid so that ties (broken by insertion order) really happen
    prio = np.array(draw(st.lists(st.integers(0, 5), min_size=n, max_size=n)), np.float64) / 4
    ema = np.array(draw(st.lists(st.floats(0.01, 3.0), min_size=n, max_size=n)))
    order = np.array(draw(st.permutations(range(n))), np.int64)
    banned = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    return stage, prio, ema, order, banned


@settings(max_examples=150, deadline=None)
@given(peer_arrays(), st.integers(0, 2), st.integers(1, 60))
def test_batched_route_matches_heapq_twin_and_repeated_picks(arrays, s, count):
    stage, prio, ema, order, banned = arrays
    p_kernel, p_twin, p_pick = prio.copy(), prio.copy(), prio.copy()
    out = np.empty(count, np.int64)
    routed = iwrr_route_batch(stage, p_kernel, ema, order, banned, s, out)
    twin = iwrr_route_batch_py(stage, p_twin, ema, order, banned, s, count)
    picks = [iwrr_pick(stage, p_pick, ema, order, banned, s) for _ in range(count)]
    assert list(out[:routed]) == twin
    assert np.array_equal(p_kernel, p_twin)
    if twin:
        assert picks == twin and np.array_equal(p_pick, p_kernel)
    else:
        assert routed == 0 and picks == [-1] * count


@settings(max_examples=150, deadline=None)
@given(peer_arrays(), st.integers(0, 2))
def test_single_pick_matches_twin(arrays, s):
    stage, prio, ema, order, banned = arrays
    p_kernel, p_twin = prio.copy(), prio.copy()
    assert iwrr_pick(stage, p_kernel, ema, order, banned, s) == iwrr_pick_py(stage, p_twin, ema, order, banned, s)
    assert np.array_equal(p_kernel, p_twin)


def test_long_batches_wrap_the_calendar_many_times():
    rng = np.random.default_rng(7)
    for n, count in ((1, 50), (257, 20_000), (1000, 5_000)):
        stage, banned = np.zeros(n, np.int64), rng.random(n) < 0.1
        banned[0] = False
        prio, ema = rng.uniform(0, 50, n), rng.uniform(0.001, 3.0, n)
        ema[: n // 3] = 1.0  # many exact ties in priority after equal charges
        order = rng.permutation(n).astype(np.int64)
        p_kernel, p_twin = prio.copy(), prio.copy()
        out = np.empty(count, np.int64)
        iwrr_route_batch(stage, p_kernel, ema, order, banned, 0, out)
        assert list(out) == iwrr_route_batch_py(stage, p_twin, ema, order, banned, 0, count)
        assert np.array_equal(p_kernel, p_twin)


@settings(max_examples=150, deadline=None)
@given(peer_arrays(), st.integers(0, 3), st.floats(0.0, 1.0), st.floats(0.0, 5.0), st.floats(0.01, 1.0),
       st.floats(0.0, 1.0))
def test_entry_and_ema_fold_match_twins(arrays, s, epsilon, seconds, gamma, weight):
    stage, prio, ema, order, banned = arrays
    kernel = iwrr_entry(stage, prio, ema, banned, s, epsilon, 0.7)
    twin = iwrr_entry_py(stage, prio, ema, banned, s, epsilon, 0.7)
    assert kernel[0] == twin[0] and abs(kernel[1] - twin[1]) <= 1e-12 * max(1.0, abs(twin[1]))
    e_kernel, e_twin = ema.copy(), ema.copy()
    w_kernel, w_twin = np.full(len(ema), weight), np.full(len(ema), weight)
    ema_fold(e_kernel, w_kernel, 0, seconds, gamma)
    ema_fold_py(e_twin, w_twin, 0, seconds, gamma)
    assert np.allclose(e_kernel, e_twin, rtol=1e-12, atol=0) and np.array_equal(w_kernel, w_twin)
