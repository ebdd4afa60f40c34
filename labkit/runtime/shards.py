"""Periodic checkpoints of a SWARM run, written by its peers (a shard a stage), and what a rollback
reads.

Every `RunConfig.checkpoint_every` steps, at a boundary where every peer of a stage holds the same
state (DiLoCo: an outer step), the first live peer of each stage writes its stage's state to
`<folder>/step-<n>/stage-<s>.pt` (on its own thread: its other requests wait for the write;
`benchmarks/checkpoint_cost.py` measures what that costs a step).
Once every shard is written the checkpoint is complete (`manifest.json`) and becomes the one a
rollback goes to; the one before is then deleted. No tensor passes through the coordinator, except
at the start (the initial states it holds anyway) and where the layer split changes (the re-cut
states it holds then). The folder must be one every peer's machine reaches.
"""

from __future__ import annotations

import copy
import shutil
import tempfile
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from labkit.config import RunConfig
from labkit.runtime.checkpoint import MANIFEST, SHARD, load_tensors
from labkit.runtime.files import write_atomic, write_json
from labkit.runtime.ports import PeerHandle
from labkit.swarm.sync import SyncSchedule


def checkpoint_folder(run_dir: str | Path | None) -> tuple[Path, Callable[[], None]]:
    """Where a run's periodic checkpoints go (`checkpoints/` in its run directory, else a temporary
    folder), and what removes the folder once the run is over (its record is then `checkpoint.pt`)."""
    folder = Path(run_dir) / "checkpoints" if run_dir is not None else Path(tempfile.mkdtemp(prefix="labkit-ckpt-"))
    return folder, lambda: shutil.rmtree(folder, ignore_errors=True)


def save_shard(path: str | Path, state: dict[str, Any]) -> None:
    """Write one stage's state (atomically: a reader never sees half a shard)."""
    write_atomic(path, lambda tmp: torch.save(state, tmp), "checkpoint shard")


def stage_state(state: dict[str, Any] | str | Path) -> dict[str, Any]:
    """A stage's state: `state` itself, or the shard file it names (tensors and plain data only)."""
    if isinstance(state, dict):
        return state
    return load_tensors(state)


@dataclass(frozen=True)
class Kept:
    """A complete checkpoint: the step it holds, its folder, and the coordinator's books then."""

    step: int
    folder: Path
    cfg: RunConfig
    schedule: SyncSchedule

    def shard(self, stage: int) -> str:
        return str(self.folder / SHARD.format(stage))


class Checkpoints:
    """The checkpoints of one run under `root`: the newest complete one (`latest`), and one being
    written; `emit(step)` is called when one completes."""

    def __init__(self, root: Path, every: int, timeout: float, emit: Callable[[int], None]) -> None:
        self.root, self.every, self.timeout, self._emit = root, every, timeout, emit
        self.latest: Kept | None = None
        self._lock = threading.Lock()
        self._since = 0  # the step of the last checkpoint started
        self._writing: threading.Thread | None = None

    def write_now(self, step: int, cfg: RunConfig, schedule: SyncSchedule, states: list[dict[str, Any]]) -> None:
        """A checkpoint of `states`, written here (the start, and a re-cut layer split)."""
        kept = self._kept(step, cfg, schedule)
        for stage, state in enumerate(states):
            save_shard(kept.shard(stage), state)
        self._complete(kept)

    def rewound(self, step: int) -> None:
        """The run went back to step `step`: the next checkpoint is due `every` steps after it."""
        self._since = step

    def due(self, step: int) -> bool:
        return bool(self.every) and step - self._since >= self.every

    def start(self, step: int, cfg: RunConfig, schedule: SyncSchedule, writers: list[PeerHandle]) -> None:
        """Have `writers` (one live peer a stage, in stage order) write their shards of step
        `step`; the checkpoint completes in the background once every shard is written."""
        kept = self._kept(step, cfg, schedule)
        futures = [p.call("save_shard", kept.shard(stage)) for stage, p in enumerate(writers)]
        self._writing = threading.Thread(target=self._wait, args=(kept, futures), name="labkit-checkpoint", daemon=True)
        self._writing.start()

    def settle(self) -> Kept:
        """The newest complete checkpoint, once the one being written (if any) completed or failed."""
        if self._writing is not None:
            self._writing.join()
        return self.latest

    def _kept(self, step: int, cfg: RunConfig, schedule: SyncSchedule) -> Kept:
        self._since = step
        folder = self.root / f"step-{step:07d}"
        folder.mkdir(parents=True, exist_ok=True)
        return Kept(step, folder, cfg, copy.copy(schedule))

    def _wait(self, kept: Kept, futures: list[Future]) -> None:
        try:
            for future in futures:
                future.result(self.timeout)
        except Exception:  # a writer died: this checkpoint is incomplete, the last one stays
            shutil.rmtree(kept.folder, ignore_errors=True)
            return
        self._complete(kept)

    def _complete(self, kept: Kept) -> None:
        write_json(kept.folder / MANIFEST, {"step": kept.step, "config": kept.cfg.to_dict(),
                                                   "stages": kept.cfg.stages}, "checkpoint manifest")
        with self._lock:
            old = self.latest
            if old is not None and old.step > kept.step:  # a rollback started an older one meanwhile
                return
            self.latest = kept
        if old is not None and old.folder != kept.folder:
            shutil.rmtree(old.folder, ignore_errors=True)
        self._emit(kept.step)
