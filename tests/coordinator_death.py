"""The process holding a run's coordinator SIGKILLed mid-run, as a crash comes: what is left is
its run directory, with the periodic checkpoints written meanwhile (by SWARM's peers; by the run
shell for the other executors); `resume=<run directory>` goes on from the newest complete one,
exactly as the uninterrupted run (float64). Shared by the in-process tests and the Dask ones."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import labkit
from labkit import AtomConfig
from labkit.config import ModelConfig, RunConfig
from labkit.data import WindowSampler, load_corpus
from labkit.model import assemble
from labkit.runtime.reference import train_reference
from tests.waiting import wait_until

DRIVER = """
import json, sys
import labkit
from labkit.config import RunConfig
cfg = RunConfig.from_dict(json.loads(sys.argv[1]))
labkit.launch(cfg, backend=sys.argv[2], scheduler=sys.argv[3] or None, run_dir=sys.argv[4]).wait()
"""


def death_config(small_run: RunConfig, executor: str = "swarm") -> RunConfig:
    """`executor`'s run to kill: float64, a checkpoint every 2 steps, and steps enough to be killed
    (2 stages of 2 peers; ATOM: 2 replicas of the whole model)."""
    cfg = small_run.replace(model=ModelConfig(size="nano", seq_len=32, dtype="float64"), steps=14,
                            checkpoint_every=2, eval_every=0)
    if executor == "atom":
        return cfg.replace(microbatch=2, executor=AtomConfig(replicas=2, accumulation=2))
    return cfg.replace(stages=2, peers=2, executor=executor, **({"trainers": 2} if executor == "swarm" else {}))


def kill_the_driver(cfg: RunConfig, run_dir: Path, until: Callable[[], bool], what: str, backend: str = "inprocess",
                    scheduler: str | None = None, timeout: float = 240) -> None:
    """Start `cfg` in a driver process of its own (a session of its own), and SIGKILL that
    process's group once `until()` holds (`what` it waits for)."""
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, json.dumps(cfg.to_dict()), backend, scheduler or "",
                               str(run_dir)], start_new_session=True)
    try:
        wait_until(lambda: until() or driver.poll() is not None, timeout, what)
        assert driver.poll() is None, f"the driver ended before it was killed: exit {driver.returncode}"
        os.killpg(driver.pid, signal.SIGKILL)
    finally:
        driver.wait(60)


def kill_the_coordinator_and_resume(cfg: RunConfig, run_dir: Path, backend: str = "inprocess",
                                    scheduler: str | None = None, timeout: float = 240,
                                    after_kill: Callable[[], None] = lambda: None) -> int:
    """`kill_the_driver` once its peers completed the checkpoint of step 4, call `after_kill`,
    resume from the run directory in this process, and check the resumed run ends as
    single-process training does. Returns the step it resumed from."""
    kill_the_driver(cfg, run_dir, (run_dir / "checkpoints" / "step-0000004" / "manifest.json").exists,
                    "the driver's checkpoint of step 4", backend, scheduler, timeout)
    after_kill()
    resumed = labkit.launch(cfg, backend=backend, scheduler=scheduler, resume=run_dir)
    summary = resumed.wait(timeout)
    assert summary["status"] == "finished", summary
    first = resumed.events.history("step")[0]["step"]
    assert first >= 5 and first % cfg.checkpoint_every == 1, first  # went on after a complete checkpoint
    model, _ = train_reference(cfg, WindowSampler(load_corpus(cfg.data).train, cfg.model.seq_len, cfg.seed))
    got = assemble([s["params"] for s in resumed.snapshot().result().stages])
    worst = max(float((got[k] - v).abs().max()) for k, v in model.state_dict().items())
    assert worst <= 1e-10, f"max |resumed run - reference| = {worst:.3g}"
    return first - 1
