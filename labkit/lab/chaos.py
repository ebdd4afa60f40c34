"""A chaos monkey for a live run: random kills, joins and moves through the public handle.

For courses (watch SWARM absorb churn) and for soak tests. Every action leaves a live peer in
every stage, and after each one the monkey waits for the next step, so the longest wait it saw
bounds how long churn stalled the run::

    monkey = Chaos(run, seed=0, max_peers=6)
    report = monkey.run_for(60)        # {"actions": {"kill": 9, ...}, "longest_wait": 1.8, ...}
"""

from __future__ import annotations

import random
import time
from collections import Counter
from typing import Any

from labkit.runtime.handle import RunHandle

ACTIONS = ("kill", "add", "move")


class Chaos:
    """Random churn on `run`: at most `max_peers` peers at once, at least one per stage."""

    def __init__(self, run: RunHandle, *, seed: int = 0, max_peers: int = 6, step_timeout: float = 60.0) -> None:
        if max_peers < run.config.stages:
            raise ValueError(f"max_peers={max_peers} is not allowed: at least one per stage ({run.config.stages})")
        self.run, self.max_peers, self.step_timeout = run, max_peers, step_timeout
        self.rng = random.Random(seed)
        self.actions: Counter[str] = Counter()
        self.refused: Counter[str] = Counter()  # verbs the run refused (a peer left meanwhile, ...)
        self.waits: list[float] = []  # seconds from each action to the next step

    def act(self) -> str | None:
        """One random action the current membership allows; returns it (None if none applied)."""
        stages = self.run.state()["stages"]
        peers = [(s["stage"], p["peer"]) for s in stages for p in s["peers"]]
        crowded = [(stage, name) for stage, name in peers if sum(1 for s, _ in peers if s == stage) > 1]
        choices = [a for a, ok in (("kill", crowded), ("move", crowded), ("add", len(peers) < self.max_peers)) if ok]
        if not choices:
            return None
        action = self.rng.choice(choices)
        try:
            if action == "kill":
                self.run.kill_peer(self.rng.choice(crowded)[1])
            elif action == "move":
                stage, name = self.rng.choice(crowded)
                self.run.move_peer(name, self.rng.choice([s for s in range(len(stages)) if s != stage]))
            else:
                self.run.add_peer(self.rng.randrange(len(stages)))
        except (KeyError, ValueError):
            self.refused[action] += 1
            return None
        self.actions[action] += 1
        return action

    def run_for(self, seconds: float) -> dict[str, Any]:
        """Act, then wait for the next committed step, until `seconds` pass or the run ends."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not self.run.done:
            step = self.run.state()["step"]
            started = time.monotonic()
            self.act()
            try:
                self.run.wait_for(step=step + 1, timeout=self.step_timeout)
            except RuntimeError:  # the run ended (its last step, or a failure the caller will see)
                break
            self.waits.append(time.monotonic() - started)
        return self.report()

    def report(self) -> dict[str, Any]:
        return {"actions": dict(self.actions), "refused": dict(self.refused), "rounds": len(self.waits),
                "longest_wait": max(self.waits, default=0.0),
                "median_wait": sorted(self.waits)[len(self.waits) // 2] if self.waits else 0.0}
