"""Signals while a command follows a run: the first SIGINT (Ctrl-C) or SIGTERM (`docker stop`,
Slurm, systemd) asks for a clean stop; later ones only say it is under way. No traceback, no run
lost: the command stops the run at its next step boundary, which leaves a checkpoint and a summary."""

from __future__ import annotations

import signal
import sys
import threading
from types import FrameType, TracebackType

NAMES = {signal.SIGINT: "Ctrl-C (SIGINT)", signal.SIGTERM: "SIGTERM"}


class Interrupts:
    """Within `with Interrupts() as interrupts:`, SIGINT and SIGTERM set `interrupts.received`
    instead of ending the process; the caller polls it and stops its run. Outside the main thread
    (where handlers cannot be installed) it changes nothing."""

    def __init__(self) -> None:
        self.received: signal.Signals | None = None
        self._previous: dict[signal.Signals, object] = {}

    @property
    def exit_code(self) -> int:
        """The shell's code for a process ended by the signal received: 128 + its number."""
        return 128 + int(self.received) if self.received else 0

    def __enter__(self) -> Interrupts:
        if threading.current_thread() is threading.main_thread():
            for sig in NAMES:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        """Restore the previous handlers; once interrupted, the command is on its way out and
        ignores further presses instead (one more would end it with a traceback at exit)."""
        for sig, handler in self._previous.items():
            signal.signal(sig, signal.SIG_IGN if self.received else handler)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.received is None:
            self.received = signal.Signals(signum)
            print(f"\nlabkit: {NAMES[self.received]}: stopping the run at its next step boundary, then saving its "
                  f"checkpoint and summary", file=sys.stderr, flush=True)
        else:
            print(f"labkit: {NAMES[signal.Signals(signum)]} again: still stopping; the checkpoint is on its way",
                  file=sys.stderr, flush=True)
