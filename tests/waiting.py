"""The one polling helper, for conditions no run event marks (a file appearing, a process back).

Runs are waited on with their own `run.wait_for(step=..., event=...)`, never with this."""

from __future__ import annotations

import time
from collections.abc import Callable

POLL_SECONDS = 0.05


def wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    """Return once `predicate()` is true; fail the test naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        time.sleep(POLL_SECONDS)
