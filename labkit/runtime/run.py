"""The run handle: what `labkit.launch` returns, and what the CLI, widgets and tests drive.

>>> import labkit
>>> run = labkit.launch(labkit.RunConfig(steps=5))      # returns at once
>>> q = run.events.subscribe()                           # live events: hops, steps, peers
>>> run.kill_peer("s0p1"); name = run.add_peer(0)        # faults and joins, mid-run
>>> summary = run.wait()                                 # blocks only when you ask it to

Every verb returns promptly; the training itself runs on background threads.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any, NamedTuple

from labkit import events
from labkit.config import WIRE_CODECS, RunConfig, SyncConfig
from labkit.runtime.checkpoint import load_checkpoint, save_checkpoint
from labkit.runtime.eventlog import EventLog
from labkit.runtime.swarm import InProcessSwarm
from labkit.runtime.totals import RunTotals

BACKENDS = ("inprocess", "dask")


class Snapshot(NamedTuple):
    """The committed state at one step boundary: what a checkpoint file holds."""

    config: RunConfig  # with the layer split and sync mode in force
    step: int
    stages: list[dict[str, Any]]

    def save(self, path: str | Path) -> Path:
        return save_checkpoint(path, self.config, self.step, self.stages)


def resumed_config(cfg: RunConfig, checkpoint: dict[str, Any] | None) -> RunConfig:
    """`cfg` continuing with the layer split and sync mode the checkpointed run had."""
    if checkpoint is None:
        return cfg
    saved = RunConfig.from_dict(checkpoint["config"])
    return cfg.replace(layer_split=saved.layer_split, sync=saved.sync)


SwarmFactory = Callable[[RunConfig, EventLog, "dict[str, Any] | None"], InProcessSwarm]


class RunHandle:
    """What every run handle shares: `_done` is set once the run ended and `_summary` filled."""

    _done: threading.Event
    _summary: dict[str, Any]

    def wait(self, timeout: float | None = None) -> dict[str, Any]:
        """Block until the run ends (or `timeout` seconds pass); return the summary so far."""
        self._done.wait(timeout)
        return dict(self._summary)

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def summary(self) -> dict[str, Any]:
        """The end-of-run summary (empty while running)."""
        return dict(self._summary)


class Run(RunHandle):
    """A live training run: events, state, and the verbs that steer it.

    `swarm_factory` builds the executor (default: peers and trainers as threads of this process);
    the Dask backend passes one whose peers and trainers live on cluster workers."""

    def __init__(self, cfg: RunConfig, *, run_dir: str | Path | None = None, resume: str | Path | dict | None = None,
                 swarm_factory: SwarmFactory = InProcessSwarm) -> None:
        self.config = cfg
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self._swarm_factory = swarm_factory
        self._resume = resume if isinstance(resume, dict) or resume is None else load_checkpoint(resume, cfg)
        cfg = self.config = resumed_config(cfg, self._resume)
        if self.run_dir:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            (self.run_dir / "config.json").write_text(json.dumps(cfg.to_dict(), indent=2))
        self.events = EventLog(self.run_dir / "events.jsonl" if self.run_dir else None)
        self._totals = RunTotals(cfg.stages)
        self.events.listeners.append(self._totals.add)
        self._swarm: InProcessSwarm | None = None
        self._ready = threading.Event()
        self._done = threading.Event()
        self._summary: dict[str, Any] = {}
        self._snapshots: list[Future] = []  # snapshot() requests, served at the next step boundary
        self._stop = threading.Event()  # stop() was called
        self._final = False  # the run has ended: checkpoints are taken at once, of the final state
        self._lock = threading.Lock()
        self._started = time.perf_counter()
        self._thread = threading.Thread(target=self._main, name="labkit-run", daemon=True)
        self._thread.start()

    # -- life cycle ----------------------------------------------------------------------------
    def _main(self) -> None:
        try:
            swarm = self._swarm_factory(self.config, self.events, self._resume)
            swarm.step_hooks.append(self._on_step)
            self._swarm = swarm
            self._ready.set()
            swarm.start()
            while not swarm.finished.wait(0.2) and not self._stop.is_set():
                pass
            swarm.stop()
            swarm.join()
            self._finish(swarm)
        except Exception as exc:
            self.events.emit(events.run(time.perf_counter() - self._started, state="failed", reason=f"{type(exc).__name__}: {exc}"))
            self._summary = {"status": "failed", "error": f"{type(exc).__name__}: {exc}"}
            self._ready.set()
        finally:
            self.events.close()
            self._done.set()

    def _on_step(self, step: int) -> None:
        """Step hook (swarm lock held): take requested checkpoints at this consistent boundary
        (with DiLoCo, at an outer-step boundary, where every peer holds the global parameters)."""
        if self._swarm.schedule.inner != 0:
            return
        with self._lock:
            pending, self._snapshots = self._snapshots, []
        for future in pending:
            future.set_result(self._capture(step))

    def _capture(self, step: int) -> Snapshot:
        """The committed state, with the layer split and sync mode in force."""
        swarm = self._swarm
        return Snapshot(swarm.cfg.replace(sync=swarm.schedule.cfg), step, list(swarm.snapshots))

    def _finish(self, swarm: InProcessSwarm) -> None:
        if swarm.error is not None:
            status = "failed"
        elif swarm.finished.is_set():
            status = "finished"
        else:
            status = "stopped"
        self._summary = {"status": status, "steps": swarm.ledger.step, **self._totals.summary(),
                         "seconds": time.perf_counter() - self._started, "corpus": swarm.corpus_description}
        if swarm.error is not None:
            self._summary["error"] = f"{type(swarm.error).__name__}: {swarm.error}"
        with self._lock:  # requests no boundary will serve any more get the final state
            pending, self._snapshots, self._final = self._snapshots, [], True
        for future in pending:
            future.set_result(self._capture(swarm.ledger.step))
        if self.run_dir:
            self._summary["checkpoint"] = str(self._capture(swarm.ledger.step).save(self.run_dir / "checkpoint.pt"))
            (self.run_dir / "summary.json").write_text(json.dumps(self._summary, indent=2))
        self.events.emit(events.run(swarm.clock(), state=status if status != "failed" else "failed", reason=self._summary.get("error", "")))

    def _swarm_or_raise(self) -> InProcessSwarm:
        self._ready.wait()
        if self._swarm is None:
            raise RuntimeError(f"the run failed to start: {self._summary.get('error')}")
        return self._swarm

    # -- verbs ----------------------------------------------------------------------------------
    def dashboard(self, timeout: float = 60) -> str | None:
        """The Dask dashboard's address: None here, where no cluster runs the swarm."""
        return None

    def stop(self) -> None:
        """Ask the run to stop after the microbatches in flight; returns at once."""
        self._stop.set()
        if self._swarm is not None:
            self._swarm.stop()

    def kill_peer(self, peer: str) -> None:
        """Crash a peer: its queue and accumulated gradients are lost and recomputed elsewhere."""
        self._swarm_or_raise().kill_peer(peer)

    def add_peer(self, stage: int | None = None) -> str:
        """Start a peer on `stage` (None: the stage the rebalancing rule picks); returns its name."""
        return self._swarm_or_raise().add_peer(stage)

    def move_peer(self, peer: str, stage: int) -> str:
        """Move a peer to `stage` (it downloads that stage's state); returns its new name."""
        return self._swarm_or_raise().move_peer(peer, stage)

    def rebalance(self) -> str | None:
        """Run one round of Algorithm 2 now; returns the moved peer's new name, or None."""
        return self._swarm_or_raise().rebalance()

    def set_layer_split(self, split: list[int] | tuple[int, ...]) -> None:
        """Move blocks between stages at the next step boundary, with their optimizer state."""
        self._swarm_or_raise().set_layer_split(tuple(split))

    def set_peer_delay(self, peer: str, seconds: float) -> None:
        """Slow a peer down by `seconds` per request (to watch the router shift traffic away)."""
        if not (isinstance(seconds, (int, float)) and 0 <= seconds < 60):
            raise ValueError(f"seconds={seconds!r} is not allowed: a number in [0, 60)")
        target = self._swarm_or_raise().peer(peer)
        if target is None:
            raise KeyError(f"no live peer named {peer!r}")
        target.set_delay(seconds)

    def peer_state(self, peer: str) -> dict[str, Any]:
        """A copy of one peer's parameters and optimizer state (to compare replicas of a stage)."""
        target = self._swarm_or_raise().peer(peer)
        if target is None:
            raise KeyError(f"no live peer named {peer!r}")
        return target.call("state").result()

    def set_compression(self, codec: str) -> None:
        """Switch the wire codec of activations and their gradients (fp32, fp16, bf16, int8) now."""
        if codec not in WIRE_CODECS:
            raise ValueError(f"codec={codec!r} is not allowed: one of {sorted(WIRE_CODECS)}")
        self._swarm_or_raise().set_compression(codec)

    def set_sync(self, sync: SyncConfig) -> None:
        """Switch each stage between SWARM all-reduce and DiLoCo at the next outer-step boundary."""
        self.config.replace(sync=sync)  # the config's own rules: a SyncConfig, DiLoCo without delayed updates
        self._swarm_or_raise().set_sync(sync)

    def snapshot(self) -> Future:
        """The committed state at the next step boundary (the final state once the run ended)."""
        future: Future = Future()
        with self._lock:
            if self._final:
                future.set_result(self._capture(self._swarm.ledger.step))
            else:
                self._snapshots.append(future)
        return future

    def checkpoint(self, path: str | Path) -> Future:
        """Save the whole run at the next step boundary; the future resolves to the path."""
        return _then(self.snapshot(), lambda snap: snap.save(path))

    def state(self) -> dict[str, Any]:
        """A snapshot: step, last loss, paused stages, and every stage's peers with queue lengths."""
        if not self._ready.is_set() or self._swarm is None:
            return {"status": "failed" if self._done.is_set() else "starting", "step": 0, "stages": []}
        swarm = self._swarm
        stages = []
        for stage, (first, count) in enumerate(swarm.bounds):
            peers = [{"peer": p.name, "queue": p.queue_length, "samples": p.samples, "delay": p.delay,
                      "worker": p.worker} for p in swarm.live(stage)]
            stages.append({"stage": stage, "layers": list(range(first, first + count)), "peers": peers})
        status = self._summary.get("status", "running") if self._done.is_set() else ("paused" if swarm.paused_stages else "running")
        return {"status": status, "step": swarm.ledger.step, "steps": self.config.steps, "loss": swarm.last_loss,
                "paused_stages": sorted(swarm.paused_stages), "stages": stages}



def _then(future: Future, fn: Callable[[Any], Any]) -> Future:
    """A future of `fn(result)`, which runs when `future` resolves (its error propagates)."""
    out: Future = Future()

    def done(f: Future) -> None:
        try:
            out.set_result(fn(f.result()))
        except Exception as exc:
            out.set_exception(exc)

    future.add_done_callback(done)
    return out


def launch(config: RunConfig, *, backend: str | None = None, scheduler: str | None = None, host: str = "127.0.0.1",
           run_dir: str | Path | None = None, resume: str | Path | None = None) -> RunHandle:
    """Start a run in the background and return its handle at once.

    backend: "inprocess" (threads in this process) or "dask" (every peer and trainer an actor on
    its own worker of a Dask cluster); None: "dask" if a scheduler is given, else "inprocess".
    scheduler: the address of a running `dask scheduler` (None with "dask": an embedded
    LocalCluster of worker processes on this machine). host: with "dask", the interface the DHT
    nodes (and an embedded cluster) listen on: loopback unless you say otherwise.
    run_dir: where to write events.jsonl, summary.json and the final checkpoint. resume: a
    checkpoint to continue from.
    """
    if not isinstance(config, RunConfig):
        raise TypeError(f"config={config!r} is not allowed: a labkit.RunConfig")
    if backend is None:
        backend = "dask" if scheduler is not None else "inprocess"
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r} is not allowed: one of {list(BACKENDS)}")
    if backend == "dask":
        from labkit.runtime.cluster.run import ClusterRun

        return ClusterRun(config, run_dir=run_dir, resume=resume, scheduler=scheduler, host=host)
    if scheduler is not None:
        raise ValueError(f"scheduler={scheduler!r} is not allowed with backend='inprocess': a scheduler address needs backend='dask'")
    return Run(config, run_dir=run_dir, resume=resume)
