"""A world the real runtime runs: one scenario file's devices, links, trainers and churn.

`world_config(path)` makes the run the file describes: its stages and peers, trainers (each
keeping the file's `window` microbatches in flight), router and rebalancing, with every peer on its
virtual device (labkit/runtime/pacing.py) behind the file's links (labkit/runtime/links.py).
`replay_churn` replays the file's membership trace (its churn model's, seeded) through the run's
handle as real kills and joins, with the simulator's own draws (labkit/sim/world.py): a leaver
from a uniformly drawn stage among those with peers, a joiner on the stage Algorithm 2 picks when
the file rebalances with directed joins, else on a uniformly drawn one. A joiner serves once the
state download the simulator charges it has passed (labkit/runtime/pacing.py:join_seconds), so
each join runs on a thread of its own while the trace goes on.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from labkit import events
from labkit.config import RunConfig
from labkit.kernels.fluid import pick_leaver
from labkit.runtime.handle import RunHandle
from labkit.runtime.links import read_scenario
from labkit.sim.scenario import SimScenario
from labkit.sim.world import build_world


def world_config(path: str, base: RunConfig | None = None) -> RunConfig:
    """The run of the world `path` names (a preset's name or a scenario file): `base` (default
    RunConfig()) with the world's stages, peers, trainers (each keeping the world's `window`
    microbatches in flight), microbatch, router and rebalancing. The run trains `base`'s model (nano
    by default) as a stand-in while its peers take the time the world's model would; the global
    batch is the world's, else one round of every trainer's in-flight microbatches; steps, learning
    rate and seed stay `base`'s. The executor's `from_world` makes the run its own (ATOM's: the
    one stage's peers are its replicas)."""
    s = read_scenario("world", path)
    peers = tuple(sum(g.count for g in s.peers if g.stage == stage) for stage in range(s.stages))
    base = base or RunConfig()
    return base.spec.from_world(base.replace(
        stages=s.stages, peers=peers, trainers=s.trainers, inflight=s.window, microbatch=s.microbatch,
        global_batch=s.global_batch or s.microbatch * s.trainers * s.window, gamma=s.gamma, debias_ema=s.debias_ema,
        rebalance_period=s.rebalance_period or 0.0, world=None)).replace(world=path)


def replay_churn(run: RunHandle, s: SimScenario) -> threading.Thread | None:
    """Replay `s`'s membership trace on `run` in a background thread (None when it has none),
    at the trace's seconds since the run's `started` event; it and the joins it starts (each on a
    thread of its own) end with the run."""
    w = build_world(s)
    if len(w.ev_t) == 0:
        return None

    def stages() -> list[dict[str, Any]] | None:
        """The run's stages and their live peers, once a fresh state has them (None: the run ended)."""
        while not run.done:
            state = run.state()
            if state["stages"] and not state.get("stale"):
                return state["stages"]
            time.sleep(0.1)  # a step boundary holds the books: their state is back in moments
        return None

    def act(verb: Callable[[], Any]) -> bool:
        """Run one verb of the trace; False once the run has ended. A verb that fails is said so in a
        setting (`churn_refused`: fixed wiring, the pipeline's lanes, takes a joiner only where a lane
        is empty; `churn_failed`: anything else, a joiner's start that failed say) and the trace goes on."""
        try:
            verb()
        except Exception as exc:
            if run.done:  # the run ended between the check and the verb
                return False
            refused = isinstance(exc, ValueError)
            run.events.emit(events.setting(run.clock(), name="churn_refused" if refused else "churn_failed",
                                           value=str(exc) if refused else f"{type(exc).__name__}: {exc}"))
        return True

    def loop() -> None:
        try:
            run.wait_for(event={"type": "run", "state": "started"}, timeout=3600)
        except (RuntimeError, TimeoutError):  # the run ended, or never started
            return
        origin = time.monotonic()  # the trace's seconds count from the run's start
        for t, delta, u, v in zip(w.ev_t, w.ev_delta, w.ev_u, w.ev_v):
            while not run.done and time.monotonic() < origin + t:
                time.sleep(min(1.0, origin + t - time.monotonic()))
            if (now := stages()) is None:
                return
            if delta < 0:  # the simulator's own rule picks the leaver (`pick_leaver`)
                names = [p["peer"] for stage in now for p in stage["peers"]]
                stage_of = np.array([k for k, stage in enumerate(now) for _ in stage["peers"]], np.int64)
                if (i := pick_leaver(stage_of, u, v, s.stages)) >= 0 and not act(partial(run.kill_peer, names[i])):
                    return
            else:  # on a thread of its own: a world's joiner takes its download's time, and the trace goes on
                stage = None if s.joins_by_policy else min(int(u * s.stages), s.stages - 1)
                threading.Thread(target=act, args=(partial(run.add_peer, stage),), name="labkit-churn-join",
                                 daemon=True).start()

    thread = threading.Thread(target=loop, name="labkit-churn", daemon=True)
    thread.start()
    return thread
