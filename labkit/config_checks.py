"""What every config dataclass checks on construction: one `ConfigError` naming the field, the
value and what is allowed; and the `# ...` comment after each field, which the form and the CLI
show as its help. Pure Python, shared by labkit/config.py and every executor's config."""

from __future__ import annotations

import inspect
import io
import math
import os
import stat
import textwrap
import tokenize
from dataclasses import fields


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


def field_comments(cls: type) -> dict[str, str]:
    """The `# ...` comment after each dataclass field of `cls`, read from its source: the one
    place a field's meaning is written, so labels never drift from the configs."""
    names = {f.name for f in fields(cls)}
    source = textwrap.dedent(inspect.getsource(cls))
    comments: dict[str, str] = {}
    line: list[tokenize.TokenInfo] = []
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.NEWLINE:
            first, colon, last = (line[0], line[1], line[-1]) if len(line) > 2 else (None, None, None)
            if first and first.string in names and colon.string == ":" and last.type == tokenize.COMMENT:
                comments.setdefault(first.string, last.string.lstrip("#").strip())
            line = []
        elif tok.type == tokenize.NL and all(t.type == tokenize.COMMENT for t in line):
            line = []  # a comment on a line of its own belongs to no field
        elif tok.type not in (tokenize.NL, tokenize.INDENT, tokenize.DEDENT):
            line.append(tok)
    return comments
