"""Reading the JSON files the command line takes (plans, scenarios, networks, a run's records) with
one clear error each.

Only regular files are read (a FIFO, /dev/zero or a socket is refused before it is opened, so
nothing waits on it or reads forever), at most MAX_BYTES of them; JSON nested deeper than
MAX_DEPTH, integers of more than MAX_DIGITS digits and the non-standard constants NaN, Infinity
and numbers too big for a float (1e400) are refused, so no caller meets a RecursionError or a non-finite number it did not ask for.
"""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

from labkit.config import ConfigError
from labkit.config_checks import special_kind

MAX_BYTES = 256 << 20  # a plan or network of 512 devices is a few MB; a run's events.jsonl of a long run, ~100 MB
MAX_DEPTH = 64  # our files nest 5 deep at most
MAX_DIGITS = 300  # an integer beyond a float's range (1e308) is no count, size or seed


class JSONValueError(ValueError):
    """A JSON text labkit refuses: nested too deep, or a NaN / infinite number."""


def regular_file(path: str | Path, owner: str, what: str, max_bytes: int = MAX_BYTES) -> Path:
    """`path` if it is a regular file of at most `max_bytes`: FileNotFoundError when it is missing; one
    ConfigError naming `owner`.path and the file when it is a folder, a FIFO, a device or too big."""
    p = Path(path)
    try:
        info = p.stat()
    except FileNotFoundError:
        raise FileNotFoundError(f"{owner}.path={str(p)!r}: no such file (expected {what})") from None
    except OSError as err:
        raise ConfigError(owner, "path", str(p), f"{what}: a readable file ({err.strerror})") from None
    if stat.S_ISDIR(info.st_mode):
        raise ConfigError(owner, "path", str(p), f"{what}: a file, not a folder")
    if not stat.S_ISREG(info.st_mode):
        raise ConfigError(owner, "path", str(p), f"{what}: a regular file, not a {special_kind(p)}")
    if info.st_size > max_bytes:
        raise ConfigError(owner, "path", str(p), f"{what}: a file of at most {max_bytes >> 20} MiB "
                                                  f"(it has {info.st_size / 2**20:.0f} MiB)")
    return p


def parse_json(text: str, finite: bool = True) -> Any:
    """`json.loads(text)`, refusing nesting deeper than MAX_DEPTH and, when `finite` (every input
    file; a run's own records may hold a diverged run's NaN), NaN and infinite numbers
    (JSONValueError), besides json's own JSONDecodeError."""
    strict = {"parse_constant": _no_constant, "parse_float": _finite_float} if finite else {}
    try:
        value = json.loads(text, parse_int=_int, **strict)
    except RecursionError:
        raise JSONValueError(f"it nests deeper than {MAX_DEPTH} levels") from None
    _check_depth(value)
    return value


def _no_constant(name: str) -> float:
    raise JSONValueError(f"it holds {name}: numbers must be finite")


def _int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_DIGITS:
        raise JSONValueError(f"it holds an integer of {len(text.lstrip('-'))} digits: at most {MAX_DIGITS}")
    return int(text)


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise JSONValueError(f"it holds {text[:30]}, too big for a float: numbers must be finite")
    return value


def _check_depth(value: Any) -> None:
    """Raise JSONValueError if `value` nests deeper than MAX_DEPTH (iteratively: no recursion)."""
    todo = [(value, 1)]
    while todo:
        item, depth = todo.pop()
        if isinstance(item, (dict, list)):
            if depth > MAX_DEPTH:
                raise JSONValueError(f"it nests deeper than {MAX_DEPTH} levels")
            todo.extend((v, depth + 1) for v in (item.values() if isinstance(item, dict) else item))


def read_json(path: str | Path, owner: str, what: str, finite: bool = True) -> Any:
    """The JSON value in the file `path` (`what` it should be, e.g. "a plan.json"): FileNotFoundError when
    it is missing; one ConfigError naming `owner`.path and the file when it is not a regular file of at
    most MAX_BYTES, unreadable, not UTF-8, not JSON, nested too deep or (when `finite`) holding NaN or inf."""
    p = regular_file(path, owner, what)
    try:
        with open(p, "rb") as f:
            data = f.read(MAX_BYTES + 1)
        if len(data) > MAX_BYTES:
            raise ConfigError(owner, "path", str(p), f"{what}: a file of at most {MAX_BYTES >> 20} MiB")
        return parse_json(data.decode("utf-8"), finite)
    except FileNotFoundError:
        raise FileNotFoundError(f"{owner}.path={str(p)!r}: no such file (expected {what})") from None
    except OSError as err:
        raise ConfigError(owner, "path", str(p), f"{what}: a readable file ({err.strerror})") from None
    except UnicodeDecodeError as err:
        raise ConfigError(owner, "path", str(p), f"{what}: UTF-8 text (byte {err.start} is not UTF-8)") from None
    except json.JSONDecodeError as err:
        raise ConfigError(owner, "path", str(p), f"{what}: valid JSON ({err.msg} at line {err.lineno} "
                                                  f"column {err.colno})") from None
    except JSONValueError as err:
        raise ConfigError(owner, "path", str(p), f"{what}: plain JSON ({err})") from None
