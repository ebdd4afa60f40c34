"""An unreliable client of a task-pool stage: a copy of the stage's module that computes the
slices the servers hand it.

A forward task runs its slice of the stage input (sent by the FS) with autograd and keeps the
slice's graph (the activations it needs for the backward); a backward task runs that graph
backward from the BS's output gradients; a recompute task (a leftover backward from the pool,
whose activations were lost with another client) gets the input from the FS again and runs the
forward first. The parameter gradients of every backward slice go back to the servers at once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from types import MappingProxyType
from dataclasses import dataclass, field
from typing import Any

import torch

from labkit.config import RunConfig
from labkit.model import Stage
from labkit.model.assembly import stage_module
from labkit.executors.taskpool.ports import ClientPort
from labkit.taskpool import Task, smoothed_rate


class StageClient:
    """The computer of client `name` of stage `stage`, starting from `params`."""

    def __init__(self, cfg: RunConfig, name: str, stage: int, params: Mapping[str, torch.Tensor]) -> None:
        self.cfg, self.name, self.stage = cfg, name, stage
        self.module: Stage = stage_module(cfg, stage, dict(params))
        self.kept: dict[tuple[int, int, int], tuple[torch.Tensor, torch.Tensor]] = {}  # slice -> (input, output graph)

    def load(self, params: Mapping[str, torch.Tensor], version: int) -> None:
        """Adopt the servers' new parameters (a new pass); graphs kept from the last pass are void."""
        self.module.load_state_dict(params)
        self.kept = {}

    def speed(self) -> float:
        """Forward samples per second on a microbatch of zeros (what it tells the servers on joining)."""
        m = self.cfg.model
        shape = (self.cfg.microbatch, m.seq_len) + (() if self.stage == 0 else (m.d_model,))
        x = torch.zeros(shape, dtype=torch.long if self.stage == 0 else getattr(torch, m.dtype))
        start = time.perf_counter()
        with torch.no_grad():
            self.module(x)
        return self.cfg.microbatch / max(time.perf_counter() - start, 1e-6)

    def forward(self, task: Task, inputs: torch.Tensor) -> torch.Tensor:
        """The stage's output for the task's slice (`inputs`, as the FS sent it); keeps its graph."""
        x, y = self._run(inputs.clone())
        self.kept[(task.microbatch, task.start, task.end)] = (x, y)
        return y.detach()

    def _run(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = x if self.stage == 0 else x.detach().requires_grad_(True)
        return x, self.module(x)

    def backward(self, task: Task, inputs: torch.Tensor | None,
                 grad_out: torch.Tensor) -> tuple[torch.Tensor | None, list[torch.Tensor]]:
        """(gradient for the slice's input, or None at stage 0; parameter gradients) of the task's
        slice: through the kept graph, or for a recompute through a forward run again on `inputs`."""
        kept = self.kept.pop((task.microbatch, task.start, task.end), None)
        if kept is None and inputs is None:
            raise RuntimeError(f"{self.name} has no graph of {task} and was sent no input to recompute it")
        x, y = kept if kept is not None else self._run(inputs.clone())
        self.module.zero_grad(set_to_none=True)
        y.backward(grad_out)
        grads = [p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p) for p in self.module.parameters()]
        return (None if self.stage == 0 else x.grad.detach()), grads

    def params(self) -> dict[str, torch.Tensor]:
        return {k: v.detach().clone() for k, v in self.module.state_dict().items()}

    def close(self) -> None:
        self.kept = {}


class LocalClients:
    """Clients as computers in this process (each fed by a thread of the run)."""

    dashboard = None  # threads of this process: no dashboard
    left_out: Mapping[str, str] = MappingProxyType({})  # no workers to leave out

    def __init__(self, cfg: RunConfig) -> None:
        self.cfg = cfg

    def spawn(self, name: str, stage: int, params: Mapping[str, torch.Tensor]) -> StageClient:
        return StageClient(self.cfg, name, stage, params)

    def hold(self, client: str, task: Task, reload: bool, real: float) -> float:
        """No virtual device: results go back as soon as they are computed."""
        return 0.0

    def watch(self, lost: Callable[[str, str], None]) -> None:
        """Nothing to watch: a client here leaves only when it is killed."""

    def close(self) -> None:
        """Nothing to release."""


@dataclass
class Client:
    """What the run knows of one client: its computer, the parameters' version it holds, the task
    it works on, the samples it finished, and whether it is gone."""

    name: str
    stage: int
    port: ClientPort
    version: int
    samples: int = 0
    delay: float = 0.0  # seconds it holds each result (set_peer_delay: a slow device)
    rate: float | None = None  # forward samples per second, smoothed over its slices (the servers' split)
    task: Task | None = None
    gone: threading.Event = field(default_factory=threading.Event)

    @property
    def alive(self) -> bool:
        return not self.gone.is_set()

    def observe(self, samples: int, seconds: float) -> None:
        """A forward slice of `samples` took `seconds` from hand-out to result (its delay included)."""
        self.rate = smoothed_rate(self.rate, samples, seconds)

    def describe(self) -> dict[str, Any]:
        """The client as `state()` shows it; its task in words, like "forward mb 2 [0, 4)"."""
        t = self.task
        doing = None if t is None else f"{t.kind} mb {t.microbatch} [{t.start}, {t.end})"
        return {"peer": self.name, "queue": 0, "samples": self.samples, "worker": getattr(self.port, "worker", None),
                "delay": self.delay, "task": doing}
