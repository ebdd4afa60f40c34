"""What ATOM's partition search (the ATOM paper, Algorithm 1) and its simulator know of a model: a cost
per layer, in the order the layers run.

A profile is measured on the device in use (`labkit.executors.atom.profile`) or derived from a
model shape and a device preset (`labkit.sim.atom`); both give the same `LayerCost` rows, so the
search and the simulator price a real profile and an analytic one the same way. Pure: no torch.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from labkit.config import ConfigError

KINDS = ("embed", "block", "head")


@dataclass(frozen=True, slots=True)
class LayerCost:
    """One layer (the embedding, a transformer block or the head) of one minibatch of C=1.

    memory: the most bytes the layer holds on the device while it runs (parameters, their
    gradients, its activations); param_bytes: what a swap moves host -> device; fwd_s, bwd_s,
    load_s: seconds of forward, backward and host -> device loading; out_bytes: the tensor it
    hands to the next layer (what a cut after it moves between sub-models)."""

    name: str
    kind: str
    memory: float
    param_bytes: float
    fwd_s: float
    bwd_s: float
    load_s: float
    out_bytes: float

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ConfigError("LayerCost", "kind", self.kind, f"one of {list(KINDS)}")
        for field in ("memory", "param_bytes", "fwd_s", "bwd_s", "load_s", "out_bytes"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise ConfigError("LayerCost", field, value, "a finite number >= 0")

    def signature(self) -> tuple[object, ...]:
        """Everything but the name: layers with equal signatures are interchangeable in a search."""
        return (self.kind, self.memory, self.param_bytes, self.fwd_s, self.bwd_s, self.load_s, self.out_bytes)


def check_profile(layers: Sequence[LayerCost]) -> tuple[LayerCost, ...]:
    """The profile as a tuple, or one error saying what is wrong with it."""
    out = tuple(layers)
    if not out:
        raise ConfigError("profile", "layers", [], "at least one LayerCost")
    if not all(isinstance(layer, LayerCost) for layer in out):
        raise ConfigError("profile", "layers", [type(x).__name__ for x in out], "LayerCost rows only")
    return out
