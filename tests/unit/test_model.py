"""Partitioning: any split computes the same function, and re-cutting is lossless."""

from __future__ import annotations

import pytest
import torch

from labkit.config import ConfigError, ModelConfig
from labkit.model import assemble, build_stages, init_full_state


@pytest.mark.parametrize("positions", ["learned", "rotary"])
@pytest.mark.parametrize("split", [2, [3, 1], [1, 1, 1, 1]])
def test_any_split_computes_the_whole_model(positions: str, split: int | list[int]) -> None:
    cfg = ModelConfig(size="nano", seq_len=16, positions=positions, dtype="float64")
    state = init_full_state(cfg, seed=1)
    (whole,) = build_stages(cfg, 1, state)
    x = torch.randint(0, 256, (2, 16))
    h = x
    stages = build_stages(cfg, split, state)
    for stage in stages:
        h = stage(h)
    assert stages[0].is_first and stages[-1].is_last and h.shape == (2, 16, 256)
    assert torch.equal(h, whole(x))


def test_recut_from_full_state_is_lossless() -> None:
    cfg = ModelConfig(size="nano")
    state = init_full_state(cfg, seed=0)
    a = build_stages(cfg, [3, 1], state)
    with torch.no_grad():
        for p in a[1].parameters():
            p.add_(1.0)  # make the stages' states distinguishable from the initial state
    full = assemble([s.state_dict() for s in a])
    b = build_stages(cfg, [1, 3], full)
    again = assemble([s.state_dict() for s in b])
    assert full.keys() == again.keys() and all(torch.equal(full[k], again[k]) for k in full)


def test_layer_sharing_holds_one_block_per_stage() -> None:
    cfg = ModelConfig(size="nano", share_layers=True)
    stages = build_stages(cfg, [3, 1], init_full_state(cfg, seed=0))
    assert [list(s.blocks) for s in stages] == [["0"], ["3"]]
    assert sum(p.numel() for p in stages[0].parameters()) < sum(p.numel() for p in build_stages(ModelConfig(size="nano"), [3, 1], init_full_state(cfg, 0))[0].parameters())


def test_bad_split_is_rejected() -> None:
    cfg = ModelConfig(size="nano")
    with pytest.raises(ConfigError, match="summing to the model's 4 layers"):
        build_stages(cfg, [2, 1], init_full_state(cfg, 0))
    with pytest.raises(ConfigError, match=r"an integer in \[1, 4\]"):
        build_stages(cfg, 5, init_full_state(cfg, 0))
