"""The size a run keeps through faults (`Membership.size`, what a Dask run's restarted workers
refill): a peer lost to a fault leaves the run short and one refill restores it; peers added,
killed or moved on request change the size or keep it, and a refill never overshoots it."""

from __future__ import annotations

import labkit
from labkit.config import RunConfig


def test_a_fault_leaves_the_run_short_until_one_refill_and_requests_set_its_size(small_run: RunConfig) -> None:
    run = labkit.launch(small_run.replace(stages=2, peers=2, steps=10_000))
    try:
        run.wait_for(step=1)
        members = run._core.c.members  # noqa: SLF001 - the faults a dead worker brings are forced here
        assert (members.size, members.short(), members.refill()) == (4, False, None)
        members.evict("s0p1", "its worker died")
        assert members.short() and len(members.peers) == 3
        refilled = members.refill()
        assert refilled is not None and members.size == 4 and not members.short(), (refilled, members.size)
        assert members.refill() is None  # a second one would overshoot
        run.kill_peer(refilled)  # on request: the run shrinks, and nothing refills it
        assert (members.size, members.short()) == (3, False)
        added = run.add_peer(1)
        assert (members.size, members.short()) == (4, False)
        run.move_peer(added, 0)
        assert (members.size, members.short(), len(members.peers)) == (4, False, 4)
        run.wait_for(step=run.state()["step"] + 1)
    finally:
        run.stop()
    assert run.wait(60)["status"] == "stopped"
