"""ATOM's partition search against a brute-force twin that tries every composition of the layers.

Costs are drawn on grids (integer bytes, seconds in eighths) so that every sum is exact and the
search and the twin, which add in different orders, see the same numbers.
"""

from __future__ import annotations

import itertools
import math
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from labkit.config import ConfigError
from labkit.plan.atom_partition import NoFeasiblePartition, Partition, least_budget, partition
from labkit.plan.atom_profile import KINDS, LayerCost


def brute_force(layers: list[LayerCost], budget: float, c: int, together: bool = False) -> tuple[float, int, tuple[int, ...]] | None:
    """(cut bytes, sub-models, sizes) of the best of all 2^(n-1) compositions, None if none is feasible."""
    n, best = len(layers), None
    for mask in range(2 ** (n - 1)):
        cuts = [i + 1 for i in range(n - 1) if mask >> i & 1]
        parts = [layers[a:b] for a, b in itertools.pairwise([0, *cuts, n])]
        if any(sum(x.memory for x in p) > budget for p in parts):
            continue
        if together and any(sum(x.memory for x in p + q) > budget for p, q in itertools.pairwise(parts)):
            continue
        if not all(c * sum(x.fwd_s for x in p) >= sum(x.load_s for x in q)
                   and c * sum(x.bwd_s for x in q) >= sum(x.load_s for x in p)
                   for p, q in itertools.pairwise(parts)):
            continue
        key = (sum(layers[b - 1].out_bytes for b in cuts), len(parts), tuple(map(len, parts)))
        best = key if best is None or key < best else best
    return best


def layer(name: str, kind: str = "block", memory: float = 1, fwd: float = 0.0, bwd: float = 0.0,
          load: float = 0.0, out: float = 0) -> LayerCost:
    return LayerCost(name, kind, memory, memory, fwd, bwd, load, out)


seconds = st.integers(0, 16).map(lambda k: k / 8)
rows = st.builds(lambda kind, mem, f, b, u, out: layer("", kind, mem, f, b, u, out),
                 st.sampled_from(KINDS), st.integers(1, 10), seconds, seconds, seconds, st.integers(0, 20))


@st.composite
def profiles(draw: st.DrawFn) -> list[LayerCost]:
    """1..9 layers drawn from a pool of 1..4 rows, so runs of identical blocks are common."""
    pool = draw(st.lists(rows, min_size=1, max_size=4))
    picks = draw(st.lists(st.integers(0, len(pool) - 1), min_size=1, max_size=9))
    return [layer(f"l{i}", p.kind, p.memory, p.fwd_s, p.bwd_s, p.load_s, p.out_bytes)
            for i, p in enumerate(pool[k] for k in picks)]


def assert_feasible(layers: list[LayerCost], budget: float, got: Partition) -> None:
    """Both constraints hold, and the reported sums are the sub-models' own."""
    parts = [layers[first:first + count] for first, count in got.bounds()]
    assert sum(got.sizes) == len(layers) and all(got.sizes)
    for p, mem, comp, load in zip(parts, got.memory, got.compute_s, got.load_s, strict=True):
        assert mem == pytest.approx(math.fsum(x.memory for x in p)) and mem <= budget
        assert comp == pytest.approx(math.fsum(x.fwd_s + x.bwd_s for x in p))
        assert load == pytest.approx(math.fsum(x.load_s for x in p))
    c = got.accumulation
    for p, q in itertools.pairwise(parts):
        assert c * sum(x.fwd_s for x in p) >= sum(x.load_s for x in q)
        assert c * sum(x.bwd_s for x in q) >= sum(x.load_s for x in p)
    assert got.cut_bytes == math.fsum(p[-1].out_bytes for p in parts[:-1])


@settings(max_examples=500, deadline=None)
@given(profiles(), st.integers(1, 40), st.integers(1, 4), st.booleans())
def test_search_matches_brute_force(layers: list[LayerCost], budget: int, c: int, together: bool) -> None:
    want = brute_force(layers, budget, c, together)
    if want is None:
        with pytest.raises(NoFeasiblePartition) as err:
            partition(layers, budget, c, together)
        least = err.value.least_accumulation
        if err.value.constraint == "memory":  # no C helps: memory alone rules every partition out
            assert brute_force(layers, budget, 10**6, together) is None and least is None
        elif least is None:  # no C hides loading: not even one far above any ratio on the grid
            assert brute_force(layers, budget, 10**6, together) is None
        else:
            assert least > c and brute_force(layers, budget, least, together) is not None
            assert brute_force(layers, budget, least - 1, together) is None
        return
    got = partition(layers, budget, c, together)
    assert (got.cut_bytes, len(got.sizes), got.sizes) == want
    assert_feasible(layers, budget, got)
    if together:
        assert all(a + b <= budget for a, b in itertools.pairwise(got.memory))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.floats(0.1, 5), st.floats(0, 1), st.floats(0, 1), st.floats(0, 1),
                          st.floats(0, 1e6)), min_size=1, max_size=12),
       st.floats(5, 20), st.integers(1, 4))
def test_any_returned_partition_meets_both_constraints(costs: list[tuple[float, ...]], budget: float, c: int) -> None:
    layers = [layer(f"l{i}", "block", *row) for i, row in enumerate(costs)]
    try:
        got = partition(layers, budget, c)
    except NoFeasiblePartition:
        return
    assert_feasible(layers, budget, got)


def test_a_layer_over_the_budget_is_named() -> None:
    layers = [layer("embed", "embed", 0.4e9), layer("block3", memory=1.2e9), layer("head", "head", 0.3e9)]
    with pytest.raises(NoFeasiblePartition, match=r"layer 'block3' needs 1.2 GB alone, above the budget of 1 GB"):
        partition(layers, 1e9)


def test_side_by_side_the_heaviest_neighbours_are_named() -> None:
    """Each layer fits alone and the cheapest cut is between them, but the executor holds the
    current sub-model and the next together: then the pair over the budget is what binds."""
    layers = [layer("embed", "embed", 3), layer("block0", memory=6), layer("block1", memory=5), layer("head", "head", 2)]
    assert partition(layers, 8).sizes == (1, 1, 2)
    with pytest.raises(NoFeasiblePartition, match=r"layers 'block0' and 'block1' need 11 B side by side .* "
                                                  r"raise the budget to >= 11 B") as err:
        partition(layers, 8, together=True)
    assert err.value.constraint == "memory"
    assert partition(layers, 11, together=True).sizes == (1, 1, 1, 1)


def test_forward_overlap_binds_at_c1_and_the_error_asks_for_c2() -> None:
    layers = [layer("a", memory=6, fwd=0.1, bwd=0.2, load=0.2), layer("b", memory=6, fwd=0.1, bwd=0.2, load=0.15)]
    with pytest.raises(NoFeasiblePartition) as err:
        partition(layers, 10, accumulation=1)
    assert str(err.value) == ("no partition lets compute hide loading at C=1: the best candidate's tightest pair "
                              "is sub-model [0,1) -> [1,2): 1 x 0.1 s forward < 0.15 s load; "
                              "raise accumulation to >= 2 or the budget")
    assert err.value.constraint == "overlap" and err.value.least_accumulation == 2
    got = partition(layers, 10, accumulation=2)
    assert got.sizes == (1, 1) and got.bounds() == [(0, 1), (1, 1)]
    assert got.compute_s == pytest.approx((0.3, 0.3)) and got.load_s == (0.2, 0.15)


def test_backward_overlap_is_named_as_backward() -> None:
    layers = [layer("a", memory=6, fwd=1.0, bwd=0.1, load=0.35), layer("b", memory=6, fwd=1.0, bwd=0.1, load=0.1)]
    with pytest.raises(NoFeasiblePartition, match=r"\[1,2\) -> \[0,1\) backward: 2 x 0.1 s backward < 0.35 s load; "
                                                  r"raise accumulation to >= 4") as err:
        partition(layers, 10, accumulation=2)
    assert err.value.least_accumulation == 4
    assert partition(layers, 10, accumulation=4).sizes == (1, 1)


def test_no_accumulation_helps_a_sub_model_with_no_forward_time() -> None:
    layers = [layer("embed", "embed", 6, fwd=0.0, bwd=0.5, load=0.5), layer("b", memory=6, fwd=0.1, bwd=0.5, load=0.2)]
    with pytest.raises(NoFeasiblePartition, match=r"0 s forward < 0.2 s load; no accumulation does; "
                                                  r"raise the budget \(the whole model needs 12 B\)") as err:
        partition(layers, 10, accumulation=3)
    assert err.value.least_accumulation is None
    assert partition(layers, 12).sizes == (2,)


def test_whole_model_in_budget_is_one_sub_model_with_no_overlap_check() -> None:
    layers = [layer(f"l{i}", fwd=0.0, load=9.0, out=100) for i in range(5)]
    got = partition(layers, 5)
    assert got.sizes == (5,) and got.cut_bytes == 0 and got.accumulation == 1


def test_ties_go_to_fewer_sub_models_then_smallest_sizes() -> None:
    free = [layer(f"l{i}", out=0) for i in range(4)]
    assert partition(free, 3).sizes == (1, 3)  # (1,3), (2,2), (3,1), (1,1,2)... all cost 0
    cheap_middle = [layer(f"l{i}", out=0 if i == 1 else 5) for i in range(4)]
    assert partition(cheap_middle, 3).sizes == (2, 2)
    assert partition(cheap_middle, 2).sizes == (2, 2)
    assert partition(cheap_middle, 1).sizes == (1, 1, 1, 1) and partition(cheap_middle, 1).cut_bytes == 10


def gpt_like(distinct: bool, blocks: int = 24) -> list[LayerCost]:
    """Embedding, `blocks` transformer blocks and the head; distinct=True nudges each block's forward time."""
    body = [layer(f"block{i}", "block", 1e9, 0.01 + (i * 1e-4 if distinct else 0.0), 0.02, 0.02, 4e6)
            for i in range(blocks)]
    return [layer("embed", "embed", 2e9, 0.001, 0.002, 0.1, 4e6), *body, layer("head", "head", 2e9, 0.002, 0.004, 0.1, 0)]


def test_identical_blocks_shrink_the_search() -> None:
    same, distinct = partition(gpt_like(False), 8e9, 4), partition(gpt_like(True), 8e9, 4)
    assert (same.evaluated, distinct.evaluated) == (26, 197)  # the figures docs/atom.md quotes
    assert same.sizes == distinct.sizes and same.cut_bytes == distinct.cut_bytes
    assert (partition(gpt_like(False, 98), 8e9, 4).evaluated, partition(gpt_like(True, 98), 8e9, 4).evaluated) == (26, 863)


def test_a_hundred_layers_take_well_under_a_second() -> None:
    layers = gpt_like(True, blocks=98)
    start = time.perf_counter()
    got = partition(layers, sum(x.memory for x in layers) - 1, 4)  # nearly every segment fits: the most work
    assert time.perf_counter() - start < 1.0
    assert len(got.sizes) == 2 and got.evaluated == 100 * 101 // 2


@pytest.mark.parametrize(("budget", "c", "field"), [
    (0, 1, "budget_bytes"), (-1.0, 1, "budget_bytes"), (math.nan, 1, "budget_bytes"), ("1", 1, "budget_bytes"),
    (True, 1, "budget_bytes"), (10, 0, "accumulation"), (10, 1.5, "accumulation"), (10, True, "accumulation"),
    (10, "2", "accumulation"),
])
def test_bad_arguments_name_the_field(budget: object, c: object, field: str) -> None:
    with pytest.raises(ConfigError, match=rf"partition\.{field}=") as err:
        partition([layer("l0")], budget, c)  # type: ignore[arg-type]
    assert err.value.field == field


def test_an_empty_profile_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"profile\.layers=\[\] is not allowed: at least one LayerCost"):
        partition([], 10)


@settings(max_examples=200, deadline=None)
@given(profiles(), st.integers(1, 4), st.booleans())
def test_least_budget_is_the_smallest_that_finds_a_partition(layers: list[LayerCost], c: int, together: bool) -> None:
    least = least_budget(layers, c, together)
    assert brute_force(layers, least, c, together) is not None
    assert brute_force(layers, least - 1, c, together) is None  # memory sums are whole bytes here
