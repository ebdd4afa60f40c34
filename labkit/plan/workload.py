"""What the planners move and compute: c_DP / c_PP bytes and FLOPs, from a model shape and a batch.

DT-FM needs c_DP (parameter/gradient bytes of one stage) and c_PP (activation bytes of
one macro-batch between two stages); the task pool paper needs t (activation bytes of one minibatch) and the
batch's total FLOPs. Both come from here so the two planners price the same model the same way.

>>> w = Workload.gpt3_xl(batch=1024)
>>> round(w.c_pp(replicas=8) / 2**30, 2)  # GiB of fp16 activations per macro-batch
1.0
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from labkit.config import ConfigError, ModelConfig


def _positive(owner: str, name: str, value: object, integer: bool) -> None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0
    if not ok or (integer and not isinstance(value, int)):
        raise ConfigError(owner, name, value, "an integer >= 1" if integer else "a finite number > 0")


@dataclass(frozen=True, kw_only=True, slots=True)
class Workload:
    """A decoder-only transformer trained on `batch` sequences per iteration."""

    d_model: int = 2048  # hidden size (GPT3-XL)
    n_layer: int = 24  # transformer blocks
    seq_len: int = 2048  # tokens per sequence
    batch: int = 1024  # sequences per iteration, whole cluster
    microbatch: int = 4  # sequences per minibatch (the task pool paper's d = batch / microbatch)
    bytes_per_value: int = 2  # fp16 activations, gradients and parameters
    c_dp_given: float | None = None  # DT-FM c_DP in bytes, overriding the derived value
    c_pp_given: float | None = None  # DT-FM c_PP in bytes, overriding the derived value

    def __post_init__(self) -> None:
        for name in ("d_model", "n_layer", "seq_len", "batch", "microbatch", "bytes_per_value"):
            _positive("Workload", name, getattr(self, name), integer=True)
        for name in ("c_dp_given", "c_pp_given"):
            if getattr(self, name) is not None:
                _positive("Workload", name, getattr(self, name), integer=False)
        if self.batch % self.microbatch:
            raise ConfigError("Workload", "batch", self.batch, f"a multiple of microbatch={self.microbatch}")

    @classmethod
    def gpt3_xl(cls, batch: int = 1024, n_layer: int = 24) -> Workload:
        """DT-FM's model: GPT3-XL (d=2048, sequence 2048) with a chosen depth and batch."""
        return cls(d_model=2048, n_layer=n_layer, seq_len=2048, batch=batch)

    @classmethod
    def from_model(cls, model: ModelConfig, batch: int, microbatch: int = 4) -> Workload:
        """Shape taken from a labkit ModelConfig."""
        return cls(d_model=model.d_model, n_layer=model.n_layer, seq_len=model.seq_len,
                   batch=batch, microbatch=microbatch)

    def block_params(self) -> int:
        """Parameters of one block, the same count as `ModelConfig.block_params` (12d² + 13d)."""
        return 12 * self.d_model**2 + 13 * self.d_model

    def layer_flops_per_token(self) -> float:
        """Training FLOPs of one block per token (6·P plus attention scores), as ModelConfig counts."""
        return 6.0 * self.block_params() + 12.0 * self.seq_len * self.d_model

    def c_dp(self, stages: int) -> float:
        """Bytes of one stage's gradients (the deepest stage of an even split)."""
        if self.c_dp_given is not None:
            return self.c_dp_given
        return math.ceil(self.n_layer / stages) * self.block_params() * self.bytes_per_value

    def c_pp(self, replicas: int) -> float:
        """Bytes of activations of one macro-batch (batch / replicas sequences) crossing a stage boundary."""
        if self.c_pp_given is not None:
            return self.c_pp_given
        return self.batch / replicas * self.seq_len * self.d_model * self.bytes_per_value

    def minibatch_bytes(self) -> float:
        """The task pool paper's t·B/d: activation bytes of one minibatch between adjacent stages."""
        return self.microbatch * self.seq_len * self.d_model * self.bytes_per_value

    def minibatches(self) -> int:
        """The task pool paper's d: minibatches per batch."""
        return self.batch // self.microbatch

    def batch_flops(self, layers: float | None = None) -> float:
        """Training FLOPs of the whole batch through `layers` blocks (all blocks by default)."""
        n = self.n_layer if layers is None else layers
        return self.batch * self.seq_len * n * self.layer_flops_per_token()
