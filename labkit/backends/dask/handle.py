"""The handle of a run on a Dask cluster: the run-handle contract, forwarded to the coordinator.

The notebook (or CLI) process only holds this handle. The run itself — ledger, step boundary,
peers, trainers — lives on the cluster's workers: a coordinator actor on one worker, each peer and
trainer an actor on its own. The handle forwards verbs to the coordinator and polls its events
into a local `EventLog` (and `run_dir/events.jsonl`); at the end it writes the summary and the
final checkpoint locally.
"""

from __future__ import annotations

import threading
import time
import uuid
from concurrent.futures import Future
from pathlib import Path
from typing import Any


from labkit import events
from labkit.backends.dask.connect import connect
from labkit.backends.dask.coordinator_actor import CoordinatorActor
from labkit.backends.dask.placement import coordinator_worker
from labkit.backends.dask.remote import START_TIMEOUT
from labkit.backends.dask.workers import cluster_workers
from labkit.config import RunConfig
from labkit.runtime.checkpoint import load_checkpoint
from labkit.runtime.files import write_json
from labkit.runtime.handle import RunHandle, open_record
from labkit.runtime.local_run import resumed_config
from labkit.runtime.ports import RunEnded

POLL_SECONDS = 0.2  # how often the handle fetches new events from the coordinator
VERB_SECONDS = 60.0  # the most a verb waits for the coordinator (a peer's start may add START_TIMEOUT)


def _warm_up() -> None:
    """Import what peers and trainers need (a worker's first torch import takes seconds)."""
    import labkit.backends.dask.coordinator_actor  # noqa: F401


class DaskRun(RunHandle):
    """A live run on a Dask cluster: this process holds the handle, the cluster runs the rest."""

    def __init__(self, cfg: RunConfig, *, run_dir: str | Path | None = None, resume: str | Path | None = None,
                 scheduler: str | None = None, host: str = "127.0.0.1", trace: bool = False) -> None:
        checkpoint = load_checkpoint(resume, cfg) if resume is not None else None
        self.config = cfg = resumed_config(cfg, checkpoint)
        self.run_dir, self.events = open_record(cfg, run_dir, trace)
        self.run_id = uuid.uuid4().hex[:12]
        self.dashboard_link: str | None = None  # set once connected; see dashboard()
        self._connected = threading.Event()
        self._coordinator: Any = None
        self._summary: dict[str, Any] = {}
        self._ready, self._done, self._stop = threading.Event(), threading.Event(), threading.Event()
        self._started = time.perf_counter()
        self._start_thread(lambda: self._main(scheduler, checkpoint, host), "labkit-run")

    # -- life cycle ----------------------------------------------------------------------------
    def _main(self, scheduler: str | None, checkpoint: dict[str, Any] | None, host: str) -> None:
        client = cluster = owner = None
        try:
            client, cluster = connect(scheduler, self.config, host)
            self.dashboard_link = client.dashboard_link
            self._connected.set()
            client.run(_warm_up)  # every worker imports torch and labkit now, in parallel
            worker = coordinator_worker(cluster_workers(client))
            key = f"labkit-coordinator-{self.run_id}"
            owner = client.submit(CoordinatorActor, self.run_id, key, self.config, checkpoint, key=key, actor=True,
                                  workers=[worker], allow_other_workers=False)
            self._coordinator = owner.result(START_TIMEOUT)
            self._ready.set()
            if self._stop.is_set():
                self._coordinator.verb("stop").result()
            self._follow()
        except Exception as exc:
            self._summary = {"status": "failed", "error": f"{type(exc).__name__}: {exc}"}
            self.events.emit(events.run(time.perf_counter() - self._started, state="failed", reason=self._summary["error"]))
        finally:
            self._connected.set()
            self._ready.set()
            self.events.close()
            if client is not None:
                client.close()
            if cluster is not None:
                cluster.close()
            self._done.set()

    def _follow(self) -> None:
        """Copy the coordinator's events here until the run ends; then keep its summary and
        write the run directory."""
        coordinator, index = self._coordinator, 0
        while True:
            done = coordinator.done().result(30)
            batch, index = coordinator.events_since(index).result(30)
            for event in batch:
                self.events.emit(event)
            if done:
                break
            time.sleep(POLL_SECONDS)
        summary = coordinator.verb("summary").result(30)
        if self.run_dir:
            snapshot = coordinator.snapshot().result(120)
            summary["checkpoint"] = str(snapshot.save(self.run_dir / "checkpoint.pt"))
            write_json(self.run_dir / "summary.json", summary, "summary")
        self._summary = summary

    def _verb(self, name: str, *args: Any) -> Any:
        if name == "stop":
            self._stop.set()
            if self._coordinator is not None and not self._done.is_set():
                self._coordinator.verb("stop")
            return None
        self._ready.wait()
        if self._coordinator is None:
            raise RuntimeError(f"the run failed to start: {self._summary.get('error')}")
        if self._done.is_set():
            raise RunEnded(f"{name} is not available: the run has ended ({self._summary.get('status')}) and its "
                           f"cluster was released")
        bound = START_TIMEOUT + VERB_SECONDS if name in ("add_peer", "move_peer", "rebalance") else VERB_SECONDS
        try:
            return self._coordinator.verb(name, *args).result(bound)
        except TimeoutError:
            raise TimeoutError(f"{name} did not answer within {bound:.0f} s: the coordinator's worker is busy "
                               f"or gone") from None

    def dashboard(self, timeout: float = 60) -> str | None:
        """The Dask dashboard's address, once connected to the cluster (None if it has none)."""
        self._connected.wait(timeout)
        return self.dashboard_link


    def snapshot(self) -> Future:
        """The committed state at the next step boundary, fetched to this process."""
        future: Future = Future()

        def fetch() -> None:
            try:
                self._ready.wait()
                if self._done.is_set():
                    raise RunEnded("snapshot is not available: the run has ended and its cluster was released; "
                                   "launch with run_dir= to keep the final checkpoint (run_dir/checkpoint.pt)")
                future.set_result(self._coordinator.snapshot().result())
            except Exception as exc:
                future.set_exception(exc)

        threading.Thread(target=fetch, name="labkit-snapshot", daemon=True).start()
        return future

    def state(self) -> dict[str, Any]:
        if not self._ready.is_set() or self._coordinator is None:
            return {"status": "failed" if self._done.is_set() else "starting", "step": 0, "stages": []}
        if self._done.is_set():
            return {"status": self._summary.get("status", "failed"), "step": self._summary.get("steps", 0), "stages": []}
        return self._coordinator.verb("state").result(VERB_SECONDS)


def launch(cfg: RunConfig, *, run_dir: str | Path | None = None, resume: str | Path | None = None,
           scheduler: str | None = None, host: str = "127.0.0.1", trace: bool = False) -> DaskRun:
    """Start `cfg` on a Dask cluster (the one at `scheduler`, or an embedded LocalCluster)."""
    return DaskRun(cfg, run_dir=run_dir, resume=resume, scheduler=scheduler, host=host, trace=trace)
