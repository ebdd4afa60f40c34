"""The task pool paper's parameter-server pipeline: servers per stage in this process, clients here or on Dask.

Each stage has reliable servers (`StageServers`: FS, BS, master parameters) and unreliable clients
(`Client`: a computer fed by a thread of the run). A pass enters every microbatch at the first FS;
clients take tasks from their stage's `StagePool`; a microbatch's complete output at a stage is the
next stage's input, and the last BS computes the loss and output gradients; backward slices flow
back the same way. Then the servers step and clients load the new parameters. A client killed or
overdue leaves its work to the pool, where idle clients take it: only lost slices are recomputed.
"""

from __future__ import annotations

import itertools
import math
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from labkit import events
from labkit.config import RunConfig
from labkit.data import WindowSampler
from labkit.runtime.core import fail_core, live_worker
from labkit.executors.taskpool.client import Client
from labkit.executors.taskpool.ports import ClientHost, ClientLost
from labkit.executors.taskpool.servers import StageServers
from labkit.taskpool import Task

MONITOR_PERIOD = 0.1  # seconds between checks for overdue clients


class TaskPoolCore:
    """The servers, clients and passes of one task-pool run."""

    writes_checkpoints = False  # the run shell writes what `committed()` gives

    def __init__(self, cfg: RunConfig, sampler: WindowSampler, emit: Callable[[events.Event], None],
                 clock: Callable[[], float], states: Sequence[dict[str, Any]], host: ClientHost, step: int = 0) -> None:
        self.cfg, self.sampler, self.emit, self.clock, self.host = cfg, sampler, emit, clock, host
        self.dashboard = host.dashboard  # where the clients' workers are watched, if anywhere
        self.stages = [StageServers(cfg, s, states[s]) for s in range(cfg.stages)]
        self.cond = threading.Condition()
        self.step = step
        self.clients: dict[str, Client] = {}
        self.threads: list[threading.Thread] = []
        self.stopping = self.started = False
        self.finished = threading.Event()
        self.last_loss: float | None = None
        self.diverged: str | None = None  # why the run stopped on a non-finite loss, if it did
        self.error: BaseException | None = None
        self.step_hooks: list[Callable[[int], None]] = []  # called after each step, lock held
        self._targets: dict[int, torch.Tensor] = {}
        self._losses: dict[int, float] = {}
        self._numbers = [itertools.count() for _ in range(cfg.stages)]
        self._scale = 1.0 / (cfg.model.seq_len * cfg.global_batch)
        for stage, count in enumerate(cfg.peers_per_stage):
            for _ in range(count):
                self._join(stage)
        host.watch(self.lost)

    # -- membership ----------------------------------------------------------------------------
    def _join(self, stage: int) -> str:
        servers, name = self.stages[stage], f"s{stage}c{next(self._numbers[stage])}"
        client = Client(name, stage, self.host.spawn(name, stage, servers.serving), servers.version)
        servers.pool.client_joined(name, client.port.speed(), self.clock())
        self.clients[client.name] = client
        self.emit(events.peer(self.clock(), peer=client.name, stage=stage, state="joined", queue=0))
        if self.started:
            self._run(client)
        return client.name

    def _run(self, client: Client) -> None:
        self.threads.append(threading.Thread(target=self._work, args=(client,), name=f"taskpool-{client.name}", daemon=True))
        self.threads[-1].start()

    def live(self, stage: int) -> list[str]:
        return [n for n, c in self.clients.items() if c.alive and c.stage == stage]

    def add_peer(self, stage: int | None) -> str:
        """A client joins `stage` (None: the stage with the fewest live clients; the handle checked it)."""
        with self.cond:
            if stage is None:
                stage = min(range(self.cfg.stages), key=lambda s: (len(self.live(s)), s))
            return self._join(stage)

    def _client(self, name: str) -> Client:
        return live_worker(self.clients, name, "clients")

    def kill_peer(self, name: str) -> None:
        """A client vanishes: everything it held or was given goes to the pool."""
        with self.cond:
            client = self._client(name)
            if self.live(client.stage) == [name]:
                raise ValueError(f"peer={name!r} is the last live client of stage {client.stage}: "
                                 f"add_peer({client.stage}) another before it leaves")
            self._lose(client, "killed")

    def lost(self, name: str, reason: str) -> None:
        """Client `name`'s process is gone (`reason`): as a kill, even of a stage's last client."""
        with self.cond:
            if self.clients[name].alive:
                self._lose(self.clients[name], reason)

    def _lose(self, client: Client, reason: str) -> None:
        """(lock held) `client` is gone: everything it held or was given goes to the pool."""
        client.gone.set()
        posted = self.stages[client.stage].pool.client_lost(client.name, self.clock())
        self.emit(events.peer(self.clock(), peer=client.name, stage=client.stage, state="killed", queue=0)
                  | {"reason": reason, "pooled_samples": sum(w.samples for w in posted)})
        self.cond.notify_all()

    def set_peer_delay(self, name: str, seconds: float) -> None:
        """Make client `name` hold every result `seconds` longer (a slow device)."""
        with self.cond:
            self._client(name).delay = float(seconds)

    def peer_state(self, name: str) -> dict[str, Any]:
        """The parameters client `name` computes with (clients hold no optimizer state)."""
        with self.cond:
            return {"params": self._client(name).port.params(), "optimizer": None}

    # -- the work ------------------------------------------------------------------------------
    def start(self) -> None:
        with self.cond:
            self.started = True
            self._begin_pass()
            for client in self.clients.values():
                self._run(client)
            self.threads.append(threading.Thread(target=self._monitor, name="taskpool-monitor", daemon=True))
            self.threads[-1].start()

    def _begin_pass(self) -> None:
        """Every microbatch of the step enters the first stage's FS, split by the clients' rates."""
        for client in self.clients.values():
            if client.alive and client.rate and client.name in self.stages[client.stage].pool.clients():
                self.stages[client.stage].pool.set_speed(client.name, client.rate)
        first = self.stages[0]
        for mb in range(self.cfg.microbatches_per_step):
            first.inputs[mb], self._targets[mb] = self.sampler.batch(self.step, mb, self.cfg.microbatch)
            first.pool.forward_ready(mb, self.clock())

    def _next(self, client: Client) -> tuple[Task, StageServers, dict[str, Any]] | None:
        """(lock held) The client's next task and what the servers send with it (its input slice,
        its output-gradient slice, new parameters); None when the client must stop."""
        while not self.stopping and client.alive:
            servers = self.stages[client.stage]
            if client.name not in servers.pool.clients():  # declared overdue: it joins again
                servers.pool.client_joined(client.name, client.port.speed(), self.clock())
                self.emit(events.peer(self.clock(), peer=client.name, stage=client.stage, state="joined", queue=0)
                          | {"reason": "rejoined after it was overdue"})
            task = client.task = servers.pool.next_task(client.name, self.clock())
            if task is not None:
                mb, part = task.microbatch, slice(task.start, task.end)
                sent = {"inputs": servers.inputs[mb][part] if task.kind != "backward" else None,
                        "grad_out": servers.grad_out[mb][part] if task.kind != "forward" else None,
                        "params": None if client.version == servers.version else (servers.serving, servers.version)}
                client.version = servers.version
                return task, servers, sent
            self.cond.wait(timeout=0.2)
        return None

    def _work(self, client: Client) -> None:
        try:
            while True:
                with self.cond:
                    got = self._next(client)
                if got is None:
                    return
                task, servers, sent = got
                start = time.perf_counter()  # the load too: it is part of the task's turnaround
                if sent["params"] is not None:
                    client.port.load(*sent["params"])
                if task.kind == "forward":
                    result: Any = client.port.forward(task, sent["inputs"])
                else:
                    result = client.port.backward(task, sent["inputs"], sent["grad_out"])
                held = self.host.hold(client.name, task, sent["params"] is not None, time.perf_counter() - start)
                client.gone.wait(client.delay + held)  # a slow or virtual device; a kill ends the wait
                seconds = time.perf_counter() - start
                with self.cond:
                    client.task = None
                    if client.alive and not self.stopping:
                        self._finish(client, servers, task, result, seconds)
        except ClientLost as exc:
            self.lost(client.name, str(exc))
        except Exception as exc:
            self.fail(exc)
        finally:
            client.port.close()

    def _finish(self, client: Client, servers: StageServers, task: Task, result: Any, seconds: float) -> None:
        """(lock held) A task's result reached the servers: keep it, and move the pass on."""
        done = servers.pool.client_done(task, self.clock())
        if not done.credited:  # the servers gave up on it: the pool's copy counts instead
            return
        client.samples += task.end - task.start
        if task.kind == "forward":  # its forward rate, which the next pass's split follows
            client.observe(task.end - task.start, seconds)
        mb, stage = task.microbatch, servers.stage
        nbytes = servers.receive(client.name, task, result)
        self.emit(events.hop(self.clock(), trainer="servers", stage=stage, peer=client.name, nbytes=nbytes,
                             direction="forward" if task.kind == "forward" else "backward", seconds=seconds,
                             microbatch=mb) | {"kind": task.kind, "start": task.start, "end": task.end})
        if done.forward_complete:
            self._forward_complete(stage, mb)
        if done.backward_complete:
            self._backward_complete(stage, mb)
        self.cond.notify_all()

    def _forward_complete(self, stage: int, mb: int) -> None:
        servers = self.stages[stage]
        if stage + 1 < self.cfg.stages:
            self.stages[stage + 1].inputs[mb] = servers.outputs[mb]
            self.stages[stage + 1].pool.forward_ready(mb, self.clock())
            return
        self._losses[mb] = servers.loss(mb, self._targets[mb], self._scale)
        servers.pool.backward_ready(mb, self.clock())

    def _backward_complete(self, stage: int, mb: int) -> None:
        if stage > 0:
            self.stages[stage - 1].grad_out[mb] = self.stages[stage].grad_in[mb]
            self.stages[stage - 1].pool.backward_ready(mb, self.clock())
        elif all(s.pool.ready() for s in self.stages):
            self._step()

    def _step(self) -> None:
        """(lock held) Every stage has the whole global batch's gradient: step and start the next pass."""
        loss = math.fsum(self._losses.values())
        if not math.isfinite(loss):
            self.diverged = f"step {self.step}: the loss is {loss}"
            self.emit(events.run(self.clock(), state="diverged", reason=self.diverged))
            self.stopping = True
            return
        counted = [sum(e - s for mb in range(self.cfg.microbatches_per_step) for _, s, e in st.pool.credits(mb))
                   for st in self.stages]
        for servers in self.stages:
            servers.step(self.step)
        self.step += 1
        self.last_loss, self._losses = loss, {}
        self.emit(events.step(self.clock(), step=self.step, loss=loss, samples=self.cfg.global_batch,
                              tokens=self.cfg.global_batch * self.cfg.model.seq_len) | {"stage_samples": counted})
        for servers in self.stages:  # the pool's counters, for the lab and the tests
            self.emit(events.setting(self.clock(), name="pool", value={"stage": servers.stage, **servers.pool.stats()}))
        for hook in self.step_hooks:
            hook(self.step)
        if self.step >= self.cfg.steps:
            self.finished.set()
            self.stopping = True
        else:
            self._begin_pass()

    def _monitor(self) -> None:
        """Declare overdue clients lost: their work goes to the pool (they join again when they ask)."""
        with self.cond:
            while not self.stopping:
                for servers in self.stages:
                    for name in servers.pool.timeout(self.clock()):
                        self.emit(events.peer(self.clock(), peer=name, stage=servers.stage, state="killed", queue=0)
                                  | {"reason": "overdue"})
                        self.cond.notify_all()
                self.cond.wait(timeout=MONITOR_PERIOD)

    def fail(self, exc: BaseException) -> None:  # a bug, not a fault: the run stops loudly
        fail_core(self, exc)

    def stop(self) -> None:
        with self.cond:
            self.stopping = True
            for client in self.clients.values():
                client.gone.set()
            self.cond.notify_all()

    def join(self, timeout: float) -> None:
        for thread in list(self.threads):
            thread.join(timeout)

    def close(self) -> None:
        """Release where the clients lived (a Dask cluster)."""
        self.host.close()

    def committed(self) -> tuple[RunConfig, list[dict[str, Any]]]:
        """The run's config and every stage's master parameters and optimizer state."""
        with self.cond:
            return self.cfg, [servers.state() for servers in self.stages]

    def consistent(self) -> bool:
        """The servers hold the committed state after every pass."""
        return True

    def state(self) -> dict[str, Any]:
        with self.cond:
            stages = [s.describe([self.clients[n].describe() for n in self.live(s.stage)])
                      for s in self.stages]
            return {"step": self.step, "loss": self.last_loss, "stages": stages,
                    "paused_stages": [s["stage"] for s in stages if not s["peers"]]}

