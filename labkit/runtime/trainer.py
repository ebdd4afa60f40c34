"""A trainer: takes microbatches from the step ledger and routes them through the stages.

Trainers hold no parameters. For each stage a trainer asks its own `Router` (SWARM Algorithm 1)
for a peer, sends the activations, and measures the response time into the router's EMA. A fault
or timeout bans the peer and the hop is retried on another peer of the same stage. Backward
retraces the forward's peers in reverse; if one of them is gone, the attempt ends and the ledger
keeps the stages already credited, so only the missing ones are recomputed.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import TimeoutError as FutureTimeout
from typing import TYPE_CHECKING, Any

import torch

from labkit import events
from labkit.runtime.peer import PeerDied
from labkit.swarm.ledger import Task
from labkit.swarm.routing import Router
from labkit.wire import Encoded

if TYPE_CHECKING:
    from labkit.runtime.swarm import InProcessSwarm


class StageEmpty(RuntimeError):
    """No live peer serves a stage: the swarm must pause until one is added."""

    def __init__(self, stage: int) -> None:
        super().__init__(f"stage {stage} has no live peer")
        self.stage = stage


class AttemptFailed(RuntimeError):
    """A peer on the backward path is gone; the attempt stops with partial credits."""


def _nbytes(x: Any) -> int:
    """Bytes `x` puts on the wire: a codec's exact payload, or a raw tensor's data (token ids)."""
    if isinstance(x, Encoded):
        return x.nbytes
    return x.numel() * x.element_size() if isinstance(x, torch.Tensor) else 0


class Trainer:
    """One trainer thread. Its swarm is the in-process swarm, or on a Dask worker a `SwarmClient`
    with the same methods (labkit/runtime/cluster/client.py)."""

    def __init__(self, name: str, swarm: InProcessSwarm) -> None:
        self.name, self.swarm = name, swarm
        self.router = Router(gamma=swarm.cfg.gamma)
        self._seen: dict[str, tuple[int, int]] = {}  # peer -> (stage, announce epoch) last synced
        self.thread = threading.Thread(target=self._loop, name=f"trainer-{name}", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def join(self, timeout: float | None = None) -> None:
        """Wait until the trainer's loop has ended (the swarm stopped handing out microbatches)."""
        self.thread.join(timeout)

    def _sync_router(self, reannounce_stage: int | None = None) -> None:
        """Mirror the swarm's registry: add, move or un-ban re-announced peers; drop departed ones.

        Peers still registered are alive and announcing themselves: when every peer of
        `reannounce_stage` is banned, their presence in the registry un-bans them (a timeout may
        have been a passing spike)."""
        registry = self.swarm.registry()
        for peer, (stage, epoch) in registry.items():
            if self._seen.get(peer) != (stage, epoch) or stage == reannounce_stage:
                self.router.announce(peer, stage)
                self._seen[peer] = (stage, epoch)
        for peer in [p for p in self._seen if p not in registry]:
            self.router.remove(peer)
            del self._seen[peer]

    def _loop(self) -> None:
        while True:
            task = self.swarm.next_task()
            if task is None:
                return
            self._sync_router()
            credits: dict[int, str] = {}
            outcome: dict[str, float] = {}  # "loss" once the last stage has answered
            try:
                self._run(task, credits, outcome)
            except StageEmpty as exc:
                self.swarm.stage_empty(exc.stage)
            except AttemptFailed:
                pass
            except Exception as exc:  # a bug, not a fault: stop the run loudly
                self.swarm.fail(exc)
            finally:
                self.swarm.finish(task, credits, outcome.get("loss"))

    def _call(self, stage: int, direction: str, task: Task, method: str, *args: Any, peer: str | None = None) -> tuple[str, Any]:
        """Send one request to a peer of `stage` (chosen by the router unless `peer` is given)."""
        while True:
            target = peer or self.router.choose(stage)
            if target is None:
                self._sync_router(reannounce_stage=stage)
                target = self.router.choose(stage)
                if target is None:
                    raise StageEmpty(stage)
            server = self.swarm.peer(target)
            start = time.perf_counter()
            future = None if server is None else server.call(method, task.attempt, *args)
            try:
                if future is None:
                    raise LookupError(target)
                result = future.result(timeout=self.swarm.cfg.peer_timeout)
            except FutureTimeout:
                future.cancel()
                self.router.ban(target)
                self.swarm.peer_timed_out(target, may_have_accumulated=method != "forward")
                if peer is not None:
                    raise AttemptFailed(target)
                continue
            except Exception as exc:  # the peer is gone, or failed: ban it, retry elsewhere
                self.router.ban(target)
                if not isinstance(exc, (PeerDied, LookupError)):
                    self.swarm.peer_failed(target, exc)
                if peer is not None:
                    raise AttemptFailed(target)
                continue
            seconds = time.perf_counter() - start
            self.router.report(target, seconds)
            sent = sum(_nbytes(a) for a in args)
            received = sum(_nbytes(r) for r in (result if isinstance(result, tuple) else (result,)))
            self.swarm.emit(events.hop(self.swarm.clock(), trainer=self.name, stage=stage, peer=target, direction=direction,
                                       nbytes=sent + received, seconds=seconds, microbatch=task.microbatch))
            return target, result

    def _run(self, task: Task, credits: dict[int, str], outcome: dict[str, float]) -> None:
        """Forward through every stage, loss at the last, backward to the lowest stage still owed.
        Fills `credits` (stage -> peer that accumulated) and `outcome["loss"]` as they happen."""
        swarm = self.swarm
        inputs, targets = swarm.sampler.batch(task.step, task.microbatch, swarm.cfg.microbatch)
        n = inputs.shape[0]
        last = swarm.num_stages - 1
        lowest = min(task.stages)
        path: list[str] = []
        x = inputs
        # forward: stage 0 .. S-2, each hop to the peer the router picks
        for stage in range(last):
            peer, x = self._call(stage, "forward", task, "forward", x, stage >= lowest, swarm.codec)
            path.append(peer)
        # last stage: forward, loss and backward in one request
        peer, (loss, grad) = self._call(last, "forward", task, "loss", x, targets, swarm.loss_scale,
                                        last in task.stages, n, swarm.codec)
        if last in task.stages:
            credits[last] = peer
            outcome["loss"] = loss
        # backward: retrace the same peers, S-2 .. lowest stage still owed a gradient
        for stage in range(last - 1, lowest - 1, -1):
            accumulate = stage in task.stages
            peer, grad = self._call(stage, "backward", task, "backward", grad, accumulate, n, swarm.codec, peer=path[stage])
            if accumulate:
                credits[stage] = peer
