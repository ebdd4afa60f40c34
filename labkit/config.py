"""Typed run configuration: frozen, keyword-only dataclasses that validate on construction.

A bad value raises `ConfigError` naming the field, the value and what is allowed; nothing is
clamped silently. Pure Python (no torch), so the simulator and planners can read model sizes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields, replace
from typing import Any

from labkit.config_checks import ConfigError
from labkit.config_checks import check as _check
from labkit.config_checks import is_int as _is_int
from labkit.config_checks import is_number as _is_number
from labkit.config_parts import (BOUNDARIES, DTYPES, INNER_STATES, MAX_LR, MAX_OUTER_LR, MAX_SEQ_LEN, MAX_THREADS,
                                 MAX_WAIT, MAX_WEIGHT_DECAY, MODEL_SIZES, OPTIMIZERS, POSITIONS, SYNC_MODES, WIRE_CODECS,
                                 CompressionConfig, DataConfig, ModelConfig, SyncConfig)
from labkit.executors.registry import DEFAULT, SPECS
from labkit.executors.spec import ExecutorSpec

__all__ = ["BOUNDARIES", "DTYPES", "INNER_STATES", "MAX_LR", "MAX_OUTER_LR", "MAX_SEQ_LEN", "MAX_THREADS", "MAX_WAIT",
           "MAX_WEIGHT_DECAY", "MODEL_SIZES", "OPTIMIZERS", "POSITIONS", "SYNC_MODES", "WIRE_CODECS", "CompressionConfig",
           "ConfigError", "DataConfig", "ModelConfig", "RunConfig", "SyncConfig", "even_split"]


@dataclass(frozen=True, kw_only=True, slots=True)
class RunConfig:
    """One training run: model, data, swarm shape (or ATOM's replicas), batch, optimizer and run length.

    >>> RunConfig(stages=2, peers=2, steps=50).layer_split
    (2, 2)
    """

    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    stages: int = 2  # pipeline stages S
    peers: int | tuple[int, ...] = 2  # peers per stage: one number for all, or one per stage
    layer_split: tuple[int, ...] | None = None  # blocks per stage; None = as even as possible
    trainers: int = 4  # trainers, each routing `inflight` microbatches at a time
    inflight: int = 1  # microbatches each trainer keeps in flight (its lanes share one router)
    global_batch: int = 32  # samples per optimizer step, summed over the whole swarm
    microbatch: int = 8  # samples per routed microbatch
    steps: int = 400  # optimizer steps to run (about a minute for nano on 2 CPU cores)
    optimizer: str = "adamw"  # "adamw" (default) or "sgd"
    momentum: float = 0.9  # SGD momentum (the "sgd" optimizer only)
    sync: SyncConfig = field(default_factory=SyncConfig)  # SWARM all-reduce or DiLoCo within each stage
    compression: CompressionConfig = field(default_factory=CompressionConfig)  # wire codec, boundary layers
    lr: float = 3e-3  # peak learning rate, in (0, MAX_LR]
    warmup_steps: int = 5  # linear warm-up from lr/warmup to lr
    weight_decay: float = 0.01  # decoupled weight decay, in [0, MAX_WEIGHT_DECAY]
    gamma: float = 0.1  # EMA smoothing of peer response times in the router
    debias_ema: bool = True  # a peer's first answer replaces the router's prior (False: the paper's plain EMA)
    peer_timeout: float = 30.0  # seconds: the longest a request waits (a trainer's deadlines are learned below it)
    rebalance_period: float = 300.0  # seconds between Algorithm 2 rounds (as in the paper); 0 = off; <= MAX_WAIT
    delayed_updates: bool = False  # delayed parameter updates: step k's update overlaps batch k+1
    activation_checkpointing: bool = False  # peers keep only stage inputs, recompute in backward
    eval_every: int = 50  # steps between validation-loss evaluations (0 = only first and last)
    eval_batches: int = 4  # microbatches of validation data per evaluation
    # steps between periodic checkpoints: what a SWARM stage losing every peer rolls back to, what
    # resume=RUN_DIR goes on from after the driver's death (0 = start and stop only)
    checkpoint_every: int = 20
    seed: int = 0  # seeds parameters, data order and trainers
    threads: int = 1  # torch intra-op threads (process-wide), at most MAX_THREADS; peers already run in parallel; 0 = torch default
    executor: Any = DEFAULT  # the executor and its own config: one of labkit.executors (its name for its defaults)
    links: str | None = None  # a `labkit simulate` scenario file whose links every trainer-peer request crosses; None = direct
    world: str | None = None  # a scenario file (or preset world) the run lives in: its links, peers on virtual devices, churn

    def __post_init__(self) -> None:
        o = "RunConfig"
        _check(isinstance(self.model, ModelConfig), o, "model", self.model, "a ModelConfig")
        _check(isinstance(self.data, DataConfig), o, "data", self.data, "a DataConfig")
        _check(_is_int(self.stages) and self.stages >= 1, o, "stages", self.stages, "an integer >= 1")
        _check(self.stages <= self.model.n_layer, o, "stages", self.stages, f"at most the model's {self.model.n_layer} layers")
        if isinstance(self.peers, list):
            object.__setattr__(self, "peers", tuple(self.peers))
        if _is_int(self.peers):
            _check(self.peers >= 1, o, "peers", self.peers, "an integer >= 1 or one integer >= 1 per stage")
        else:
            ok = isinstance(self.peers, tuple) and len(self.peers) == self.stages and all(_is_int(p) and p >= 1 for p in self.peers)
            _check(ok, o, "peers", self.peers, f"an integer >= 1 or {self.stages} integers >= 1 (one per stage)")
        if self.layer_split is not None:
            split = tuple(self.layer_split) if isinstance(self.layer_split, list) else self.layer_split
            object.__setattr__(self, "layer_split", split)
            ok = isinstance(split, tuple) and len(split) == self.stages and all(_is_int(n) and n >= 1 for n in split)
            _check(ok, o, "layer_split", split, f"{self.stages} integers >= 1 (one per stage)")
            _check(sum(split) == self.model.n_layer, o, "layer_split", split, f"blocks per stage summing to the model's {self.model.n_layer} layers")
        _check(_is_int(self.trainers) and self.trainers >= 1, o, "trainers", self.trainers, "an integer >= 1")
        _check(_is_int(self.inflight) and 1 <= self.inflight <= 64, o, "inflight", self.inflight,
               "an integer from 1 to 64 (microbatches each trainer keeps in flight)")
        _check(_is_int(self.microbatch) and self.microbatch >= 1, o, "microbatch", self.microbatch, "an integer >= 1")
        _check(_is_int(self.global_batch) and self.global_batch >= 1, o, "global_batch", self.global_batch, "an integer >= 1")
        _check(self.global_batch % self.microbatch == 0, o, "global_batch", self.global_batch,
               f"a multiple of microbatch={self.microbatch}, so every step is a whole number of microbatches")
        _check(_is_int(self.steps) and self.steps >= 1, o, "steps", self.steps, "an integer >= 1")
        _check(self.optimizer in OPTIMIZERS, o, "optimizer", self.optimizer, f"one of {list(OPTIMIZERS)}")
        _check(_is_number(self.lr) and 0 < self.lr <= MAX_LR, o, "lr", self.lr,
               f"a finite number > 0 and <= {MAX_LR:g}: a larger peak learning rate diverges for every model here")
        _check(_is_int(self.warmup_steps) and self.warmup_steps >= 0, o, "warmup_steps", self.warmup_steps, "an integer >= 0")
        _check(_is_number(self.weight_decay) and 0 <= self.weight_decay <= MAX_WEIGHT_DECAY, o, "weight_decay",
               self.weight_decay, f"a finite number >= 0 and <= {MAX_WEIGHT_DECAY:g}: every step scales the parameters "
               "by 1 - lr * weight_decay, so more decay erases what the gradients learn (usual values: 0 to 0.1)")
        _check(_is_number(self.gamma) and 0 < self.gamma <= 1, o, "gamma", self.gamma, "a number in (0, 1]")
        _check(isinstance(self.debias_ema, bool), o, "debias_ema", self.debias_ema, "True or False")
        _check(_is_number(self.peer_timeout) and 0 < self.peer_timeout <= MAX_WAIT, o, "peer_timeout",
               self.peer_timeout, f"a finite number of seconds > 0 and <= {MAX_WAIT:g}: a trainer waits this long "
               "for a silent peer; a day is already a hung run, and far longer waits overflow the platform's timer")
        _check(_is_number(self.momentum) and 0 <= self.momentum < 1, o, "momentum", self.momentum, "a number in [0, 1)")
        _check(isinstance(self.sync, SyncConfig), o, "sync", self.sync, "a SyncConfig")
        _check(isinstance(self.compression, CompressionConfig), o, "compression", self.compression, "a CompressionConfig")
        if self.compression.boundary != "none":
            _check(self.model.d_model % self.compression.factor == 0, o, "compression", self.compression,
                   f"a boundary factor dividing the model's d_model={self.model.d_model}")
        _check(_is_number(self.rebalance_period) and 0 <= self.rebalance_period <= MAX_WAIT, o, "rebalance_period",
               self.rebalance_period, f"a finite number of seconds >= 0 and <= {MAX_WAIT:g} (0 turns rebalancing off; "
               "a period over a day never fires in a lab run, and far longer ones overflow the platform's timer)")
        _check(isinstance(self.delayed_updates, bool), o, "delayed_updates", self.delayed_updates, "True or False")
        _check(not (self.delayed_updates and self.sync.mode == "diloco"), o, "delayed_updates", self.delayed_updates,
               "False when sync.mode is 'diloco' (DiLoCo already takes its updates locally)")
        _check(isinstance(self.activation_checkpointing, bool), o, "activation_checkpointing", self.activation_checkpointing, "True or False")
        _check(_is_int(self.eval_every) and self.eval_every >= 0, o, "eval_every", self.eval_every, "an integer >= 0")
        _check(_is_int(self.eval_batches) and self.eval_batches >= 1, o, "eval_batches", self.eval_batches, "an integer >= 1")
        _check(_is_int(self.checkpoint_every) and self.checkpoint_every >= 0, o, "checkpoint_every",
               self.checkpoint_every, "an integer >= 0 (steps between checkpoints; 0 = only at the start and the stop)")
        _check(_is_int(self.seed) and 0 <= self.seed < 2**32, o, "seed", self.seed,
               "an integer >= 0 and < 2^32 (it is mixed into torch's 64-bit seeds)")
        _check(_is_int(self.threads) and 0 <= self.threads <= MAX_THREADS, o, "threads", self.threads,
               f"an integer from 0 (torch's default) to {MAX_THREADS} (4 x this machine's {os.cpu_count()} CPUs, at least 64)")
        if isinstance(self.executor, str) and self.executor in SPECS:
            object.__setattr__(self, "executor", SPECS[self.executor].config())
        _check(any(isinstance(self.executor, s.config) for s in SPECS.values()), o, "executor", self.executor,
               f"an executor's name, one of {list(SPECS)}, or its config ("
               + ", ".join(f"{s.config.__name__}(...)" for s in SPECS.values()) + ")")
        _check(self.links is None or (isinstance(self.links, str) and self.links != ""), o, "links", self.links,
               "None or the path of a scenario file (regions, links, and where each stage's peers sit)")
        _check(self.world is None or (isinstance(self.world, str) and self.world != "" and self.links is None), o,
               "world", self.world, "None, a preset world's name or a scenario file's path, with links=None (a world brings its links)")
        self.executor.check_run(self)
        if self.layer_split is None:
            object.__setattr__(self, "layer_split", even_split(self.model.n_layer, self.stages))

    @property
    def peers_per_stage(self) -> tuple[int, ...]:
        """Initial peer count of every stage."""
        return self.peers if isinstance(self.peers, tuple) else (self.peers,) * self.stages

    @property
    def spec(self) -> ExecutorSpec:
        """The spec of the executor this run uses (what the lab, the CLI and the backends ask)."""
        return SPECS[self.executor.name]

    @property
    def microbatches_per_step(self) -> int:
        return self.global_batch // self.microbatch

    def replace(self, **changes: Any) -> RunConfig:
        """A copy with some fields changed (validated again)."""
        if "layer_split" not in changes and "stages" in changes:
            changes["layer_split"] = None
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able form (nested configs become dicts)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "executor":
                value = {"name": value.name, **{g.name: _plain(getattr(value, g.name)) for g in fields(value)}}
            elif isinstance(value, (ModelConfig, DataConfig, SyncConfig, CompressionConfig)):
                value = {g.name: getattr(value, g.name) for g in fields(value)}
            elif isinstance(value, tuple):
                value = list(value)
            out[f.name] = value
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunConfig:
        """Inverse of `to_dict`; also reads the form earlier versions wrote (`"executor": "atom"` beside
        an `"atom"` and a `"taskpool"` section)."""
        data = dict(data)
        executor = data.get("executor", DEFAULT)
        if isinstance(executor, str):  # the earlier form: every executor's section present, the name apart
            sections = {name: data.pop(name) for name in SPECS if isinstance(data.get(name), dict)}
            executor = {"name": executor, **sections.get(executor, {})}
        if isinstance(executor, dict):
            executor = dict(executor)
            name = executor.pop("name", None)
            _check(name in SPECS, "RunConfig", "executor", name, f"one of {list(SPECS)}")
            known = {f.name for f in fields(SPECS[name].config)}
            data["executor"] = SPECS[name].config(**{k: tuple(v) if isinstance(v, list) else v
                                                      for k, v in executor.items() if k in known})
        nested = {"model": ModelConfig, "data": DataConfig, "compression": CompressionConfig, "sync": SyncConfig}
        return cls(**{k: nested[k](**v) if k in nested and isinstance(v, dict) else v for k, v in data.items()})


def _plain(value: Any) -> Any:
    """A config value in JSON's terms (tuples as lists)."""
    return list(value) if isinstance(value, tuple) else value


def even_split(n_layer: int, stages: int) -> tuple[int, ...]:
    """Blocks per stage as even as possible, earlier stages taking the remainder."""
    base, extra = divmod(n_layer, stages)
    return tuple(base + (1 if s < extra else 0) for s in range(stages))
