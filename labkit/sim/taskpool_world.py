"""labkit's task-pool executor in a world, in virtual time: what its run of a scenario should take.

This models labkit's executor (`labkit/executors/taskpool`), not the paper's (`ps_taskpool.py`).
Every stage's servers live in the run's one process, at the world's `trainer_region`, so handing a
microbatch from one stage's servers to the next costs nothing, and the last stage's servers compute
the loss. Client `s{k}c{i}` sits at the seat of the world's `s{k}p{i}` (a joiner where the
world's joiners sit) and works one task at a time: it takes the task (one round trip to the
servers), fetches its input slice (token ids at stage 0, else activations), or its output
gradients for a backward, and the stage's parameters on its first task of each pass after the
one it joined in (it starts with the servers' parameters), computes on
its device, and sends back its output slice, or its input gradients (none at stage 0) and the
stage's parameter gradients, which every backward slice carries. `TaskCosts` prices a task; the
executor holds each task that long and `taskpool_steps` replays a run with the same `StagePool`
bookkeeping the executor calls, the same split by measured forward rates and the world's churn
trace drawn as `runtime.world.replay_churn` draws it.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass

import numpy as np

from labkit.kernels.fluid import pick_leaver
from labkit.sim.links import region_link
from labkit.sim.scenario import SimScenario
from labkit.sim.seats import device_table, peer_device, peer_region, world_costs
from labkit.sim.world import GRAD_BYTES, build_world
from labkit.taskpool import StagePool, Task, smoothed_rate

TOKEN_BYTES = 8.0  # a token id as stage 0's servers send it (int64)


@dataclass(frozen=True)
class TaskCosts:
    """What one client's tasks take: its device's seconds per sample, its link to the servers, and
    the bytes per sample (input, activation) and per stage (parameters) that cross it."""

    forward: float  # seconds per sample of the stage's forward on the client's device
    backward: float
    rtt: float  # seconds, client to servers and back
    rate: float  # bytes per second on that link
    input_bytes: float  # per sample, a forward's input (token ids at stage 0, else activations)
    activation_bytes: float  # per sample, an output slice, its gradient, or an input gradient
    param_bytes: float  # the stage's parameters, as a reload or as parameter gradients
    first_stage: bool  # stage 0 sends no input gradients

    def seconds(self, kind: str, samples: int, reload: bool) -> float:
        """One task of `kind` ("forward", "backward" or "recompute") on `samples` samples, from the
        moment it is taken to its result at the servers; `reload`: the pass's first task."""
        forward, backward = kind != "backward", kind != "forward"
        fetch = (self.param_bytes * reload + samples * (self.input_bytes * forward + self.activation_bytes * backward))
        send = (samples * self.activation_bytes if kind == "forward" else
                samples * self.activation_bytes * (not self.first_stage) + self.param_bytes)
        return self.rtt + (fetch + send) / self.rate + samples * (self.forward * forward + self.backward * backward)

    def speed(self) -> float:
        """Forward samples a second, wire included, latency and reloads left out: what the client
        tells the servers when it joins (the split of its first pass)."""
        return 1.0 / (self.forward + (self.input_bytes + self.activation_bytes) / self.rate)


def seat(client: str) -> str:
    """The world's peer whose seat client `client` (`s{k}c{i}`) takes: `s{k}p{i}`."""
    stage, index = client[1:].split("c")
    return f"s{stage}p{index}"


def task_costs(scenario: SimScenario, client: str, stage: int) -> TaskCosts:
    """Client `client` of `stage` in the world `scenario` (see the module's docstring)."""
    costs = world_costs(scenario)
    forward, backward = device_table(scenario, peer_device(scenario, seat(client)))
    rtt, rate = region_link(scenario, peer_region(scenario, seat(client)), scenario.trainer_region)
    per_sample = costs.activation_bytes / scenario.microbatch
    return TaskCosts(forward=forward[stage] / scenario.microbatch, backward=backward[stage] / scenario.microbatch,
                     rtt=rtt, rate=rate, input_bytes=TOKEN_BYTES * scenario.seq_len if stage == 0 else per_sample,
                     activation_bytes=per_sample, param_bytes=costs.stage_params[stage] * GRAD_BYTES,
                     first_stage=stage == 0)


class _Run:
    """One replay: the pools, the clients and an event heap, as the executor's threads would go."""

    def __init__(self, scenario: SimScenario, steps: int, microbatches: int, samples: int, slack: float,
                 grace: float) -> None:
        self.s, self.steps, self.microbatches, self.now = scenario, steps, microbatches, 0.0
        self.pools = [StagePool(samples, [f"s{k}fs0"], [f"s{k}bs0"], slack=slack, grace=grace)
                      for k in range(scenario.stages)]
        self.clients: dict[str, dict] = {}  # name -> stage, costs, alive, busy, version, rate
        self.numbers = [itertools.count() for _ in range(scenario.stages)]
        self.heap: list[tuple[float, int, str, object]] = []
        self.seq = itertools.count()
        self.version, self.step_times = 0, []
        self.next_check = float("inf")  # the earliest deadline check on the heap

    def push(self, t: float, kind: str, payload: object) -> None:
        heapq.heappush(self.heap, (t, next(self.seq), kind, payload))

    def join(self, stage: int) -> None:
        name = f"s{stage}c{next(self.numbers[stage])}"
        costs = task_costs(self.s, name, stage)
        self.clients[name] = {"stage": stage, "costs": costs, "alive": True, "busy": False,
                              "version": self.version, "rate": None}  # spawned with the servers' parameters
        self.pools[stage].client_joined(name, costs.speed(), self.now)

    def live(self) -> list[str]:
        """Live clients in the order the run's `state()` lists them: by stage, then by joining."""
        return [n for k in range(self.s.stages) for n, c in self.clients.items() if c["alive"] and c["stage"] == k]

    def churn(self, delta: int, u: float, v: float) -> None:
        """One event of the world's trace, drawn as `replay_churn` draws it."""
        names = self.live()
        stages = [self.clients[n]["stage"] for n in names]
        if delta > 0 and self.s.joins_by_policy:  # the executor's add_peer(None): the fewest live clients
            self.join(min(range(self.s.stages), key=lambda k: (stages.count(k), k)))
        elif delta > 0:
            self.join(min(int(u * self.s.stages), self.s.stages - 1))
        else:
            self._leave(names, stages, u, v)

    def _leave(self, names: list[str], stages: list[int], u: float, v: float) -> None:
        """A leaver drawn by the simulator's `pick_leaver`; a stage's last client is never killed."""
        i = pick_leaver(np.array(stages, np.int64), u, v, self.s.stages)
        if i >= 0 and stages.count(stages[i]) > 1:  # the executor refuses to kill a stage's last client
            self.clients[names[i]]["alive"] = False
            self.pools[stages[i]].client_lost(names[i], self.now)

    def begin_pass(self) -> None:
        for name, c in self.clients.items():
            if c["alive"] and c["rate"] and name in self.pools[c["stage"]].clients():
                self.pools[c["stage"]].set_speed(name, c["rate"])
        for mb in range(self.microbatches):
            self.pools[0].forward_ready(mb, self.now)

    def wake(self) -> None:
        """Every idle live client takes a task, if its stage's pool has one for it."""
        for name, c in self.clients.items():
            if not c["alive"] or c["busy"]:
                continue
            pool = self.pools[c["stage"]]
            if name not in pool.clients():  # declared overdue: it joins again when it asks
                pool.client_joined(name, c["costs"].speed(), self.now)
            task = pool.next_task(name, self.now)
            if task is not None:
                c["busy"], reload = True, c["version"] != self.version
                c["version"] = self.version
                seconds = c["costs"].seconds(task.kind, task.end - task.start, reload)
                self.push(self.now + seconds, "done", (name, task, seconds))
        deadline = min(p.next_deadline() for p in self.pools)
        if deadline < self.next_check:
            self.next_check = deadline
            self.push(deadline, "check", None)

    def done(self, name: str, task: Task, seconds: float) -> None:
        """Task `task` of client `name` reached the servers: credit it and move the pass on, as the
        executor's `_finish` does."""
        c = self.clients[name]
        c["busy"] = False
        stage, pool = c["stage"], self.pools[c["stage"]]
        if not c["alive"]:
            return
        result = pool.client_done(task, self.now)
        if not result.credited:
            return
        if task.kind == "forward":
            c["rate"] = smoothed_rate(c["rate"], task.end - task.start, seconds)
        else:
            pool.flush(name)
        mb, last = task.microbatch, self.s.stages - 1
        if result.forward_complete:  # the next stage's input, or at the last the loss turns around
            (self.pools[stage + 1].forward_ready if stage < last else pool.backward_ready)(mb, self.now)
        if result.backward_complete and stage > 0:
            self.pools[stage - 1].backward_ready(mb, self.now)
        elif result.backward_complete and all(p.ready() for p in self.pools):
            for p in self.pools:
                p.advance()
            self.version += 1
            self.step_times.append(self.now)
            if len(self.step_times) < self.steps:
                self.begin_pass()


def taskpool_steps(scenario: SimScenario, steps: int, microbatches: int, samples: int, *, slack: float = 3.0,
                   grace: float = 2.0) -> list[float]:
    """The seconds at which each of `steps` steps of the world `scenario` ends, run by labkit's
    task-pool executor with `microbatches` microbatches of `samples` samples a step and the
    pool's `slack` and `grace`; the world's churn trace replayed from second 0."""
    if steps < 1 or microbatches < 1 or samples < 1:
        raise ValueError(f"need steps, microbatches and samples >= 1 (got {steps}, {microbatches}, {samples})")
    run = _Run(scenario, steps, microbatches, samples, slack, grace)
    for stage in range(scenario.stages):
        for group in scenario.peers:
            if group.stage == stage:
                for _ in range(group.count):
                    run.join(stage)
    world = build_world(scenario)
    for t, delta, u, v in zip(world.ev_t, world.ev_delta, world.ev_u, world.ev_v):
        run.push(float(t), "churn", (int(delta), float(u), float(v)))
    run.begin_pass()
    run.wake()
    while len(run.step_times) < steps:
        if not run.heap:
            raise RuntimeError("the task-pool world stalled: a stage has no live client")
        run.now, _, kind, payload = heapq.heappop(run.heap)
        if kind == "done":
            run.done(*payload)
        elif kind == "churn":
            run.churn(*payload)
        elif run.now >= run.next_check:  # the executor's monitor declares overdue clients lost
            run.next_check = float("inf")
            for pool in run.pools:
                pool.timeout(run.now)
        run.wake()
    return run.step_times
