"""A cleanly closed peer serves what was queued before, then fails every later request at once
(a trainer with a stale handle on a rebuilt peer once waited forever on its request)."""

from __future__ import annotations

import pytest

from labkit.config import ModelConfig, RunConfig
from labkit.model.assembly import initial_states, stage_module
from labkit.runtime.peer import PeerDied, StagePeer


def test_requests_after_close_fail_at_once() -> None:
    cfg = RunConfig(model=ModelConfig(size="nano"), stages=1, peers=1)
    peer = StagePeer("s0p0", 0, stage_module(cfg, 0, initial_states(cfg)[0]["params"]), cfg)
    peer.set_delay(0.2)
    before = peer.call("echo", "queued before close")
    peer.close()
    assert before.result(timeout=5) == "queued before close"
    after = peer.call("echo", "sent after close")
    with pytest.raises(PeerDied):
        after.result(timeout=5)
