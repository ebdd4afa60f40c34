"""A stage that loses every peer rolls the whole run back to its last checkpoint, and the run then
goes on exactly as it went on from there the first time (float64): shared by the in-process and
the Dask test."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import labkit
from labkit.config import ModelConfig, RunConfig
from labkit.data import WindowSampler, load_corpus
from labkit.model import assemble
from labkit.runtime.reference import train_reference
from tests.waiting import wait_until

SLOW_WRITE = 3.0  # seconds a slowed shard write waits first: room to kill its writer mid-write


def rollback_config(small_run: RunConfig, checkpoint_every: int = 2) -> RunConfig:
    """2 stages, stage 1 with one peer (its kill empties the stage), a checkpoint every `checkpoint_every` steps."""
    return small_run.replace(model=ModelConfig(size="nano", seq_len=32, dtype="float64"), stages=2, peers=(2, 1),
                             steps=8, checkpoint_every=checkpoint_every, eval_every=0)


def replay_config(small_run: RunConfig) -> RunConfig:
    """`rollback_config` with a checkpoint every 4 steps: a kill after step 5 goes back to step 4
    even if it lands up to 3 steps late (every 2, a kill 60-100 ms late on Dask landed after step
    6's checkpoint in 2 of 25 tries, and the run went back from 6 to 6: nothing to replay)."""
    return rollback_config(small_run, 4)


def start_checkpoint_config(small_run: RunConfig) -> RunConfig:
    """`rollback_config` whose first periodic checkpoint (step 6) comes long after a kill at step 1:
    the run goes back to its start, whose checkpoint holds no optimizer state."""
    return rollback_config(small_run, 6)


def slow_shard_writes(step: int = 4, seconds: float = SLOW_WRITE, dask_worker: Any = None) -> None:
    """In this process (a Dask worker too: `client.run`), each peer's first write of a shard of the
    checkpoint of `step` waits `seconds` first (a write of it again, after a rollback, does not),
    until `unslow_shard_writes`."""
    import time

    import labkit.runtime.stage_step as stage_step

    write, folder, seen = stage_step.save_shard, f"step-{step:07d}", set()

    def slow(path: str, state: dict[str, Any]) -> None:
        if folder in Path(path).parts and path not in seen:
            seen.add(path)
            time.sleep(seconds)
        write(path, state)

    slow.original = write  # type: ignore[attr-defined]
    stage_step.save_shard = slow


def unslow_shard_writes(dask_worker: Any = None) -> None:
    """Undo `slow_shard_writes` in this process (nothing if it was not slowed)."""
    import labkit.runtime.stage_step as stage_step

    stage_step.save_shard = getattr(stage_step.save_shard, "original", stage_step.save_shard)


def check_kill_during_a_checkpoint(run: labkit.RunHandle, cfg: RunConfig, run_dir: Path,
                                   kill_stage1: Callable[[], None], timeout: float) -> dict[str, Any]:
    """Stage 1's only peer, slowed by `slow_shard_writes`, is killed while it writes its shard of
    the checkpoint of step 4: that checkpoint never completes (its folder goes, no `checkpoint`
    event names step 4), and the run, its stage 1 emptied, rolls back to the one of step 2 and
    ends exactly as `check_rollback`'s does."""
    folder = run_dir / "checkpoints" / "step-0000004"
    wait_until(folder.is_dir, timeout, "the checkpoint of step 4 to start")
    kill_stage1()
    return check_rollback(run, cfg, timeout, killed=True, to=2, never_kept=4)


def check_rollback(run: labkit.RunHandle, cfg: RunConfig, timeout: float, *, kill_after: int = 5,
                   killed: bool = False, to: int | None = None, never_kept: int | None = None) -> dict[str, Any]:
    """Kill stage 1's only peer after step `kill_after` (unless `killed` already), add one back, and check
    the rolled-back run: it went back to step `to` (if given), no checkpoint of step `never_kept`
    completed before the rollback, its final parameters equal single-process training's, and every step it took again
    repeats the loss it had the first time. Returns the rollback's {"from", "to", "reason"}."""
    if not killed:
        run.wait_for(step=kill_after, timeout=timeout)
        run.kill_peer("s1p0")
    paused = run.wait_for(event={"type": "run", "state": "paused"}, timeout=timeout)
    assert "add_peer(1) resumes the run from its checkpoint of step" in paused["reason"], paused
    run.add_peer(1)
    summary = run.wait(timeout)
    assert summary["status"] == "finished", summary
    final = [e["value"] for e in run.events.history("setting") if e["name"] == "final_state"]
    assert summary["steps"] == cfg.steps and not final, (summary["steps"], final)  # the peers' state, not a checkpoint's
    rollback, = [e["value"] for e in run.events.history("setting") if e["name"] == "rollback"]
    assert rollback["to"] % cfg.checkpoint_every == 0 and 0 <= rollback["to"] < rollback["from"], rollback
    assert to is None or rollback["to"] == to, rollback
    settings = [(e["name"], e["value"]) for e in run.events.history("setting")]
    kept = [value for name, value in settings[:settings.index(("rollback", rollback))] if name == "checkpoint"]
    assert never_kept not in kept, kept  # before the rollback: the steps taken again write their own
    first: dict[int, float] = {}
    for e in run.events.history("step"):  # a step taken again has the loss it had the first time
        if e["step"] in first:
            assert abs(e["loss"] - first[e["step"]]) <= 1e-10 * abs(first[e["step"]]), (e["step"], e["loss"])
        first.setdefault(e["step"], e["loss"])
    repeated = len(run.events.history("step")) - cfg.steps
    assert repeated == rollback["from"] - rollback["to"] > 0, (repeated, rollback)
    model, losses = train_reference(cfg, WindowSampler(load_corpus(cfg.data).train, cfg.model.seq_len, cfg.seed))
    off = {step: (loss, losses[step - 1]) for step, loss in first.items()
           if abs(loss - losses[step - 1]) > 1e-10 * abs(loss)}
    assert not off, f"steps whose loss differs from single-process training's (run, reference): {off}\n" + story(run)
    got = assemble([s["params"] for s in run.snapshot().result().stages])
    worst = {k: float((got[k] - v).abs().max()) for k, v in model.state_dict().items()}
    assert max(worst.values()) <= 1e-10, f"max |rolled-back run - reference| by tensor: {worst}\n{story(run)}"
    return rollback


def story(run: labkit.RunHandle) -> str:
    """The run's membership, settings and steps, one line each: what a failure message needs."""
    lines = []
    for e in run.events.history():
        if e["type"] in ("run", "setting", "peer", "step", "trainer") and e.get("state") != "alive":
            what = {k: v for k, v in e.items() if k not in ("type", "t", "boundary", "stage_samples")}
            lines.append(f"{e['t']:8.3f} {e['type']:8s} {what}")
    return "\n".join(lines)
