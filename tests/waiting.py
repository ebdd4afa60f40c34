"""The one polling helper, for conditions no run event marks (a file appearing, a process back).

Runs are waited on with their own `run.wait_for(step=..., event=...)`, never with this."""

from __future__ import annotations

import time
from collections.abc import Callable

POLL_SECONDS = 0.05


def wait_until(predicate: Callable[[], bool], timeout: float, what: str, seen: Callable[[], object] | None = None) -> None:
    """Return once `predicate()` is true; fail the test naming `what` (and what `seen()` returns
    then, to show how it fell short) after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}" + (
            f"; seen: {seen()}" if seen is not None else "")
        time.sleep(POLL_SECONDS)
