"""Corpus split and deterministic, restorable sampling."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from labkit.config import DataConfig
from labkit.data import WindowSampler, load_corpus


def test_stdlib_corpus_split_is_stable() -> None:
    a, b = load_corpus(DataConfig(max_bytes=3_000_000)), load_corpus(DataConfig(max_bytes=3_000_000))
    assert a.source == "python-stdlib" and np.array_equal(a.train, b.train) and np.array_equal(a.val, b.val)
    assert 0.02 < a.val.size / (a.train.size + a.val.size) < 0.3


def test_sampling_is_a_function_of_seed_step_and_index() -> None:
    data = np.frombuffer(b"abcdefghij" * 1000, np.uint8)
    s1, s2 = WindowSampler(data, 16, seed=3), WindowSampler(data, 16, seed=3)
    x1, y1 = s1.batch(7, 2, 4)
    s1.batch(8, 0, 4)  # drawing other batches does not move a position: there is none to move
    x2, y2 = s2.batch(7, 2, 4)
    assert (x1 == x2).all() and (y1 == y2).all() and (x1[:, 1:] == y1[:, :-1]).all()
    assert not (WindowSampler(data, 16, seed=4).batch(7, 2, 4)[0] == x1).all()


def test_text_file_and_errors(tmp_path: Path) -> None:
    f = tmp_path / "book.txt"
    f.write_bytes(bytes(range(32, 127)) * 3000)
    corpus = load_corpus(DataConfig(path=str(f), val_fraction=0.3))
    assert corpus.train.size > 0 and corpus.val.size > 0
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_corpus(DataConfig(path=str(tmp_path / "missing")))
    (tmp_path / "tiny.txt").write_text("x")
    with pytest.raises(ValueError, match="too small"):
        load_corpus(DataConfig(path=str(tmp_path / "tiny.txt")))
