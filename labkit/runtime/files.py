"""The files a run leaves, written whole.

Every file goes to a temporary name beside it and is renamed into place (`write_atomic`): a
reader never sees half a file, and a failed write leaves no temporary file behind.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import Any


def write_atomic(path: str | Path, write: Callable[[Path], None], what: str) -> Path:
    """Write `path` with `write(temporary path)` and rename it into place; on failure remove the
    temporary file and raise one OSError naming `what`, the path and the cause."""
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"{what} path {str(path)!r} is a directory: give the path of a file")
    tmp = path.with_name(path.name + ".tmp")
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
