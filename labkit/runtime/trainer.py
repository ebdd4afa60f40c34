"""A trainer: takes microbatches from the step ledger and routes them through the stages.

Trainers hold no parameters. For each stage a trainer asks its own `Router` (SWARM Algorithm 1)
for a peer, sends the activations, and measures the response time into the router's EMA. A fault
or timeout bans the peer and the hop is retried on another peer of the same stage. Backward
retraces the forward's peers in reverse; if one of them is gone, the attempt ends and the ledger
keeps the stages already credited, so only the missing ones are recomputed. With `cfg.links`,
every request and reply crosses an emulated internet link (labkit/runtime/links.py); in a world
(`cfg.world`) each counts the bytes the world's model would send (`pacing.payload_scale`).
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from labkit import events
from labkit.config import RunConfig
from labkit.data import WindowSampler
from labkit.runtime.links import Links, load_links, payload_bytes
from labkit.runtime.pacing import payload_scale
from labkit.runtime.peer import PeerDied
from labkit.runtime.ports import Directory, WorkSource
from labkit.runtime.request_queue import timing
from labkit.swarm.deadline import Deadline, Deadlines, busy_not_hung
from labkit.swarm.ledger import Task
from labkit.swarm.routing import Router


ROUTER_EVENT_SECONDS = 1.0  # a trainer publishes its router's view at most this often


class StageEmpty(RuntimeError):
    """No live peer serves a stage: the swarm must pause until one is added."""

    def __init__(self, stage: int) -> None:
        super().__init__(f"stage {stage} has no live peer")
        self.stage = stage


class AttemptFailed(RuntimeError):
    """A peer on the backward path is gone; the attempt stops with partial credits."""


def trainer_name(rank: int) -> str:
    """The name of a run's trainer number `rank` ("t0", "t1", ...), on every backend."""
    return f"t{rank}"


def router_phase(name: str, inflight: int) -> int:
    """Picks trainer `name`'s router skips at its first pick of a stage: its rank times its lanes,
    so the run's trainers start their rounds at different peers (`labkit.swarm.routing.Router`)."""
    rank = name[1:]
    return int(rank) * inflight if name.startswith("t") and rank.isdigit() else 0


def lane_names(name: str, inflight: int) -> list[str]:
    """What trainer `name`'s lanes take work under: its own name for one, "name/k" for several."""
    return [name] if inflight == 1 else [f"{name}/{k}" for k in range(inflight)]


class Trainer:
    """One trainer: `cfg.inflight` lanes (threads), each keeping one microbatch in flight, take
    work from `work`, find peers in `directory` and route over one shared router (as SWARM's
    trainers keep several microbatches in flight). Each samples its microbatches itself
    (counter-based, so any trainer draws the same samples for a task)."""

    def __init__(self, name: str, cfg: RunConfig, work: WorkSource, directory: Directory, sampler: WindowSampler) -> None:
        self.name, self.cfg, self.work, self.directory, self.sampler = name, cfg, work, directory, sampler
        self.loss_scale = 1.0 / (cfg.model.seq_len * cfg.global_batch)  # a step's loss is a mean over its tokens
        self.router = Router(gamma=cfg.gamma, debias=cfg.debias_ema, phase=router_phase(name, cfg.inflight))
        self._routing = threading.Lock()  # the router and `_seen` are shared by the lanes
        scenario = load_links(cfg)
        self.links = None if scenario is None else Links(scenario, scenario.trainer_region, payload_scale(cfg, scenario))
        self._seen: dict[str, tuple[int, int]] = {}  # peer -> (stage, announce epoch) last synced
        self._deadlines = Deadlines(ceiling=cfg.peer_timeout)  # (peer, method) -> its requests' deadline
        self._answered: dict[str, float] = {}  # peer -> when it last answered one of this trainer's requests
        self._viewed = -ROUTER_EVENT_SECONDS  # run time of the last router event
        self.lanes = [threading.Thread(target=self._loop, args=(lane,), name=f"trainer-{lane}", daemon=True)
                      for lane in lane_names(name, cfg.inflight)]

    def start(self) -> None:
        for lane in self.lanes:
            lane.start()

    def join(self, timeout: float | None = None) -> None:
        """Wait until every lane has ended (the swarm stopped handing out microbatches)."""
        for lane in self.lanes:
            lane.join(timeout)

    def alive(self) -> bool:
        """Whether a lane still works."""
        return any(lane.is_alive() for lane in self.lanes)

    def _sync_router(self, reannounce_stage: int | None = None) -> None:
        """Mirror the directory: add, move or un-ban re-announced peers; drop departed ones.

        Peers still registered are alive and announcing themselves: when every peer of
        `reannounce_stage` is banned, their presence in the registry un-bans them (a timeout may
        have been a passing spike)."""
        registry = self.directory.registry()
        with self._routing:
            self._mirror(registry, reannounce_stage)

    def _mirror(self, registry: dict[str, tuple[int, int]], reannounce_stage: int | None) -> None:
        for peer, (stage, epoch) in registry.items():
            if self._seen.get(peer) != (stage, epoch) or stage == reannounce_stage:
                self.router.announce(peer, stage)
                self._seen[peer] = (stage, epoch)
        for peer in [p for p in self._seen if p not in registry]:
            self.router.remove(peer)
            del self._seen[peer]

    def _loop(self, lane: str) -> None:
        while True:
            work = self.work.next_task(lane)
            if work is None:
                return
            task, codec = work  # the wire codec in force, handed out with each task
            self._sync_router()
            credits: dict[int, str] = {}
            outcome: dict[str, float] = {}  # "loss" once the last stage has answered
            try:
                self._run(task, codec, credits, outcome)
            except StageEmpty as exc:
                self.work.stage_empty(exc.stage)
            except AttemptFailed:
                pass
            except Exception as exc:  # a bug, not a fault: stop the run loudly
                self.work.fail(exc)
            finally:
                self.work.finish(lane, task, credits, outcome.get("loss"))

    def _call(self, stage: int, direction: str, task: Task, method: str, *args: Any, peer: str | None = None) -> tuple[str, Any]:
        """Send one request to a peer of `stage` (chosen by the router unless `peer` is given)."""
        while True:
            target = peer or self._choose(stage)
            if target is None:
                self._sync_router(reannounce_stage=stage)
                target = self._choose(stage)
                if target is None:
                    raise StageEmpty(stage)
            server = self.directory.peer(target)
            with self._routing:
                deadline = self._deadlines[target, method]  # learnt from its answers, `peer_timeout` at most
            start = time.perf_counter()
            if server is None:
                future = None
            elif self.links is None:
                future = server.call(method, task.key, *args)
            else:
                future = self.links.link(target).call(server, method, task.key, *args)
            try:
                if future is None:
                    raise LookupError(target)
                result = self._await(future, target, deadline, start)
            except FutureTimeout:
                future.cancel()
                self._ban(target)
                self.work.peer_timed_out(target, may_have_accumulated=method != "forward")
                if peer is not None:
                    raise AttemptFailed(target)
                continue
            except Exception as exc:  # the peer is gone, or failed: ban it, retry elsewhere
                self._ban(target)
                if not isinstance(exc, (PeerDied, LookupError)):
                    self.work.peer_failed(target, exc)
                if peer is not None:
                    raise AttemptFailed(target)
                continue
            seconds = time.perf_counter() - start
            now = self.work.clock()
            with self._routing:
                self._answered[target] = start + seconds
                self.router.report(target, seconds)
                deadline.answered(seconds)
                view = self._view() if now - self._viewed >= ROUTER_EVENT_SECONDS else None
                if view is not None:
                    self._viewed = now
            if view is not None:
                self.work.emit(events.router(now, trainer=self.name, peers=view))
            self.work.emit(events.hop(now, trainer=self.name, stage=stage, peer=target, direction=direction,
                                       nbytes=payload_bytes(args) + payload_bytes(result), seconds=seconds,
                                       microbatch=task.microbatch, timing=timing(future),
                                       link_seconds=future.link_seconds if self.links else 0.0))
            return target, result

    def _await(self, future: Any, target: str, deadline: Deadline, sent: float) -> Any:
        """The answer to a request sent at `sent`. At each deadline a peer that answered another of this trainer's
        requests since the send (or the deadline before) is busy, not hung (`busy_not_hung`): its deadline backs off
        and the request waits on, to `peer_timeout` from the send; one that answered nothing raises FutureTimeout."""
        checked = sent
        while True:
            with self._routing:
                wait = min(deadline.seconds(), sent + self.cfg.peer_timeout - time.perf_counter())
            try:
                return future.result(timeout=max(0.0, wait))
            except FutureTimeout:
                now = time.perf_counter()
                with self._routing:
                    deadline.expired()
                    last = self._answered.get(target)
                if not busy_not_hung(last, checked, sent, now, self.cfg.peer_timeout):
                    raise
                checked = now

    def _view(self) -> list[dict[str, Any]]:
        """The router's view (routing lock held), each peer with its longest request deadline."""
        longest: dict[str, float] = {}
        for (peer, _), d in self._deadlines.items():
            longest[peer] = max(longest.get(peer, 0.0), d.seconds())
        return [v | {"deadline": longest.get(v["peer"], self.cfg.peer_timeout)} for v in self.router.view()]

    def _choose(self, stage: int) -> str | None:
        with self._routing:
            return self.router.choose(stage)

    def _ban(self, peer: str) -> None:
        with self._routing:
            self.router.ban(peer)

    def _run(self, task: Task, codec: str, credits: dict[int, str], outcome: dict[str, float]) -> None:
        """Forward through every stage, loss at the last, backward to the lowest stage still owed.
        Fills `credits` (stage -> peer that accumulated) and `outcome["loss"]` as they happen."""
        inputs, targets = self.sampler.batch(task.step, task.microbatch, self.cfg.microbatch)  # (B, T) token ids each
        n = inputs.shape[0]
        last = self.cfg.stages - 1
        lowest = min(task.stages)
        path: list[str] = []
        x = inputs
        # forward: stage 0 .. S-2, each hop to the peer the router picks
        for stage in range(last):
            peer, x = self._call(stage, "forward", task, "forward", x, stage >= lowest, codec)
            path.append(peer)
        # last stage: forward, loss and backward in one request
        peer, (loss, grad) = self._call(last, "forward", task, "loss", x, targets, self.loss_scale,
                                        last in task.stages, n, codec)
        if last in task.stages:
            credits[last] = peer
            outcome["loss"] = loss
        # backward: retrace the same peers, S-2 .. lowest stage still owed a gradient
        for stage in range(last - 1, lowest - 1, -1):
            accumulate = stage in task.stages
            peer, grad = self._call(stage, "backward", task, "backward", grad, accumulate, n, codec, peer=path[stage])
            if accumulate:
                credits[stage] = peer
