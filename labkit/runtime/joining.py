"""Where a peer joining mid-run gets its state: from a live neighbour of its stage, worker to
worker, or from the newest checkpoint when the stage has none or the download fails; and how it
catches up when a step was committed while it started."""

from __future__ import annotations

import threading
import time

from labkit.runtime.ports import PeerFactory, PeerHandle
from labkit.runtime.shards import Checkpoints


def start_joiner(factory: PeerFactory, checkpoints: Checkpoints, name: str, stage: int, neighbours: list[PeerHandle],
                 *, running: bool, emulates: str | None, at_least: float, stopped: threading.Event
                 ) -> tuple[PeerHandle, bool]:
    """Start peer `name` of `stage` from the first of `neighbours`, or the newest checkpoint's
    shard, taking `at_least` seconds (a world's state download: a faster real start waits out the
    rest, unless the run stops); with whether it fell back to the checkpoint after a download
    failed (the neighbour or its worker died)."""
    began, fell_back = time.monotonic(), bool(neighbours)
    peer = None
    if neighbours:
        try:
            peer, fell_back = factory.start_peer(name, stage, None, source=neighbours[0], delay=0.0, running=running,
                                                 emulates=emulates), False
        except Exception:  # the joiner starts from the checkpoint, then catches up
            pass
    if peer is None:
        peer = factory.start_peer(name, stage, checkpoints.latest.shard(stage), source=None, delay=0.0,
                                  running=running, emulates=emulates)
    stopped.wait(began + at_least - time.monotonic())
    return peer, fell_back


def catch_up(peer: PeerHandle, stage: int, live: list[PeerHandle], checkpoints: Checkpoints, timeout: float) -> None:
    """Bring a joiner to the committed state: the first of `live`'s, or (none) the newest
    checkpoint's, which the run goes back to."""
    done = (peer.call("copy_from", live[0].contact) if live else
            peer.call("restore", checkpoints.latest.shard(stage), checkpoints.latest.schedule.cfg))
    done.result(timeout)
