"""What every config dataclass checks on construction: one `ConfigError` naming the field, the
value and what is allowed. Pure Python, shared by labkit/config.py and labkit/executor_config.py."""

from __future__ import annotations

import math
import os
import stat


class ConfigError(ValueError):
    """A configuration value is not allowed; the message names the field, value and rule."""

    def __init__(self, owner: str, name: str, value: object, allowed: str) -> None:
        super().__init__(f"{owner}.{name}={value!r} is not allowed: {allowed}")
        self.field = name
        self.value = value
        self._parts = (owner, name, value, allowed)

    def __reduce__(self) -> tuple[type, tuple[str, str, object, str]]:
        """Pickled with its four parts (a Dask run raises it on a worker and again on the driver)."""
        return ConfigError, self._parts


def check(ok: bool, owner: str, name: str, value: object, allowed: str) -> None:
    """Raise `ConfigError` unless `ok`."""
    if not ok:
        raise ConfigError(owner, name, value, allowed)


def is_int(value: object) -> bool:
    """An int that is not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: object) -> bool:
    """A finite int or float that is not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def special_kind(path: str | os.PathLike[str]) -> str | None:
    """What `path` is, in words, when it exists and is neither a regular file nor a folder (a FIFO,
    a device, a socket: reading one waits or never ends); None otherwise."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return None
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    kinds = ((stat.S_ISFIFO, "FIFO (named pipe)"), (stat.S_ISCHR, "character device"),
             (stat.S_ISBLK, "block device"), (stat.S_ISSOCK, "socket"))
    return next((name for test, name in kinds if test(mode)), "special file")
