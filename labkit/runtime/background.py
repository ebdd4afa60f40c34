"""Work on daemon threads, for calls that may never return (a silent socket, a dead actor).

`concurrent.futures.ThreadPoolExecutor` joins its threads when the interpreter exits, so one call
stuck forever keeps the process alive after its last line (a test session that never ends). A
daemon thread dies with the process instead.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from typing import Any


def in_background(fn: Callable[..., Any], *args: Any, name: str = "labkit-background") -> Future:
    """Run `fn(*args)` on a new daemon thread; the future holds its result or its exception."""
    out: Future = Future()

    def work() -> None:
        if not out.set_running_or_notify_cancel():
            return
        try:
            out.set_result(fn(*args))
        except BaseException as exc:
            out.set_exception(exc)

    threading.Thread(target=work, name=name, daemon=True).start()
    return out


def settle(out: Future, *, result: Any = None, exc: BaseException | None = None) -> None:
    """Resolve `out` unless it is resolved or cancelled already (a crash or a timed-out caller
    may have settled it first)."""
    try:
        if exc is not None:
            out.set_exception(exc)
        else:
            out.set_result(result)
    except InvalidStateError:
        pass
