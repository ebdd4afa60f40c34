"""The task pool paper's parameter-server pipeline in virtual time: one `StagePool` per stage, the same
bookkeeping the executors call, driven by an event heap.

All microbatches of a batch wait at stage 0's frontal servers at t = 0, as token ids. A device of
a stage pulls a task when its compute is idle (its own slices first, backward before forward, then
the pool), computes once its inputs are in, and sends the result on while it computes the next:
the servers push a device's own slices as soon as they hold them, so their transfer overlaps
earlier work (as a SWARM peer's queue does), while pool work is fetched when taken. A stage's
forward of a microbatch is complete when the backward servers hold every slice, which they pass
to the next stage's frontal servers by the even split; gradients go the other way. At the last
stage the client that ran a slice's forward computes its loss and backward, as SWARM's last peer
does: "the BS passes the activations to the next stage" (the paper's §3.2), and there is none.
Gradients stream to the servers with each backward result (the delayed parameter update runs
beside training), so a vanished client takes only its task in flight and its stashed activations
with it. The servers notice a vanished client when a deadline passes.
"""

from __future__ import annotations

import heapq
import itertools

from labkit.sim.ps_world import BatchRun, PsWorld
from labkit.taskpool import StagePool, Task
from labkit.taskpool.segments import segments


class _Run:
    def __init__(self, world: PsWorld, drops: dict[int, float]) -> None:
        self.w, self.drops = world, drops
        self.pools = [StagePool(world.tokens, [world.names[i] for i in st.frontal], [world.names[i] for i in st.backward],
                                slack=world.slack, grace=world.grace) for st in world.stages]
        self.index = {name: i for i, name in enumerate(world.names)}
        self.heap: list[tuple[float, int, int, str, object]] = []  # (time, order, seq, kind, payload)
        self.seq, self.busy, self.now = itertools.count(), set(), 0.0
        self.checks: dict[int, float] = {}
        self.entered: dict[tuple[int, int, str], float] = {}  # (stage, microbatch, kind) -> pushed at
        for k, st in enumerate(world.stages):
            for i in st.members:
                self.pools[k].client_joined(world.names[i], world.speed(i, k), 0.0)

    def push(self, t: float, kind: str, payload: object, order: int = 1) -> None:
        heapq.heappush(self.heap, (t, order, next(self.seq), kind, payload))

    def alive(self, i: int, t: float) -> bool:
        return i not in self.drops or t < self.drops[i]

    def part_hops(self, pairs: list[tuple[str, str, int, int]], per_token: float | None = None) -> float:
        """Seconds until the last of parallel transfers (source, target, start, end) lands."""
        return max((self.w.hop(self.index[a], self.index[b], end - start, per_token) for a, b, start, end in pairs),
                   default=0.0)

    def timing(self, k: int, i: int, task: Task, t: float) -> tuple[float, float]:
        """(compute ends, result at the servers) of `task` taken by device i at stage k at t. Stage 0's
        inputs are token ids and its input gradients go nowhere; the last stage's outputs and their
        loss gradients stay on the client (no relay through its BS)."""
        pool, me, n, last = self.pools[k], self.w.names[i], task.end - task.start, len(self.w.stages) - 1
        fs = [(s, me, a, b) for s, a, b in pool.frontal_of(task.start, task.end)]
        bs = [(s, me, a, b) for s, a, b in pool.backward_of(task.start, task.end)] if k < last else []
        fetch_fs = self.part_hops(fs, self.w.fetch_bytes(k)) if task.kind != "backward" else 0.0
        fetch_bs = self.part_hops(bs) if task.kind != "forward" else 0.0
        send = [(me, s, a, b) for _, s, a, b in (bs if task.kind == "forward" else fs if k > 0 else [])]
        compute = n * (self.w.fwd[i, k] * (task.kind != "backward") + self.w.bwd[i, k] * (task.kind != "forward"))
        pushed = self.entered[k, task.microbatch, task.kind] if task.kind != "recompute" else t
        end = max(t, pushed + max(fetch_fs, fetch_bs)) + compute
        return end, end + self.part_hops(send)

    def wake(self, k: int, t: float) -> None:
        """Let every idle live device of stage k pull a task; keep a timeout check scheduled."""
        pool = self.pools[k]
        for i in self.w.stages[k].members:
            name = self.w.names[i]
            if (k, i) in self.busy or name not in pool.clients() or not self.alive(i, t):
                continue
            task = pool.next_task(name, t)
            if task is not None:
                self.busy.add((k, i))
                free, arrive = self.timing(k, i, task, t)
                self.push(free, "free", (k, i))
                self.push(arrive, "done", (k, i, task))
        deadline = pool.next_deadline()
        if any(i in self.drops for i in self.w.stages[k].members) and deadline < self.checks.get(k, float("inf")):
            self.checks[k] = deadline
            self.push(deadline, "check", k, order=2)

    def boundary(self, k: int, target: int, t: float, kind: str, mb: int) -> None:
        """Stage k's servers pass microbatch `mb` to stage `target` by the even split."""
        src, dst = self.w.stages[k], self.w.stages[target]
        send, recv = (src.backward, dst.frontal) if kind == "fwd" else (src.frontal, dst.backward)
        pairs = segments(self.w.tokens, [self.w.names[i] for i in send], [self.w.names[i] for i in recv])
        self.push(t + self.part_hops(pairs), kind, (target, mb))

    def step(self) -> None:
        t, _, _, kind, payload = heapq.heappop(self.heap)
        self.now = t
        if kind == "fwd" or kind == "bwd":
            k, mb = payload
            self.entered[k, mb, "forward" if kind == "fwd" else "backward"] = t
            (self.pools[k].forward_ready if kind == "fwd" else self.pools[k].backward_ready)(mb, t)
            self.wake(k, t)
        elif kind == "free":
            self.busy.discard(payload)
            self.wake(payload[0], t)
        elif kind == "check":
            self.checks.pop(payload, None)
            self.pools[payload].timeout(t)
            self.wake(payload, t)
        else:
            k, i, task = payload
            if self.alive(i, t):
                self.finish(k, i, task, t)
            self.wake(k, t)

    def finish(self, k: int, i: int, task: Task, t: float) -> None:
        pool, last = self.pools[k], len(self.w.stages) - 1
        done = pool.client_done(task, t)
        pool.flush(self.w.names[i])
        if done.forward_complete and k < last:
            self.boundary(k, k + 1, t, "fwd", task.microbatch)
        elif done.forward_complete:
            self.push(t, "bwd", (k, task.microbatch))  # the loss turns around at the last stage
        if done.backward_complete and k > 0:
            self.boundary(k, k - 1, t, "bwd", task.microbatch)


def taskpool_batch(world: PsWorld, drops: dict[int, float] | None = None) -> BatchRun:
    """One batch of `world` with the task pool; `drops` maps a device to the second it vanishes."""
    run = _Run(world, drops or {})
    for mb in range(world.microbatches):
        run.push(0.0, "fwd", (0, mb))
    while run.heap and not (all(p.ready() for p in run.pools) and run.now > 0):
        run.step()
    if not all(p.ready() for p in run.pools):
        raise RuntimeError("task-pool batch stalled: a stage lost every device")
    stats = [p.stats() for p in run.pools]
    return BatchRun(seconds=float(run.now), forward_runs=sum(s["forward_samples"] for s in stats),
                    lost=sum(s["lost_samples"] for s in stats),
                    repeated_beyond_lost=sum(s["repeated_beyond_lost"] for s in stats))
