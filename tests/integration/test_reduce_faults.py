"""A peer that dies while its stage reduces: the ring breaks at once, no peer steps, the dead
peer's samples are recomputed and the survivors reduce again; training still equals the
single-process loop (float64). The death is forced from inside the ring: a fault injection
wraps the victim's link to its right neighbour and kills the victim right after its first chunk
of a ring (real churn does not wait for the boundary to end)."""

from __future__ import annotations

import threading
from typing import Any

import labkit
from labkit.config import ModelConfig, RunConfig
from labkit.data import WindowSampler, load_corpus
from labkit.model import assemble
from labkit.runtime.reference import train_reference


def _die_after_first_chunk(peer: Any, died: threading.Event) -> None:
    """Make the in-process `peer` crash right after it sends the first chunk of its next ring."""
    dial = peer.dial

    class DyingLink:
        def __init__(self, contact: Any) -> None:
            self.link = dial(contact)

        def call(self, method: str, *args: Any) -> Any:
            sent = self.link.call(method, *args)
            if method == "post" and not died.is_set():
                died.set()
                peer.kill()
            return sent

    peer.dial = DyingLink


def test_a_peer_dying_mid_reduce_is_survived_exactly(small_run: RunConfig) -> None:
    cfg = small_run.replace(model=ModelConfig(size="nano", seq_len=32, dtype="float64"), stages=2, peers=(3, 2),
                            steps=6)
    run = labkit.launch(cfg)
    run.wait_for(step=2)
    died = threading.Event()
    _die_after_first_chunk(run._core.c.members.peers["s0p1"], died)  # noqa: SLF001 - the fault injection's hook
    summary = run.wait(120)
    assert summary["status"] == "finished", summary
    assert died.is_set(), "the victim never reduced again: the test proved nothing"
    killed, = [e for e in run.events.history("peer") if e["state"] == "killed"]
    assert killed["peer"] == "s0p1" and "prepare failed at the step boundary" in killed["reason"], killed
    assert all(s["stage_samples"] == [cfg.global_batch] * 2 for s in run.events.history("step"))
    assert [e["step"] for e in run.events.history("step")] == list(range(1, cfg.steps + 1)), "no step twice"
    model, _ = train_reference(cfg, WindowSampler(load_corpus(cfg.data).train, cfg.model.seq_len, cfg.seed))
    got = assemble([s["params"] for s in run.snapshot().result().stages])
    worst = max(float((got[k] - v).abs().max()) for k, v in model.state_dict().items())
    assert worst <= 1e-10, f"max |run - reference| = {worst:.3g}"
