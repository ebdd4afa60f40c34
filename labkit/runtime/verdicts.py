"""Carrying out a step boundary's verdicts on the membership: peers to evict, and peers whose
gradient sums no credit will come for, which drop them and serve on."""

from __future__ import annotations

from typing import TYPE_CHECKING

from labkit import events

if TYPE_CHECKING:
    from labkit.runtime.membership import Membership


def settle(members: Membership, evict: dict[str, str], drop: dict[str, str]) -> None:
    """Evict the peers in `evict` (one already gone has its credits withdrawn), and have those in
    `drop` drop their gradients (name -> why, each)."""
    for name, why in evict.items():
        if name in members.peers:
            members.evict(name, why)
        else:
            members.c.ledger.peer_lost(name)
    for name, why in drop.items():
        drop_gradients(members, name, why)


def drop_gradients(members: Membership, name: str, reason: str) -> None:
    """Peer `name` holds gradients no credit will come for: it drops them all (after whatever
    reached it first), its credits are recomputed, and it serves on (evicting it could empty its
    stage); evicted instead if it fails to drop them."""
    c = members.c
    with c.lock:
        peer = members.peers.get(name)
        if peer is None or c.closed:
            return
        try:
            peer.call("clear_gradients").result(timeout=c.cfg.peer_timeout)
        except Exception as exc:
            members.evict(name, f"{reason}, and dropping them failed: {type(exc).__name__}: {exc}")
            return
        lost = c.ledger.withdraw(name)
        c.emit(events.setting(c.clock(), name="gradients_dropped", value=f"{name}: {reason}; {lost} samples to recompute"))
