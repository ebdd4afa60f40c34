"""A stage that loses every peer rolls the whole run back to its last checkpoint, and the run then
goes on exactly as it went on from there the first time (float64): shared by the in-process and
the Dask test."""

from __future__ import annotations

from typing import Any

import labkit
from labkit.config import ModelConfig, RunConfig
from labkit.data import WindowSampler, load_corpus
from labkit.model import assemble
from labkit.runtime.reference import train_reference


def rollback_config(small_run: RunConfig) -> RunConfig:
    """2 stages, stage 1 with one peer (its kill empties the stage), a checkpoint every 2 steps."""
    return small_run.replace(model=ModelConfig(size="nano", seq_len=32, dtype="float64"), stages=2, peers=(2, 1),
                             steps=8, checkpoint_every=2, eval_every=0)


def check_rollback(run: labkit.RunHandle, cfg: RunConfig, timeout: float) -> dict[str, Any]:
    """Kill stage 1's only peer after step 5, add one back, and check the rolled-back run: its
    final parameters equal single-process training's, and every step it took again repeats the
    loss it had the first time. Returns the rollback's {"from", "to", "reason"}."""
    run.wait_for(step=5, timeout=timeout)
    run.kill_peer("s1p0")
    paused = run.wait_for(event={"type": "run", "state": "paused"}, timeout=timeout)
    assert "add_peer(1) resumes the run from its checkpoint of step" in paused["reason"], paused
    run.add_peer(1)
    summary = run.wait(timeout)
    assert summary["status"] == "finished", summary
    rollback, = [e["value"] for e in run.events.history("setting") if e["name"] == "rollback"]
    assert rollback["to"] % cfg.checkpoint_every == 0 and 2 <= rollback["to"] < rollback["from"], rollback
    first: dict[int, float] = {}
    for e in run.events.history("step"):  # a step taken again has the loss it had the first time
        if e["step"] in first:
            assert abs(e["loss"] - first[e["step"]]) <= 1e-10 * abs(first[e["step"]]), (e["step"], e["loss"])
        first.setdefault(e["step"], e["loss"])
    repeated = len(run.events.history("step")) - cfg.steps
    assert repeated == rollback["from"] - rollback["to"] > 0, (repeated, rollback)
    model, _ = train_reference(cfg, WindowSampler(load_corpus(cfg.data).train, cfg.model.seq_len, cfg.seed))
    got = assemble([s["params"] for s in run.snapshot().result().stages])
    worst = max(float((got[k] - v).abs().max()) for k, v in model.state_dict().items())
    assert worst <= 1e-10, f"max |rolled-back run - reference| = {worst:.3g}"
    return rollback
