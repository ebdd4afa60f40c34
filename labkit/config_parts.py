"""The parts of a run's configuration: the model, the data, the wire's compression and each stage's
sync rule. Frozen, keyword-only dataclasses that validate on construction (`labkit.config` holds
the run's own config and re-exports these). Pure Python, no torch.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from labkit.config_checks import check as _check
from labkit.config_checks import is_int as _is_int
from labkit.config_checks import is_number as _is_number
from labkit.config_checks import special_kind

# name -> (layers, heads, hidden): the GPT-2 family of the DiLoCo-SWARM report plus `nano`,
# which trains visibly on 2 CPU cores within a minute.
MODEL_SIZES: dict[str, tuple[int, int, int]] = {
    "nano": (4, 4, 64),
    "tiny": (4, 4, 128),
    "small": (12, 12, 768),
    "medium": (24, 16, 1024),
    "large": (36, 20, 1280),
}
POSITIONS = ("learned", "rotary")
MAX_LR = 10.0  # peak learning rate; SGD or AdamW steps this large diverge for every model here
MAX_OUTER_LR = 2.0  # DiLoCo outer learning rate; beyond 2 an outer step overshoots the peers' average
MAX_WEIGHT_DECAY = 1.0  # decoupled decay per unit of learning rate
MAX_WAIT = 86_400.0  # seconds: peer timeout and rebalancing period (a day)
MAX_SEQ_LEN = 65_536  # context length; attention memory grows with its square
DTYPES = ("float32", "float64", "bfloat16")
MAX_THREADS = max(64, 4 * (os.cpu_count() or 1))  # torch threads; far more than cores only slows torch, 1e5 kills it


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelConfig:
    """A GPT-style decoder: pre-LayerNorm blocks, causal attention, GELU MLP, untied embeddings."""

    size: str = "nano"  # one of MODEL_SIZES; sets layers / heads / hidden
    seq_len: int = 64  # context length in tokens (bytes), at most MAX_SEQ_LEN
    vocab_size: int = 256  # byte-level vocabulary
    positions: str = "learned"  # "learned" absolute embeddings or "rotary" (RoPE)
    share_layers: bool = False  # ALBERT-style: the blocks of a stage share one block's parameters
    dtype: str = "float32"  # parameter dtype; float64 makes equivalence tests exact to 1e-12

    def __post_init__(self) -> None:
        o = "ModelConfig"
        _check(isinstance(self.size, str) and self.size in MODEL_SIZES, o, "size", self.size,
               f"one of {sorted(MODEL_SIZES)}")
        _check(_is_int(self.seq_len) and 2 <= self.seq_len <= MAX_SEQ_LEN, o, "seq_len", self.seq_len,
               f"an integer >= 2 and <= {MAX_SEQ_LEN}: attention keeps seq_len^2 scores per head and sample "
               "(16 GiB each at the limit), and learned positions a seq_len x d_model table")
        _check(_is_int(self.vocab_size) and self.vocab_size >= 2, o, "vocab_size", self.vocab_size, "an integer >= 2")
        _check(self.positions in POSITIONS, o, "positions", self.positions, f"one of {list(POSITIONS)}")
        _check(isinstance(self.share_layers, bool), o, "share_layers", self.share_layers, "True or False")
        _check(self.dtype in DTYPES, o, "dtype", self.dtype, f"one of {list(DTYPES)}")
        if self.positions == "rotary":
            _check(self.head_dim % 2 == 0, o, "positions", self.positions, "rotary needs an even head size")

    @property
    def n_layer(self) -> int:
        return MODEL_SIZES[self.size][0]

    @property
    def n_head(self) -> int:
        return MODEL_SIZES[self.size][1]

    @property
    def d_model(self) -> int:
        return MODEL_SIZES[self.size][2]

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_head

    def block_params(self) -> int:
        """Parameters of one transformer block (attention 4d²+4d, MLP 8d²+5d, two LayerNorms 4d)."""
        d = self.d_model
        return 12 * d * d + 13 * d

    def num_params(self) -> int:
        """All parameters: blocks, token (and learned position) embeddings, final norm, untied head."""
        d, v = self.d_model, self.vocab_size
        pos = self.seq_len * d if self.positions == "learned" else 0
        blocks = self.block_params() * (1 if self.share_layers else self.n_layer)
        return blocks + v * d + pos + 2 * d + v * d

    def stage_params(self, first: int, count: int) -> int:
        """Parameters of the stage holding blocks first..first+count-1 (embeddings / head at the ends)."""
        d, v = self.d_model, self.vocab_size
        blocks = self.block_params() * (1 if self.share_layers else count)
        head = (2 * d + v * d) if first + count == self.n_layer else 0
        embed = (v * d + (self.seq_len * d if self.positions == "learned" else 0)) if first == 0 else 0
        return blocks + head + embed

    def block_flops_per_token(self) -> float:
        """Training FLOPs of one block per token: 6·P_block plus attention scores 6·2·T·d (fwd+bwd)."""
        return 6.0 * self.block_params() + 12.0 * self.seq_len * self.d_model


@dataclass(frozen=True, kw_only=True, slots=True)
class DataConfig:
    """Where text comes from: the Python standard library's .py files by default, or a path."""

    path: str | None = None  # a text file or folder; None = the stdlib corpus
    val_fraction: float = 0.1  # share of files (by stable path hash) held out for validation
    max_bytes: int = 64_000_000  # read at most this many bytes of corpus

    def __post_init__(self) -> None:
        o = "DataConfig"
        _check(self.path is None or (isinstance(self.path, str) and self.path != ""), o, "path", self.path, "None or a non-empty path")
        _check(special_kind(self.path or ".") is None, o, "path", self.path,
               f"a text file or folder, not a {special_kind(self.path or '.')} (reading one waits or never ends)")
        _check(_is_number(self.val_fraction) and 0.0 < self.val_fraction < 1.0, o, "val_fraction", self.val_fraction, "a number in (0, 1)")
        _check(_is_int(self.max_bytes) and self.max_bytes >= 1024, o, "max_bytes", self.max_bytes, "an integer >= 1024")


WIRE_CODECS = ("fp32", "fp16", "bf16", "int8")  # the names labkit.wire.CODECS registers
BOUNDARIES = ("none", "bottleneck", "maxout")


@dataclass(frozen=True, kw_only=True, slots=True)
class CompressionConfig:
    """Codec for activations and their gradients between stages, plus optional boundary layers.

    >>> CompressionConfig(codec="int8", boundary="maxout", factor=2).boundary
    'maxout'
    """

    codec: str = "fp32"  # wire codec: fp32 (no compression), fp16, bf16, int8 (switchable mid-run)
    boundary: str = "none"  # "none", "bottleneck" or "maxout" layers at every stage boundary (App. J)
    factor: int = 2  # boundary compression factor: d_model / features sent (ignored for "none")

    def __post_init__(self) -> None:
        o = "CompressionConfig"
        _check(self.codec in WIRE_CODECS, o, "codec", self.codec, f"one of {sorted(WIRE_CODECS)}")
        _check(self.boundary in BOUNDARIES, o, "boundary", self.boundary, f"one of {list(BOUNDARIES)}")
        _check(_is_int(self.factor) and self.factor >= 1, o, "factor", self.factor, "an integer >= 1 dividing d_model")


OPTIMIZERS = ("adamw", "sgd")
SYNC_MODES = ("allreduce", "diloco")
INNER_STATES = ("keep", "reset")


@dataclass(frozen=True, kw_only=True, slots=True)
class SyncConfig:
    """How each stage's peers agree: SWARM's gradient all-reduce every step, or DiLoCo.

    DiLoCo (the DiLoCo-SWARM report): every peer takes `inner_steps` (H) local optimizer steps on its own
    gradients, then the stage averages the pseudo-gradients (local - global parameters, weighted by
    the samples each peer processed) and an outer Nesterov SGD step moves the global parameters
    toward the average; every peer then restarts from the new global parameters.
    """

    mode: str = "allreduce"  # "allreduce" (SWARM, every step) or "diloco"
    inner_steps: int = 20  # H: local steps between outer steps (DiLoCo only)
    outer_lr: float = 0.7  # outer Nesterov SGD learning rate, in (0, MAX_OUTER_LR]
    outer_momentum: float = 0.9  # outer momentum (0 = plain SGD)
    inner_state: str = "keep"  # inner optimizer state across outer steps: "keep" or "reset"

    def __post_init__(self) -> None:
        o = "SyncConfig"
        _check(self.mode in SYNC_MODES, o, "mode", self.mode, f"one of {list(SYNC_MODES)}")
        _check(_is_int(self.inner_steps) and self.inner_steps >= 1, o, "inner_steps", self.inner_steps, "an integer >= 1")
        _check(_is_number(self.outer_lr) and 0 < self.outer_lr <= MAX_OUTER_LR, o, "outer_lr", self.outer_lr,
               f"a finite number > 0 and <= {MAX_OUTER_LR:g}: with no momentum 1 lands on the peers' average and 2 on "
               "its mirror image; a larger outer step overshoots more every round and diverges")
        _check(_is_number(self.outer_momentum) and 0 <= self.outer_momentum < 1, o, "outer_momentum", self.outer_momentum, "a number in [0, 1)")
        _check(self.inner_state in INNER_STATES, o, "inner_state", self.inner_state, f"one of {list(INNER_STATES)}")
