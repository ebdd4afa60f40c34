"""The files a run leaves: a run directory that belongs to one run, and files written whole.

A run never writes into a directory holding another run's files (`claim`), so a checkpoint always
sits beside the config and events of the run that wrote it. Every file goes to a temporary name
beside it and is renamed into place (`write_atomic`): a reader never sees half a file, and a failed
write leaves no temporary file behind.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import Any

RUN_FILES = ("config.json", "events.jsonl", "summary.json", "checkpoint.pt")  # what a run writes in its directory


def claim(run_dir: Path) -> Path:
    """Make `run_dir` this run's directory (created if missing) and create its empty event log,
    exclusively, so that two runs starting at once cannot share it; refuse a file or a directory
    that holds a run's files."""
    if run_dir.exists() and not run_dir.is_dir():
        raise NotADirectoryError(f"run_dir {str(run_dir)!r} is a file: give a directory for the run's files")
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
    return run_dir


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
