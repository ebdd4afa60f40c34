"""One stage's reliable servers in a task-pool run: the bookkeeping and the tensors they hold.

The frontal servers (FS) hold each microbatch's stage inputs and the gradients coming back for
them; the backward servers (BS) assemble the outputs from the clients' slices and hold the
gradients for those outputs. The stage's master parameters live with the servers, sharded over the
BS (each steps its shard with an optimizer of its own; a checkpoint merges them into one state):
clients send each backward slice's parameter gradients at once (so a client that vanishes takes
no finished gradient with it), and at the end of a pass the servers take the optimizer step and
the clients load the new parameters. `labkit.taskpool.StagePool` decides who computes what.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
import torch.nn.functional as F

from labkit.config import RunConfig
from labkit.model import Stage
from labkit.model.assembly import stage_module
from labkit.model.partition import stage_bounds
from labkit.runtime.optim import apply_step, make_optimizer, merge_states, split_state
from labkit.taskpool import StagePool, Task, cuts


def _slot(store: dict[int, torch.Tensor], mb: int, samples: int, start: int, part: torch.Tensor) -> None:
    """Write `part` as samples [start, start + len) of `store[mb]`, allocated on first use."""
    if mb not in store:
        store[mb] = torch.empty((samples, *part.shape[1:]), dtype=part.dtype)
    store[mb][start:start + part.shape[0]] = part


class StageServers:
    """Stage `stage`'s FS and BS: its `StagePool`, the pass's tensors and the master parameters."""

    def __init__(self, cfg: RunConfig, stage: int, state: dict[str, Any]) -> None:
        tp = cfg.executor
        self.cfg, self.stage, self.samples = cfg, stage, cfg.microbatch
        frontal, backward = tp.servers(stage)
        self.pool = StagePool(cfg.microbatch, [f"s{stage}fs{i}" for i in range(frontal)],
                              [f"s{stage}bs{i}" for i in range(backward)], slack=tp.slack, grace=tp.grace)
        self.master: Stage = stage_module(cfg, stage, state["params"])
        params = list(self.master.parameters())
        c = cuts(len(params), backward)  # the BS shard the parameters: one optimizer each
        self.shards = [(lo, hi) for lo, hi in zip(c, c[1:]) if hi > lo]
        self.optimizers = [make_optimizer(params[lo:hi], cfg) for lo, hi in self.shards]
        if state.get("optimizer") is not None:
            for optimizer, part in zip(self.optimizers, split_state(state["optimizer"], self.shards)):
                optimizer.load_state_dict(part)
        self.serving = {k: v.detach().clone() for k, v in self.master.state_dict().items()}  # what clients compute with
        self.version = 0  # bumped when `serving` changes: clients reload
        self.inputs: dict[int, torch.Tensor] = {}  # FS: the stage's input per microbatch
        self.grad_in: dict[int, torch.Tensor] = {}  # FS: gradients for those inputs, from the clients' slices
        self.outputs: dict[int, torch.Tensor] = {}  # BS: the stage's output per microbatch
        self.grad_out: dict[int, torch.Tensor] = {}  # BS: gradients for those outputs
        self.grads = [torch.zeros_like(p) for p in self.master.parameters()]  # the pass's flushed gradient sums

    def receive(self, client: str, task: Task, result: Any) -> int:
        """A credited task's result reached the servers: a forward's output slice (to the BS), or a
        backward's input-gradient slice (to the FS) and parameter gradients (added to the pass's
        sums, so that `client` no longer holds any). Returns the bytes of the slice."""
        if task.kind == "forward":
            _slot(self.outputs, task.microbatch, self.samples, task.start, result)
            return result.numel() * result.element_size()
        grad_in, grads = result
        for acc, g in zip(self.grads, grads):
            acc.add_(g)
        self.pool.flush(client)
        if grad_in is None:
            return 0
        _slot(self.grad_in, task.microbatch, self.samples, task.start, grad_in)
        return grad_in.numel() * grad_in.element_size()

    def loss(self, mb: int, targets: torch.Tensor, scale: float) -> float:
        """The last stage's BS: the loss of `mb`'s output (summed cross-entropy times `scale`) and
        the gradients for the output, which the clients' backward slices start from."""
        logits = self.outputs[mb].detach().requires_grad_(True)
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="sum") * scale
        loss.backward()
        self.grad_out[mb] = logits.grad
        return float(loss.detach())

    def step(self, step: int) -> None:
        """The pass is done: step the master parameters with the summed gradients. With delayed
        updates clients go on with the parameters from before this step (they adopt it a pass
        later, as the one-step-delayed reference does)."""
        before = {k: v.detach().clone() for k, v in self.master.state_dict().items()}
        for p, g in zip(self.master.parameters(), self.grads):
            p.grad = g
        for optimizer in self.optimizers:  # each BS steps its shard
            apply_step(optimizer, step, self.cfg)
            optimizer.zero_grad(set_to_none=True)
        self.grads = [torch.zeros_like(p) for p in self.master.parameters()]
        self.serving = before if self.cfg.delayed_updates else {k: v.detach().clone()
                                                                 for k, v in self.master.state_dict().items()}
        self.version += 1
        for store in (self.inputs, self.grad_in, self.outputs, self.grad_out):
            store.clear()
        self.pool.advance()

    def describe(self, peers: list[dict[str, Any]]) -> dict[str, Any]:
        """The stage as `state()` shows it: its layers, its live clients, its servers and its pool."""
        first, count = stage_bounds(self.cfg.layer_split)[self.stage]
        return {"stage": self.stage, "layers": list(range(first, first + count)), "peers": peers,
                "servers": list(self.pool.frontal + self.pool.backward), "pool": self.pool.stats()}

    def state(self) -> dict[str, Any]:
        """The stage's master parameters and optimizer state (a checkpoint's stage)."""
        return {"params": {k: v.detach().clone() for k, v in self.master.state_dict().items()},
                "optimizer": copy.deepcopy(merge_states([o.state_dict() for o in self.optimizers], self.shards))}
