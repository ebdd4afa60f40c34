"""The ring all-reduce a stage's peers run among themselves (labkit/runtime/ring.py), over an
in-memory transport: threads for peers, each neighbour's mailbox reached directly."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future

import pytest
import torch

from labkit.runtime.peer import PeerDied
from labkit.runtime.ring import Mailbox, RingAborted, RingTimeout, deliver, ring_allreduce


def _ring(data: list[torch.Tensor], dead: int | None = None, timeout: float = 5.0) -> list[torch.Tensor | BaseException]:
    """Run the ring over `data` (one tensor a peer); peer `dead` never takes part, and a send to
    it fails as a send to a dead process does."""
    n = len(data)
    boxes = [Mailbox() for _ in range(n)]
    out: list[torch.Tensor | BaseException] = [RuntimeError("did not run")] * n

    def send(rank: int):
        def to_right(step: int, chunk: torch.Tensor) -> Future:
            done: Future = Future()
            right = (rank + 1) % n
            if right == dead:
                done.set_exception(PeerDied(f"peer {right}"))
            else:
                deliver(boxes[right], "post", (7, step, chunk), same_process=True)
                done.set_result(None)
            return done
        return to_right

    def run(rank: int) -> None:
        try:
            out[rank] = ring_allreduce(data[rank], rank, n, 7, send(rank), boxes[rank], timeout)
        except BaseException as exc:
            out[rank] = exc

    threads = [threading.Thread(target=run, args=(r,)) for r in range(n) if r != dead]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return out


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 8])
def test_every_peer_ends_with_the_same_bits_of_the_exact_sum(n: int) -> None:
    data = [torch.randn(1001, dtype=torch.float64, generator=torch.Generator().manual_seed(r)) for r in range(n)]
    out = _ring(data)
    want = torch.stack(data).sum(0)
    assert all(torch.equal(out[0], o) for o in out), "every peer must hold identical bits"
    assert torch.allclose(out[0], want, rtol=0, atol=1e-12)
    assert all(not torch.equal(d, out[0]) for d in data) or n == 1


def test_a_dead_right_neighbour_ends_the_ring_at_once_and_a_silent_one_is_blamed_by_timeout() -> None:
    data = [torch.ones(12) for _ in range(3)]
    start = time.monotonic()
    out = _ring(data, dead=2, timeout=1.0)
    assert isinstance(out[1], RingAborted) and "right neighbour failed" in str(out[1])  # its send to 2 failed
    assert isinstance(out[0], RingTimeout), out[0]  # 2 never sent to 0: 0 blames its left neighbour
    assert time.monotonic() - start < 10


def test_an_abort_ends_a_wait_and_a_finished_ring_takes_no_late_chunk() -> None:
    box = Mailbox()
    waiter: list[BaseException] = []
    thread = threading.Thread(target=lambda: waiter.append(pytest.raises(RingAborted, box.take, 3, 0, 30).value))
    thread.start()
    box.abort(3, "a peer of the stage died")
    thread.join(5)
    assert "a peer of the stage died" in str(waiter[0])
    box.finish(3)
    box.post(3, 1, torch.ones(1))  # a neighbour's chunk of the finished ring, arriving late
    box.post(4, 0, torch.zeros(1))
    assert torch.equal(box.take(4, 0, 1), torch.zeros(1))
    with pytest.raises(RingTimeout):
        box.take(3, 1, 0.05)
