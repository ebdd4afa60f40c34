"""The files a run leaves: a run directory that belongs to one run, and files written whole.

A run never writes into a directory holding another run's files (`claim`), so a checkpoint always
sits beside the config and events of the run that wrote it; a claim that fails half way (a full
disk) takes back what it made, so the directory stays free for the next run. Plans and
simulations are refused an output folder that holds any such records (`records_in`). Every file
goes to a temporary name beside it and is renamed into place (`write_atomic`): a reader never sees
half a file, and a failed write leaves no temporary file behind.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import Any

RUN_FILES = ("config.json", "events.jsonl", "summary.json", "checkpoint.pt")  # what a run writes in its directory
SIM_SERIES = "throughput.json"  # `labkit simulate` writes achieved and optimal samples/s over time here
RECORD_FILES = (*RUN_FILES, "plan.json", SIM_SERIES)  # a run's, a plan's and a simulation's records


def claim(run_dir: Path, config: dict[str, Any]) -> Path:
    """Make `run_dir` this run's directory (created if missing), create its empty event log
    exclusively, so that two runs starting at once cannot share it, and write `config` (JSON) as
    config.json; refuse a file or a directory that holds a run's files. If writing fails (a full
    disk), the log and the directory made here are removed again before the error is raised."""
    if run_dir.exists() and not run_dir.is_dir():
        raise NotADirectoryError(f"run_dir {str(run_dir)!r} is a file: give a directory for the run's files")
    made = not run_dir.exists()
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a file on its path, no permission, ...
        raise NotADirectoryError(f"run_dir {str(run_dir)!r} cannot be made: {exc.strerror} "
                                 f"({exc.filename}); give a directory you can write") from None
    held = [name for name in RUN_FILES if (run_dir / name).exists()]
    if held:
        raise _taken(run_dir, held)
    try:
        (run_dir / "events.jsonl").open("x").close()
    except FileExistsError:
        raise _taken(run_dir, ["events.jsonl"]) from None
    try:
        write_json(run_dir / "config.json", config, "config")
    except OSError:
        _release(run_dir, made)
        raise
    return run_dir


def _release(run_dir: Path, made: bool) -> None:
    """Undo a claim: remove the event log it created, and the directory if the claim made it."""
    with suppress(OSError):
        (run_dir / "events.jsonl").unlink()
    if made:
        with suppress(OSError):
            run_dir.rmdir()


def records_in(folder: Path) -> list[str]:
    """The records of a run, plan or simulation that `folder` holds (none if it is new or empty)."""
    return [name for name in RECORD_FILES if (folder / name).exists()] if folder.is_dir() else []


def _taken(run_dir: Path, held: list[str]) -> FileExistsError:
    """The error for a run directory that holds another run: what to do instead."""
    return FileExistsError(f"run_dir {str(run_dir)!r} holds another run ({', '.join(held)}): choose another "
                           f"directory, or continue that run in a new one with --resume {run_dir / 'checkpoint.pt'}")


def write_atomic(path: str | Path, write: Callable[[Path], None], what: str) -> Path:
    """Write `path` with `write(temporary path)` and rename it into place; on failure remove the
    temporary file and raise one OSError naming `what`, the path and the cause."""
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"{what} path {str(path)!r} is a directory: give the path of a file")
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:12]}.tmp")  # its own: two writers of one path both finish
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write(tmp)
        tmp.replace(path)
    except Exception as exc:
        with suppress(OSError):
            tmp.unlink()
        raise OSError(f"{what} {str(path)!r} could not be written: {type(exc).__name__}: {exc}") from exc
    return path


def write_json(path: str | Path, data: Any, what: str) -> Path:
    """Write `data` as indented JSON to `path`, atomically (see `write_atomic`)."""
    text = json.dumps(data, indent=2)
    return write_atomic(path, lambda tmp: tmp.write_text(text), what)
