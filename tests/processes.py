"""Ending what a test left behind: its runs, the suite's reaper and the browser tests' server."""

from __future__ import annotations

from typing import TYPE_CHECKING

import psutil

if TYPE_CHECKING:
    from labkit.runtime.handle import RunHandle

REAP_SECONDS = 60  # how long a leaked run may take to stop before its processes are killed


def stop_runs(launched: list[RunHandle]) -> None:
    """Stop the runs of `launched` still running and wait for each to end."""
    for run in launched:
        if not run.done:
            run.stop()
    for run in launched:
        run.wait(REAP_SECONDS)


def reap(processes: list[psutil.Process], grace: float = 5.0) -> None:
    """Terminate `processes` and their descendants; kill what is still there after `grace` s."""
    tree = []
    for p in processes:
        try:
            tree += [p, *p.children(recursive=True)]
        except psutil.Error:
            continue
    for p in tree:
        try:
            p.terminate()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(tree, timeout=grace)
    for p in alive:
        try:
            p.kill()
        except psutil.Error:
            pass
