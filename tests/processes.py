"""Ending the processes a test left behind: the suite's reaper and the browser tests' server."""

from __future__ import annotations

import psutil


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
