"""The task pool paper's index arithmetic: the even split across a stage boundary and the split by compute."""

from __future__ import annotations

import pytest

from labkit.taskpool import cuts, owners, segments, split_by_compute


def test_two_backward_servers_feed_three_frontal_servers_as_the_paper_says() -> None:
    """2 BS -> 3 FS: BS1 sends 2/3 of its half to FS1 and 1/3 to FS2, BS2 1/3 to FS2, 2/3 to FS3."""
    routes = segments(12, ("b1", "b2"), ("f1", "f2", "f3"))
    assert routes == [("b1", "f1", 0, 4), ("b1", "f2", 4, 6), ("b2", "f2", 6, 8), ("b2", "f3", 8, 12)]
    for sender, start, end in (("b1", 0, 6), ("b2", 6, 12)):
        parts = [(hi - lo) / (end - start) for a, _, lo, hi in routes if a == sender]
        assert parts == (pytest.approx([2 / 3, 1 / 3]) if sender == "b1" else pytest.approx([1 / 3, 2 / 3]))


def test_segments_cover_the_microbatch_once_for_any_server_counts() -> None:
    for senders in range(1, 6):
        for receivers in range(1, 6):
            for n in (1, 7, 60):
                routes = segments(n, [f"s{i}" for i in range(senders)], [f"r{j}" for j in range(receivers)])
                spans = sorted((lo, hi) for _, _, lo, hi in routes)
                assert spans[0][0] == 0 and spans[-1][1] == n
                assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))  # contiguous, no overlap
                ours = [(b, lo, hi) for _, b, lo, hi in routes]
                for j, (lo, hi) in enumerate(zip(cuts(n, receivers), cuts(n, receivers)[1:])):
                    assert sum(h - l for b, l, h in ours if b == f"r{j}") == hi - lo


def test_owners_name_the_servers_holding_a_slice() -> None:
    assert owners(12, ("f1", "f2", "f3"), 3, 9) == [("f1", 3, 4), ("f2", 4, 8), ("f3", 8, 9)]
    assert owners(12, ("f1",), 0, 12) == [("f1", 0, 12)]


def test_split_by_compute_is_proportional_contiguous_and_complete() -> None:
    assert split_by_compute(0, 12, {"a": 2.0, "b": 1.0, "c": 1.0}) == [("a", 0, 6), ("b", 6, 9), ("c", 9, 12)]
    assert split_by_compute(10, 17, {"a": 1.0, "b": 1.0}) == [("a", 10, 14), ("b", 14, 17)]
    assert split_by_compute(0, 2, {"a": 1.0, "b": 1.0, "slow": 0.01}) == [("a", 0, 1), ("b", 1, 2)]
    with pytest.raises(ValueError, match="positive speeds"):
        split_by_compute(0, 4, {"a": 0.0})
