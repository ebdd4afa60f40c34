"""Checkpoint at step k, restore, continue: the result equals the uninterrupted run."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import labkit
from labkit.config import ModelConfig, RunConfig, SyncConfig
from labkit.model import assemble
from tests.coordinator_death import death_config, kill_the_coordinator_and_resume


def _final_params(run: labkit.RunHandle) -> dict[str, torch.Tensor]:
    summary = run.wait(240)
    assert summary["status"] == "finished", summary
    return assemble([s["params"] for s in run.snapshot().result().stages])


@pytest.mark.parametrize(("stages", "peers", "trainers", "tol", "delayed"),
                         [(1, 1, 1, 0.0, False), (2, 2, 4, 1e-10, False), (1, 1, 1, 0.0, True)])
def test_resume_equals_uninterrupted(small_run: RunConfig, tmp_path: Path, stages: int, peers: int, trainers: int,
                                     tol: float, delayed: bool) -> None:
    cfg = small_run.replace(model=ModelConfig(size="nano", seq_len=32, dtype="float64"), stages=stages,
                            peers=peers, trainers=trainers, steps=6, delayed_updates=delayed)
    straight = _final_params(labkit.launch(cfg))

    first = labkit.launch(cfg)
    saved = first.checkpoint(tmp_path / "ckpt.pt").result(timeout=120)  # taken at the next step boundary
    first.stop()
    first.wait(120)
    step = torch.load(saved, weights_only=False)["step"]
    assert 1 <= step < cfg.steps

    resumed = labkit.launch(cfg, resume=saved)
    got = _final_params(resumed)
    assert resumed.events.history("step")[0]["step"] == step + 1
    worst = max(float((got[k] - straight[k]).abs().max()) for k in straight)
    assert worst <= tol, f"resumed run differs from the uninterrupted one by {worst:.3g}"


def test_resume_rejects_a_checkpoint_of_another_model(small_run: RunConfig, tmp_path: Path) -> None:
    run = labkit.launch(small_run.replace(steps=2))
    run.wait(120)
    other = small_run.replace(model=ModelConfig(size="tiny", seq_len=32))
    with pytest.raises(ValueError, match="holds model"):
        labkit.launch(other, resume=_checkpoint_of(run, tmp_path))


def _checkpoint_of(run: labkit.RunHandle, tmp_path: Path) -> Path:
    return run.checkpoint(tmp_path / "c.pt").result()


def test_checkpoints_asked_late_still_resolve(small_run: RunConfig, tmp_path: Path) -> None:
    """A checkpoint no step boundary will take (DiLoCo mid-round at the end, or after the run)
    resolves to the final state instead of hanging."""
    cfg = small_run.replace(steps=3, sync=SyncConfig(mode="diloco", inner_steps=10))
    run = labkit.launch(cfg)
    during = run.checkpoint(tmp_path / "during.pt")  # the run ends before any outer boundary
    run.wait(120)
    after = run.checkpoint(tmp_path / "after.pt")
    for future in (during, after):
        path = future.result(timeout=10)
        assert torch.load(path, weights_only=False)["step"] == 3


def test_a_run_whose_coordinator_was_sigkilled_resumes_from_its_run_directory_exactly(
        small_run: RunConfig, tmp_path: Path) -> None:
    """SWARM here; every executor on Dask (`test_dask_faults.py`), where the run shell writes the
    other executors' checkpoints by the same code as in-process."""
    kill_the_coordinator_and_resume(death_config(small_run), tmp_path / "run")
