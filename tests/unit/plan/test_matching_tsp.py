"""Bottleneck matching and open-loop TSP kernels against brute force."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from labkit.kernels.plan_cost import (
    bottleneck_matching,
    open_tsp,
    open_tsp_exact,
    open_tsp_heuristic,
)


def _path(c: np.ndarray, order) -> float:
    return sum(c[order[i], order[i + 1]] for i in range(len(order) - 1))


@pytest.mark.parametrize("m", [1, 2, 3, 4, 5, 6])
def test_bottleneck_matching_is_optimal_and_perfect(m: int) -> None:
    rng = np.random.default_rng(m)
    for _ in range(30):
        cost = rng.integers(0, 6, (m, m)).astype(float)  # many ties on purpose
        value, match = bottleneck_matching(cost)
        brute = min(max(cost[i, p[i]] for i in range(m)) for p in itertools.permutations(range(m)))
        assert value == brute
        assert sorted(match) == list(range(m))
        assert max(cost[i, match[i]] for i in range(m)) == value
        assert bottleneck_matching.py_func(cost)[0] == brute


@pytest.mark.parametrize("k", [1, 2, 3, 4, 5, 6, 7])
def test_open_tsp_exact_matches_brute_force(k: int) -> None:
    rng = np.random.default_rng(10 + k)
    for _ in range(10):
        c = rng.random((k, k))
        c = c + c.T
        value, order = open_tsp_exact(c)
        brute = min(_path(c, p) for p in itertools.permutations(range(k)))
        assert value == pytest.approx(brute)
        assert sorted(order) == list(range(k)) and _path(c, order) == pytest.approx(value)
        assert open_tsp_heuristic(c)[0] >= brute - 1e-9
        assert open_tsp_exact.py_func(c)[0] == pytest.approx(brute)  # the plain-Python twin


def test_heuristic_beyond_the_exact_line_returns_a_valid_path() -> None:
    rng = np.random.default_rng(0)
    c = rng.random((14, 14))
    c = c + c.T
    value, order = open_tsp(c)
    assert sorted(order) == list(range(14))
    assert value == pytest.approx(_path(c, order))
    assert value >= open_tsp_exact(c)[0] - 1e-9  # Held-Karp still runs at 14, as the reference
    random_paths = [_path(c, rng.permutation(14)) for _ in range(200)]
    assert value < min(random_paths)
