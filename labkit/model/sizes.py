"""Parameter counts of model pieces, without building them (pure: no torch)."""

from __future__ import annotations

from labkit.config import ModelConfig


def stage_params(cfg: ModelConfig, first: int, count: int) -> int:
    """Parameters of the stage holding blocks first..first+count-1 (embeddings / head at the ends)."""
    d, v = cfg.d_model, cfg.vocab_size
    blocks = cfg.block_params() * (1 if cfg.share_layers else count)
    head = (2 * d + v * d) if first + count == cfg.n_layer else 0
    embed = (v * d + (cfg.seq_len * d if cfg.positions == "learned" else 0)) if first == 0 else 0
    return blocks + head + embed
