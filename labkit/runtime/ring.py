"""A ring all-reduce among the peers of one stage, over whatever carries a chunk to a neighbour.

Reduce-scatter, then all-gather: 2(N - 1) steps. At step t rank r sends chunk (r - t) mod N to its
right neighbour and takes chunk (r - t - 1) mod N from its left, which it adds (the first N - 1
steps) or copies (the last N - 1). Each peer ships 2(N - 1)/N of the payload, and every peer ends
with the same bits: each chunk is summed once, in one order, by the peer that completes it, then
copied. No process but the ring's own carries a tensor.

A chunk arrives in the receiver's `Mailbox` without queueing behind its work (the receiver's own
thread is inside the ring, waiting for it). A neighbour that dies ends the ring at once: a send to
it fails (`PeerDied`), and whoever sees a ring fail aborts the others' waits (`Mailbox.abort`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
import torch

IMMEDIATE = ("post", "abort")  # ring traffic: served at once, beside what the receiver's own thread runs (its ring)
Send = Callable[[int, torch.Tensor], Future]  # (step, chunk) -> answered once the neighbour holds it


class RingAborted(RuntimeError):
    """The ring could not complete: a neighbour died, a wait timed out, or it was aborted."""


class RingTimeout(RingAborted):
    """The left neighbour sent nothing within the timeout: it is the one to blame."""


class Mailbox:
    """Chunks sent to one peer, by (tag, step): what its ring waits on. Posting never waits.
    Tags are increasing integers (one ring at a time per peer): a chunk or an abort for a ring
    already finished here is dropped."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._chunks: dict[tuple[int, int], torch.Tensor] = {}
        self._aborted: dict[int, str] = {}  # tag -> why
        self._floor = 0  # rings below this tag are finished here
        self._closed: str | None = None

    def post(self, tag: int, step: int, chunk: torch.Tensor) -> None:
        """The left neighbour's chunk of step `step` of ring `tag`."""
        with self._cond:
            if self._closed is None and tag >= self._floor and tag not in self._aborted:
                self._chunks[tag, step] = chunk
                self._cond.notify_all()

    def abort(self, tag: int, why: str) -> None:
        """End every wait of ring `tag`, now and later, with `why`."""
        with self._cond:
            if tag >= self._floor:
                self._aborted[tag] = why
                self._chunks = {key: c for key, c in self._chunks.items() if key[0] != tag}
                self._cond.notify_all()

    def close(self, why: str) -> None:
        """The peer is gone: every wait fails with `why`."""
        with self._cond:
            self._closed = why
            self._chunks.clear()
            self._cond.notify_all()

    def take(self, tag: int, step: int, timeout: float) -> torch.Tensor:
        """The chunk of step `step` of ring `tag`, once it arrives; `RingAborted` if the ring is
        aborted, the mailbox closed, or nothing comes within `timeout` seconds."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while (tag, step) not in self._chunks:
                why = self._closed or self._aborted.get(tag)
                left = deadline - time.monotonic()
                if why is not None:
                    raise RingAborted(f"ring {tag}: {why}")
                if left <= 0:
                    raise RingTimeout(f"ring {tag}: no chunk from the left neighbour within {timeout:g} s")
                self._cond.wait(left)
            return self._chunks.pop((tag, step))

    def finish(self, tag: int) -> None:
        """Ring `tag` is over here: forget it and every earlier ring (leftovers, aborts)."""
        with self._cond:
            self._floor = max(self._floor, tag + 1)
            self._chunks = {key: c for key, c in self._chunks.items() if key[0] >= self._floor}
            self._aborted = {t: why for t, why in self._aborted.items() if t >= self._floor}


def deliver(mailbox: Mailbox, method: str, args: tuple, same_process: bool) -> None:
    """Serve ring traffic (`post`, `abort`) at once. A chunk from a peer of this process is copied:
    it is a view of its sender's buffer, which the sender changes as its ring goes on (one from
    the wire is already the receiver's own)."""
    if method == "post" and same_process:
        tag, step, chunk = args
        args = tag, step, chunk.clone()
    getattr(mailbox, method)(*args)


def ring_allreduce(flat: torch.Tensor, rank: int, n: int, tag: int, send: Send, mailbox: Mailbox,
                   timeout: float) -> torch.Tensor:
    """The sum of every ring member's `flat` (a 1-D tensor of the same length on each), as a new
    tensor; `flat` is not changed. `send` gets views of the result being built: a transport that
    does not copy them at once must copy them (`deliver`). Raises `RingAborted` if the ring breaks."""
    out = flat.clone()
    if n == 1:
        return out
    chunks = out.tensor_split(n)
    sent: list[Future] = []
    try:
        for step in range(2 * (n - 1)):
            sent.append(send(step, chunks[(rank - step) % n]))
            sent[-1].add_done_callback(lambda done: _abort_if_failed(done, mailbox, tag))
            got = mailbox.take(tag, step, timeout).to(out.device)
            target = chunks[(rank - step - 1) % n]
            if step < n - 1:
                target.add_(got)
            else:
                target.copy_(got)
        for done in sent:
            done.result(timeout)
    except RingAborted:
        raise
    except Exception as exc:  # the right neighbour died, or its link broke
        raise RingAborted(f"ring {tag}: the right neighbour failed: {type(exc).__name__}: {exc}") from exc
    finally:
        mailbox.finish(tag)
    return out


def _abort_if_failed(sent: Future, mailbox: Mailbox, tag: int) -> None:
    """A send failed (the right neighbour died): end this peer's own wait at once."""
    if (exc := sent.exception()) is not None:
        mailbox.abort(tag, f"the right neighbour failed: {type(exc).__name__}: {exc}")
