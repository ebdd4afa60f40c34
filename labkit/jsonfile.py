"""Reading the JSON files the command line takes (plans, scenarios) with one clear error each."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from labkit.config import ConfigError


def read_json(path: str | Path, owner: str, what: str) -> Any:
    """The JSON value in the file `path` (`what` it should be, e.g. "a plan.json"): FileNotFoundError when
    it is missing; one ConfigError naming `owner`.path and the file when it is a folder, unreadable, not
    UTF-8 or not JSON."""
    p = Path(path)
    if p.is_dir():
        raise ConfigError(owner, "path", str(p), f"{what}: a file, not a folder")
    try:
        return json.loads(p.read_bytes().decode("utf-8"))
    except FileNotFoundError:
        raise FileNotFoundError(f"{owner}.path={str(p)!r}: no such file (expected {what})") from None
    except OSError as err:
        raise ConfigError(owner, "path", str(p), f"{what}: a readable file ({err.strerror})") from None
    except UnicodeDecodeError as err:
        raise ConfigError(owner, "path", str(p), f"{what}: UTF-8 text (byte {err.start} is not UTF-8)") from None
    except json.JSONDecodeError as err:
        raise ConfigError(owner, "path", str(p), f"{what}: valid JSON ({err.msg} at line {err.lineno} "
                                                  f"column {err.colno})") from None
