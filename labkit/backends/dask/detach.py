"""A Dask preload for an embedded cluster's workers: each leads a process group of its own.

A terminal's Ctrl-C signals its whole foreground process group, and a notebook's "interrupt
kernel" the kernel's: both would otherwise reach the workers holding the run's peers and kill
them. Detached, the signal reaches only the process holding the run's handle, which stops the run
at a step boundary and then closes the cluster. A worker still ends with that process (its nanny
lives there).
"""

from __future__ import annotations

import os
from typing import Any


def dask_setup(worker: Any) -> None:
    """Called by Dask in each new worker process, before any actor starts there."""
    os.setpgrp()
