"""Moving a peer to another stage: on demand (`move_peer`) and by Algorithm 2 (`rebalance`).

A move takes the peer out of its stage under the run's lock, in the same hold as the checks (and
Algorithm 2's choice) that named it, so no fault or other verb can take it in between; it then
starts on its new stage without the lock, so a joiner's start (a world's download) holds up no step.
"""

from __future__ import annotations

from dataclasses import dataclass

from labkit import events
from labkit.runtime.membership import Membership
from labkit.runtime.ports import RunEnded
from labkit.swarm.rebalance import choose_move


@dataclass(frozen=True)
class _Left:
    """A peer taken out of its stage for a move: what its arrival (or loss) reports."""

    name: str
    stage: int
    place: str  # its place in a world: the first name of its line
    lost: int  # samples credited to it, back to the ledger
    at: float  # when it left, on the run's clock


def move_peer(m: Membership, name: str, stage: int) -> str:
    """Move peer `name` to `stage`: it stops serving its stage, whose un-synced gradients it held are recomputed
    elsewhere, and serves `stage` with its state from a neighbour, under a new name (returned), in its old place
    in a world."""
    with m.c.lock:
        left = _leave(m, name, stage)
    return _arrive(m, left, stage)


def rebalance(m: Membership) -> str | None:
    """One round of Algorithm 2 over the live peers' queue lengths; the new name if a peer moved."""
    with m.c.lock:
        m.c.live_or_raise("rebalance")
        move = choose_move({p.name: (p.stage, p.queue_length) for p in m.peers.values()}, m.c.cfg.stages)
        if move is None:
            return None
        left = _leave(m, move.peer, move.target)
    return _arrive(m, left, move.target)


def rebalance_rounds(m: Membership) -> None:
    """Algorithm 2 every `rebalance_period` s of the run's clock, as the simulator's rounds (a move delays none),
    until the run stops; a round whose moved peer failed to start (reported lost) is said so, and the next goes on."""
    c, period = m.c, m.c.cfg.rebalance_period
    while not c.stopped.wait(period - c.clock() % period):
        try:
            rebalance(m)
        except RunEnded:
            return
        except Exception as exc:
            c.emit(events.setting(c.clock(), name="rebalance_failed", value=f"{type(exc).__name__}: {exc}"))


def _leave(m: Membership, name: str, stage: int) -> _Left:
    """Check the move and take the peer out of its stage (lock held); one clear error if it is not allowed."""
    peer = m.live_peer(name, "move_peer")
    if not (isinstance(stage, int) and 0 <= stage < m.c.cfg.stages) or stage == peer.stage:
        raise ValueError(f"stage={stage!r} is not allowed: another stage in [0, {m.c.cfg.stages - 1}]")
    if len(m.live(peer.stage)) < 2:
        raise ValueError(f"moving {name} would leave stage {peer.stage} without peers")
    place = m.emulates.get(name, name)
    _, lost = m.remove(name)
    m.size -= 1  # add_peer adds it back
    return _Left(name, peer.stage, place, lost, m.c.clock())


def _arrive(m: Membership, left: _Left, stage: int) -> str:
    """Start the peer that left on `stage` (no lock held); a start that fails loses it, and says so."""
    c = m.c
    try:
        new = m.add_peer(stage, emulates=left.place)
    except Exception as exc:  # it left its stage, never reached the other: lost, and said so (unless the run ended)
        if not isinstance(exc, RunEnded):
            c.emit(events.peer(c.clock(), peer=left.name, stage=left.stage, state="killed", queue=0)
                   | {"lost_samples": left.lost,
                      "reason": f"moved to stage {stage}, where it failed to start: {exc!r}"})
        raise
    c.emit(events.peer(c.clock(), peer=left.name, stage=left.stage, state="moved", queue=0)
           | {"to": new, "to_stage": stage, "lost_samples": left.lost, "place": left.place, "left_at": left.at})
    return new
