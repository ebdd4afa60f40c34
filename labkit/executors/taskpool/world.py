"""The task pool's clients in a world (`RunConfig.world`): each on its virtual device, behind its
seat's link to the servers.

Client `s{k}c{i}` takes the seat of the world's `s{k}p{i}` (a joiner where the world's joiners
sit). It computes the run's model for real, then holds each task until the task would have ended
in the world (`labkit.sim.taskpool_world.TaskCosts`: a round trip, the slice's and any reload's
bytes over its link to the servers at the world's `trainer_region`, and the device's compute), so
the run takes the time that `labkit.sim.taskpool_world.taskpool_steps` predicts for it. A task
whose real compute took longer is an overrun, said as a `taskpool_overrun` setting. The bytes are
a wait, not traffic: the clients live in this process. In-process runs only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch

from labkit import events
from labkit.config import RunConfig
from labkit.executors.taskpool.client import LocalClients, StageClient
from labkit.sim.scenario import SimScenario
from labkit.sim.taskpool_world import TaskCosts, task_costs
from labkit.taskpool import Task


class PacedClient(StageClient):
    """A client whose speed, as it tells the servers on joining, is its virtual device's."""

    def __init__(self, cfg: RunConfig, name: str, stage: int, params: Mapping[str, torch.Tensor],
                 costs: TaskCosts) -> None:
        super().__init__(cfg, name, stage, params)
        self.costs = costs

    def speed(self) -> float:
        return self.costs.speed()


class WorldClients(LocalClients):
    """Clients in this process, each on its seat's virtual device and link."""

    def __init__(self, cfg: RunConfig, scenario: SimScenario, emit: Callable[[events.Event], None],
                 clock: Callable[[], float]) -> None:
        super().__init__(cfg)
        self.scenario, self.emit, self.clock = scenario, emit, clock
        self.costs: dict[str, TaskCosts] = {}

    def spawn(self, name: str, stage: int, params: Mapping[str, torch.Tensor]) -> PacedClient:
        self.costs[name] = task_costs(self.scenario, name, stage)
        return PacedClient(self.cfg, name, stage, params, self.costs[name])

    def hold(self, client: str, task: Task, reload: bool, real: float) -> float:
        """Seconds `client` still holds `task`'s result after `real` seconds of compute."""
        emulated = self.costs[client].seconds(task.kind, task.end - task.start, reload)
        if real > emulated:
            self.emit(events.setting(self.clock(), name="taskpool_overrun",
                                     value={"client": client, "over_s": real - emulated, "kind": task.kind}))
        return max(0.0, emulated - real)
