"""`launch`: start a run on the backend asked for and return its handle at once.

Each executor's spec names, per backend, the import path of the function that starts it there, so
the runtime never imports a backend or an executor: `inprocess` (threads of this process) and
`dask` (actors on the workers of a Dask cluster).
"""

from __future__ import annotations

import importlib
from pathlib import Path

import psutil

from labkit.config import RunConfig
from labkit.model.memory import check_memory
from labkit.runtime.handle import RunHandle
from labkit.runtime.links import load_links
from labkit.runtime.world import replay_churn

BACKENDS = ("inprocess", "dask")


def backend_refusal(config: RunConfig, backend: str) -> str | None:
    """Why `backend` cannot run `config`'s executor, or None: launch's check, which the lab's form
    also shows beside its backend before anything is launched."""
    return config.spec.backend_refusal(config, backend)


def launch(config: RunConfig, *, backend: str | None = None, scheduler: str | None = None, host: str = "127.0.0.1",
           run_dir: str | Path | None = None, resume: str | Path | None = None, trace: bool = False) -> RunHandle:
    """Start a run in the background and return its handle at once.

    backend: "inprocess" (threads in this process) or "dask" (every peer and trainer an actor on
    its own worker of a Dask cluster); None: "dask" if a scheduler is given, else "inprocess".
    scheduler: the address of a running `dask scheduler` (None with "dask": an embedded
    LocalCluster of worker processes on this machine). host: the interface an embedded cluster
    listens on, loopback unless you say otherwise. Each worker's DHT node listens on and announces
    the host of that worker's own address, so on a cluster of several machines each is found at
    its machine's address (the one the scheduler reaches that worker at).
    run_dir: where to write events.jsonl, summary.json and the final checkpoint. resume: a
    checkpoint to continue from. trace: print one line per hop (`t0 → s1p0 forward 12.3 KB 4.1 ms`).
    """
    if not isinstance(config, RunConfig):
        raise TypeError(f"config={config!r} is not allowed: a labkit.RunConfig")
    if backend is None:
        backend = "dask" if scheduler is not None else "inprocess"
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r} is not allowed: one of {list(BACKENDS)}")
    options = {"run_dir": run_dir, "resume": resume, "trace": trace}
    if backend == "dask":
        options |= {"scheduler": scheduler, "host": host}
    elif scheduler is not None:
        raise ValueError(f"scheduler={scheduler!r} is not allowed with backend='inprocess': "
                         f"a scheduler address needs backend='dask'")
    if refusal := backend_refusal(config, backend):
        raise ValueError(refusal)
    scenario = load_links(config)  # the world or links file: a bad one fails here, first
    if backend == "inprocess":  # every peer in this process: refused with an estimate, not OOM-killed
        check_memory(config, psutil.virtual_memory().available)
    module, name = config.spec.launch[backend].split(":")
    handle = getattr(importlib.import_module(module), name)(config, **options)
    if config.world is not None:
        replay_churn(handle, scenario)
    return handle
