"""Deterministic, counter-based sampling of training windows.

Every microbatch is a pure function of (seed, step, microbatch index): a run's data position is
just its step number, so saving and restoring it is exact, and any peer or trainer can rebuild
the samples of a microbatch that has to be recomputed after a fault.
"""

from __future__ import annotations

import numpy as np
import torch


class WindowSampler:
    """Random windows of `seq_len + 1` bytes from a byte stream: inputs and next-byte targets."""

    def __init__(self, data: np.ndarray, seq_len: int, seed: int) -> None:
        if data.size < seq_len + 2:
            raise ValueError(f"data holds {data.size} bytes, fewer than one window of seq_len+1={seq_len + 1}")
        self.data = torch.from_numpy(np.array(data, dtype=np.uint8))  # a writable copy
        self.seq_len = seq_len
        self.seed = seed

    def offsets(self, step: int, index: int, size: int) -> np.ndarray:
        """Start offsets of microbatch `index` of optimizer step `step`."""
        rng = np.random.default_rng([self.seed, step, index])
        return rng.integers(0, self.data.numel() - self.seq_len - 1, size=size)

    def batch(self, step: int, index: int, size: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(inputs, targets), each (size, seq_len) int64."""
        offs = torch.from_numpy(self.offsets(step, index, size))
        idx = offs[:, None] + torch.arange(self.seq_len + 1)  # (B, T+1)
        windows = self.data[idx].long()
        return windows[:, :-1], windows[:, 1:]
