"""The same churn for any executor, through the run handle, and what it cost: the benchmark
(benchmarks/taskpool.py) and tutorial 11 compare SWARM and the task pool with it.

Every `every` steps, mid-step (at the first backward hop after the step), the newest peer of one
stage (alternating) is killed and a fresh one added to that stage: SWARM recomputes the
microbatches whose gradients the dead peer had accumulated, the task pool only the slices it held.
"""

from __future__ import annotations

from labkit.config import RunConfig
from labkit.runtime.handle import RunHandle


def kill_every(run: RunHandle, every: int, timeout: float = 300) -> list[str]:
    """Kill a peer every `every` steps until the run's last step and add one in its place (as
    above); returns the killed peers. `every=0`: no churn."""
    killed = []
    for step in range(every, run.config.steps, every) if every else ():
        done = run.wait_for(step=step, timeout=timeout)
        run.wait_for(event=lambda e: e["type"] == "hop" and e["direction"] == "backward" and e["t"] > done["t"],
                     timeout=timeout)  # mid-step: the victim holds work (SWARM: accumulated gradients)
        stage = (step // every) % run.config.stages
        victim = run.state()["stages"][stage]["peers"][-1]["peer"]
        run.kill_peer(victim)
        run.add_peer(stage)
        killed.append(victim)
    return killed


def extra_forward(run: RunHandle, cfg: RunConfig) -> int:
    """Forward samples computed beyond one per sample per stage per step, from the hop events (a
    task-pool hop carries its slice; a recompute task runs the forward again; a SWARM hop is a
    whole microbatch)."""
    done = 0
    for hop in run.events.history("hop"):
        if "kind" in hop:
            done += (hop["end"] - hop["start"]) if hop["kind"] in ("forward", "recompute") else 0
        elif hop["direction"] == "forward":
            done += cfg.microbatch
    return done - cfg.steps * cfg.global_batch * cfg.stages


def tokens_per_s(run: RunHandle, warmup: int = 3) -> float:
    """Tokens per second from the first step after `warmup` to the last step."""
    steps = [e for e in run.events.history("step") if e["step"] > warmup]
    return sum(e["tokens"] for e in steps[1:]) / (steps[-1]["t"] - steps[0]["t"])
