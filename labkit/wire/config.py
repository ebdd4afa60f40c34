"""Per-run compression settings: which wire codec and which boundary layers sit between stages."""

from __future__ import annotations

from dataclasses import dataclass

from labkit.config import ConfigError
from labkit.wire.codecs import CODECS

BOUNDARIES = ("none", "bottleneck", "maxout")


@dataclass(frozen=True, kw_only=True, slots=True)
class CompressionConfig:
    """Codec for activations and their gradients between stages, plus optional boundary layers.

    >>> CompressionConfig(codec="int8", boundary="maxout", factor=2).boundary
    'maxout'
    """

    codec: str = "fp32"  # a name in labkit.wire.CODECS: fp32 (no compression), fp16, bf16, int8
    boundary: str = "none"  # "none", "bottleneck" or "maxout" layers at every stage boundary (App. J)
    factor: int = 2  # boundary compression factor: d_model / features sent (ignored for "none")

    def __post_init__(self) -> None:
        o = "CompressionConfig"
        if self.codec not in CODECS:
            raise ConfigError(o, "codec", self.codec, f"one of {sorted(CODECS)}")
        if self.boundary not in BOUNDARIES:
            raise ConfigError(o, "boundary", self.boundary, f"one of {list(BOUNDARIES)}")
        if not isinstance(self.factor, int) or isinstance(self.factor, bool) or self.factor < 1:
            raise ConfigError(o, "factor", self.factor, "an integer >= 1 dividing d_model")
