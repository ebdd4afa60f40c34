"""ATOM's partition search (the ATOM paper, §III-D, Algorithm 1): cut a model's layers, in the order they
run, into contiguous sub-models that a device swaps in one after another.

Constraints: every sub-model fits the memory budget, and compute hides the next load both ways:
forward k -> k+1 needs C·fwd(k) >= load(k+1), backward k+1 -> k needs C·bwd(k+1) >= load(k), where
C microbatches run forward before backward. Objective: the fewest bytes crossing cuts; ties go to
fewer sub-models, then to the lexicographically smallest sizes. The search is an exact dynamic
program over (start, end) of the current sub-model. Pure: no torch, no threads.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from numbers import Integral, Real

from labkit.config import ConfigError
from labkit.plan.atom_profile import LayerCost, check_profile

Sums = tuple[float, float, float, float]  # one sub-model's memory, fwd_s, bwd_s, load_s
Span = tuple[int, int]  # [first, end) of one sub-model
MAX_C = 2**50  # the largest accumulation degree the error's advice computes


@dataclass(frozen=True)
class Partition:
    """The chosen cut of a profile: layers per sub-model and what each sub-model costs.

    compute_s is forward + backward of one microbatch (C=1); evaluated counts the distinct
    candidate sub-models the search priced (identical blocks share one price)."""

    sizes: tuple[int, ...]
    cut_bytes: float
    memory: tuple[float, ...]
    compute_s: tuple[float, ...]
    load_s: tuple[float, ...]
    accumulation: int
    evaluated: int

    def bounds(self) -> list[tuple[int, int]]:
        """(first layer, layer count) of every sub-model, in execution order."""
        firsts = [sum(self.sizes[:k]) for k in range(len(self.sizes))]
        return list(zip(firsts, self.sizes, strict=True))


class NoFeasiblePartition(ValueError):
    """No partition meets the constraints; the message names the binding one and what fixes it.

    constraint is "memory" or "overlap"; least_accumulation is the smallest C that makes some
    partition feasible at this budget (None when memory binds or no C does)."""

    def __init__(self, message: str, constraint: str, least_accumulation: int | None) -> None:
        super().__init__(message)
        self.constraint = constraint
        self.least_accumulation = least_accumulation


class _Segments:
    """Every candidate sub-model [s, e) within the budget, priced once per distinct run of layer
    signatures: a run of identical blocks yields one price per length, not one per position."""

    def __init__(self, layers: tuple[LayerCost, ...], budget: float) -> None:
        kinds: dict[tuple[object, ...], int] = {}
        layer_ids = [kinds.setdefault(layer.signature(), len(kinds)) for layer in layers]
        costs = [(x.memory, x.fwd_s, x.bwd_s, x.load_s) for x in layers]
        ids: dict[tuple[int, int], int] = {}  # (segment id, next layer's id) -> longer segment's id
        prices: list[Sums] = []
        self.rows: list[list[Sums]] = []  # rows[s][e - s - 1]: sums of [s, e)
        for s in range(len(layers)):
            row: list[Sums] = []
            seg, total = -1, (0.0, 0.0, 0.0, 0.0)
            for e in range(s, len(layers)):
                seg_next = ids.setdefault((seg, layer_ids[e]), len(ids))
                if seg_next == len(prices):
                    prices.append(tuple(a + b for a, b in zip(total, costs[e], strict=True)))
                seg, total = seg_next, prices[seg_next]
                if total[0] > budget:
                    break
                row.append(total)
            self.rows.append(row)
        self.evaluated = len(prices)

    def __call__(self, span: Span) -> Sums:
        return self.rows[span[0]][span[1] - span[0] - 1]

    def ends(self, s: int) -> range:
        """Ends e of the sub-models [s, e) that fit the budget."""
        return range(s + 1, s + 1 + len(self.rows[s]))


Join = Callable[[Span, Span, tuple], tuple | None]


def _chain(seg: _Segments, terminal: tuple, join: Join) -> tuple[tuple, list[Span]] | None:
    """The best chain of sub-models covering every layer, or None when no chain is allowed.

    Value of a state (current sub-model a) = min over the next sub-model b of join(a, b, value of
    b), `terminal` when a is the last; ties go to the shortest b, so chosen sizes are the
    lexicographically smallest. Returns (value of the best first sub-model, the chain's spans)."""
    n = len(seg.rows)
    best: dict[Span, tuple[tuple, int]] = {}
    for e in range(n, 0, -1):
        for s in range(e - 1, -1, -1):
            if len(seg.rows[s]) < e - s:
                break  # [s, e) is over budget, and so is every longer one ending at e
            if e == n:
                best[(s, e)] = (terminal, n)
                continue
            pick: tuple[tuple, int] | None = None
            for after in seg.ends(e):
                rest = best.get((e, after))
                value = None if rest is None else join((s, e), (e, after), rest[0])
                if value is not None and (pick is None or value < pick[0]):
                    pick = (value, after)
            if pick is not None:
                best[(s, e)] = pick
    firsts = [(best[(0, e)][0], e) for e in seg.ends(0) if (0, e) in best]
    if not firsts:
        return None
    value, end = min(firsts)
    spans = [(0, end)]
    while end < n:
        spans.append((end, best[spans[-1]][1]))
        end = spans[-1][1]
    return value, spans


def _least_c(work: float, load: float) -> float:
    """The smallest integer C >= 1 with C·work >= load; math.inf when none is below MAX_C, past
    which floats no longer tell neighbouring integers apart."""
    if load <= work:
        return 1
    ratio = load / work if work > 0 else math.inf
    if not ratio < MAX_C:
        return math.inf
    c = max(1, math.ceil(ratio))  # off by one at most: below MAX_C, load / work errs by < 1/8
    while c * work < load:
        c += 1
    while c > 1 and (c - 1) * work >= load:
        c -= 1
    return c


def _pair_need(seg: _Segments, a: Span, b: Span) -> tuple[float, float]:
    """Least C for forward a -> b (a computes while b loads) and for backward b -> a."""
    (_, fwd_a, _, load_a), (_, _, bwd_b, load_b) = seg(a), seg(b)
    return _least_c(fwd_a, load_b), _least_c(bwd_b, load_a)


def _check_args(budget_bytes: float, accumulation: int) -> None:
    if isinstance(budget_bytes, bool) or not isinstance(budget_bytes, Real) or not budget_bytes > 0:
        raise ConfigError("partition", "budget_bytes", budget_bytes, "a number of bytes > 0")
    if isinstance(accumulation, bool) or not isinstance(accumulation, Integral) or accumulation < 1:
        raise ConfigError("partition", "accumulation", accumulation, "an integer >= 1")


def partition(profile: Sequence[LayerCost], budget_bytes: float, accumulation: int = 1,
              together: bool = False) -> Partition:
    """The feasible partition with the fewest bytes crossing cuts (exact), or NoFeasiblePartition
    saying which constraint binds and what would lift it. together: adjacent sub-models must fit
    the budget side by side (a swap executor that loads the next while the current computes)."""
    layers = check_profile(profile)
    _check_args(budget_bytes, accumulation)
    c = int(accumulation)
    _check_memory(layers, budget_bytes, together)
    seg = _Segments(layers, budget_bytes)

    def join(a: Span, b: Span, rest: tuple) -> tuple | None:
        (mem_a, fwd_a, _, load_a), (mem_b, _, bwd_b, load_b) = seg(a), seg(b)
        if c * fwd_a < load_b or c * bwd_b < load_a or (together and mem_a + mem_b > budget_bytes):
            return None
        return rest[0] + layers[a[1] - 1].out_bytes, rest[1] + 1

    found = _chain(seg, (0.0, 0), join)
    if found is None:
        raise _overlap_error(seg, c, sum(x.memory for x in layers), budget_bytes if together else math.inf)
    _, spans = found
    sums = [seg(span) for span in spans]
    cut_bytes = math.fsum(layers[e - 1].out_bytes for _, e in spans[:-1])  # the order-free sum
    return Partition(
        sizes=tuple(e - s for s, e in spans), cut_bytes=cut_bytes, memory=tuple(x[0] for x in sums),
        compute_s=tuple(x[1] + x[2] for x in sums), load_s=tuple(x[3] for x in sums),
        accumulation=c, evaluated=seg.evaluated)


def _check_memory(layers: tuple[LayerCost, ...], budget: float, together: bool) -> None:
    """Raise the memory error when no partition fits, overlap aside: a layer alone is over the
    budget, or (together) the whole model is and so is some pair of neighbouring layers, which
    every partition of two or more sub-models holds within one sub-model or across one cut."""
    biggest = max(layers, key=lambda x: x.memory)
    if biggest.memory > budget:
        raise NoFeasiblePartition(
            f"layer {biggest.name!r} needs {_bytes(biggest.memory)} alone, above the budget of "
            f"{_bytes(budget)}; raise the budget to >= {_bytes(biggest.memory)}", "memory", None)
    if not together or math.fsum(x.memory for x in layers) <= budget:
        return
    a, b = max(itertools.pairwise(layers), key=lambda pair: pair[0].memory + pair[1].memory)
    need = a.memory + b.memory
    if need > budget:
        raise NoFeasiblePartition(
            f"layers {a.name!r} and {b.name!r} need {_bytes(need)} side by side (one computes while the next "
            f"loads), above the budget of {_bytes(budget)}; raise the budget to >= {_bytes(need)}", "memory", None)


def least_budget(profile: Sequence[LayerCost], accumulation: int = 1, together: bool = True) -> float:
    """The smallest budget at which `partition` finds a partition: a binary search over the sums
    of contiguous runs of layers (the only values a sub-model, or two neighbours, can need).
    The whole model as one sub-model always qualifies, so there always is one."""
    layers = check_profile(profile)
    _check_args(1, accumulation)
    prefix = list(itertools.accumulate((x.memory for x in layers), initial=0.0))
    candidates = sorted({prefix[e] - prefix[s] for s in range(len(layers)) for e in range(s + 1, len(layers) + 1)})
    low, high = 0, len(candidates) - 1
    while low < high:
        mid = (low + high) // 2
        try:
            partition(layers, candidates[mid], accumulation, together)
            high = mid
        except NoFeasiblePartition:
            low = mid + 1
    return candidates[low]


def _overlap_error(seg: _Segments, c: int, whole_bytes: float, pair_budget: float) -> NoFeasiblePartition:
    """Memory allows a partition but none overlaps at C: find the partition that needs the least
    C (min over partitions of the max over adjacent pairs) and name its tightest pair."""

    def join(a: Span, b: Span, rest: tuple) -> tuple | None:
        if seg(a)[0] + seg(b)[0] > pair_budget:
            return None
        return (max(*_pair_need(seg, a, b), rest[0]),)

    found = _chain(seg, (1,), join)
    assert found is not None  # one layer per sub-model fits (side by side too: `_check_memory` said so)
    (least,), spans = found
    needs = [_pair_need(seg, a, b) for a, b in itertools.pairwise(spans)]
    k = max(range(len(needs)), key=lambda i: (max(needs[i]), -i))  # the first tightest pair
    a, b = spans[k], spans[k + 1]
    (_, fwd_a, _, load_a), (_, _, bwd_b, load_b) = seg(a), seg(b)
    if needs[k][0] >= needs[k][1]:
        pair = f"[{a[0]},{a[1]}) -> [{b[0]},{b[1]}): {c} x {fwd_a:.3g} s forward < {load_b:.3g} s load"
    else:
        pair = f"[{b[0]},{b[1]}) -> [{a[0]},{a[1]}) backward: {c} x {bwd_b:.3g} s backward < {load_a:.3g} s load"
    fix = (f"raise accumulation to >= {least} or the budget" if math.isfinite(least)
           else f"no accumulation does; raise the budget (the whole model needs {_bytes(whole_bytes)})")
    return NoFeasiblePartition(
        f"no partition lets compute hide loading at C={c}: the best candidate's tightest pair is "
        f"sub-model {pair}; {fix}", "overlap", int(least) if math.isfinite(least) else None)


def _bytes(n: float) -> str:
    """1.2e9 -> '1.2 GB' (three significant digits, decimal units)."""
    for unit in ("B", "kB", "MB", "GB"):
        if abs(n) < 1000:
            return f"{n:.3g} {unit}"
        n /= 1000
    return f"{n:.3g} TB"
