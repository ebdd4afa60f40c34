"""A run's peak memory on one machine, estimated from its config (pure: no torch), and the check
that refuses a run this machine cannot hold before it starts, instead of the kernel's OOM killer.

The estimate counts, for every replica of a stage held by the process (the in-process backend
holds every peer of every stage; a Dask worker, one): parameters, accumulated and transient
gradients, optimizer state (AdamW 2x, SGD with momentum 1x), a delayed update's shadow copy or
DiLoCo's global copy and outer momentum, and one copy for a snapshot (checkpoint, evaluation,
a joiner's download). Activations: every microbatch in flight (trainers x inflight) keeps each
stage's saved tensors until its backward (about 16 x d_model per token and block; SDPA's flash
kernel keeps no T^2 scores except in float64, whose math kernel does), or only the stage's input
with activation checkpointing; each peer computing at once adds one graph, the last stage its
logits. Plus the corpus in memory and a fixed allowance for the interpreter and torch. It aims to
be within 2x of what a run reaches, so a refusal means the run would not fit, not that it is tight.
"""

from __future__ import annotations

from dataclasses import dataclass

from labkit.config import ConfigError, ModelConfig, RunConfig

BYTES = {"float32": 4, "float64": 8, "bfloat16": 2}
MiB = 1 << 20
BASE_BYTES = 768 * MiB  # the interpreter, torch, numba and the lab's imports, measured at about 600 MB
SAVED_PER_TOKEN = 16  # elements of d_model saved for backward per token and block (LN, qkv, attention, MLP 4d x 2)
LOGITS_COPIES = 3  # logits, their softmax and its gradient, per token of the last stage


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes a run needs at its peak, by part."""

    weights: int  # parameters, gradients, optimizer state and extra copies of every replica held
    activations: int  # saved tensors of the microbatches in flight and the graphs being computed
    other: int  # corpus and the process itself

    @property
    def total(self) -> int:
        return self.weights + self.activations + self.other

    def describe(self) -> str:
        """One line: the total and its parts in GiB."""
        return (f"{_gib(self.total)} (weights and optimizer state {_gib(self.weights)}, activations "
                f"{_gib(self.activations)}, process and data {_gib(self.other)})")


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"


def _copies(cfg: RunConfig) -> int:
    """Copies of a replica's parameters: itself, accumulated and transient gradients, optimizer
    state, shadow or DiLoCo copies, and one snapshot."""
    optimizer = 2 if cfg.optimizer == "adamw" else (1 if cfg.momentum > 0 else 0)
    extra = 1 if cfg.delayed_updates else (2 if cfg.sync.mode == "diloco" else 0)
    return 1 + 2 + optimizer + extra + 1


def _activations(cfg: RunConfig, width: int) -> int:
    """Bytes of activations at the peak: microbatches in flight and the graphs computing at once."""
    model: ModelConfig = cfg.model
    tokens = cfg.microbatch * model.seq_len
    per_block = SAVED_PER_TOKEN * model.d_model + (2 * model.n_head * model.seq_len if model.dtype == "float64" else 0)
    whole = tokens * per_block * model.n_layer  # one microbatch through every block
    stages = cfg.stages if cfg.spec.staged else 1
    stashed = tokens * model.d_model * stages if cfg.activation_checkpointing else whole
    flight = cfg.spec.in_flight(cfg)
    computing = width * tokens * per_block * max(cfg.layer_split or (model.n_layer,))
    logits = width * tokens * model.vocab_size * LOGITS_COPIES
    return (flight * stashed + computing + logits) * BYTES[model.dtype]


def estimate_memory(cfg: RunConfig) -> MemoryEstimate:
    """The peak bytes of `cfg` run in one process (the in-process backend: every peer here)."""
    held = cfg.spec.held(cfg)  # (parameters, replicas held) per stage, as the executor keeps them
    weights = sum(params * count for params, count in held) * _copies(cfg) * BYTES[cfg.model.dtype]
    width = sum(count for _, count in held)  # replicas that may compute at the same moment
    corpus = 2 * cfg.data.max_bytes  # the bytes read and the arrays cut from them
    return MemoryEstimate(weights=weights, activations=_activations(cfg, width), other=BASE_BYTES + corpus)


def check_memory(cfg: RunConfig, available: int) -> MemoryEstimate:
    """The estimate of `cfg` in one process, or one ConfigError if it exceeds `available` bytes (pass
    psutil.virtual_memory().available), saying the estimate and what would fit."""
    need = estimate_memory(cfg)
    if need.total <= available:
        return need
    hint = _what_fits(cfg, available)
    raise ConfigError("RunConfig", "memory", f"an estimated {need.describe()}",
                      f"at most the {_gib(available)} this machine has free; {hint}")


def _what_fits(cfg: RunConfig, available: int) -> str:
    """A smaller run that fits, in words: the largest microbatch, else fewer replicas or a smaller model."""
    if estimate_memory(cfg.replace(microbatch=1)).total <= available:
        fits = [m for m in _divisors(cfg.global_batch) if m < cfg.microbatch
                and estimate_memory(cfg.replace(microbatch=m)).total <= available]
        if fits:
            return f"microbatch={fits[0]} (a divisor of global_batch={cfg.global_batch}) would fit"
        return "a smaller microbatch, fewer trainers or in-flight microbatches, or activation checkpointing would fit"
    return ("even microbatch=1 does not fit: use fewer peers, a smaller model or sequence length, or the Dask "
            "backend on more machines")


def _divisors(n: int) -> list[int]:
    """The divisors of `n`, largest first."""
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted({*small, *(n // d for d in small)}, reverse=True)
