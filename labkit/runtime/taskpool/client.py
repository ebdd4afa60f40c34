"""An unreliable client of a task-pool stage: a copy of the stage's module that computes the
slices the servers hand it.

A forward task runs its slice of the stage input (from the FS) with autograd and keeps the slice's
graph (the activations it needs for the backward); a backward task runs that graph backward from
the BS's output gradients; a recompute task (a leftover backward from the pool, whose activations
were lost with another client) fetches the input from the FS and runs the forward again first.
Parameter gradients of every backward slice go to the servers at once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping

import torch

from labkit.config import RunConfig
from labkit.model import Stage
from labkit.model.assembly import stage_module
from labkit.taskpool import Task


class StageClient:
    """Client `name` of stage `stage`, computing with `params` (the servers' serving copy)."""

    def __init__(self, cfg: RunConfig, name: str, stage: int, params: Mapping[str, torch.Tensor]) -> None:
        self.cfg, self.name, self.stage = cfg, name, stage
        self.module: Stage = stage_module(cfg, stage, dict(params))
        self.kept: dict[tuple[int, int, int], tuple[torch.Tensor, torch.Tensor]] = {}  # slice -> (input, output graph)
        self.version = -1
        self.samples = 0  # samples of forward or backward work it finished
        self.task: Task | None = None  # the task it works on now
        self.gone = threading.Event()  # killed, or the run stopped

    @property
    def alive(self) -> bool:
        return not self.gone.is_set()

    def doing(self) -> str | None:
        """The task it holds, in words: "forward mb 2 [0, 4)"."""
        t = self.task
        return None if t is None else f"{t.kind} mb {t.microbatch} [{t.start}, {t.end})"

    def load(self, params: Mapping[str, torch.Tensor], version: int) -> None:
        """Adopt the servers' new parameters (a new pass); inputs kept from the last pass are void."""
        self.module.load_state_dict(params)
        self.version, self.kept = version, {}

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
        """The stage's output for samples [start, end) of `inputs` (the FS's tensor); keeps its graph."""
        x, y = self._run(inputs[task.start:task.end].clone())
        self.kept[(task.microbatch, task.start, task.end)] = (x, y)
        return y.detach()

    def _run(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = x if self.stage == 0 else x.detach().requires_grad_(True)
        return x, self.module(x)

    def backward(self, task: Task, inputs: torch.Tensor, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, list[torch.Tensor]]:
        """(gradient for the slice's input, or None at stage 0; parameter gradients) of samples
        [start, end): through the kept graph, or (recompute, or nothing kept) a forward run again
        from the FS's `inputs`."""
        kept = self.kept.pop((task.microbatch, task.start, task.end), None)
        x, y = kept if kept is not None else self._run(inputs[task.start:task.end].clone())
        self.module.zero_grad(set_to_none=True)
        y.backward(grad_out[task.start:task.end])
        grads = [p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p) for p in self.module.parameters()]
        return (None if self.stage == 0 else x.grad.detach()), grads
