"""SWARM with synchronous semantics equals single-process training on the same samples.

Tolerance, and why it holds: the SWARM run and the reference see the same parameters, the same
samples and the same per-microbatch gradients; they differ only in the order the global-batch
sum of microbatch gradients is added up (peers accumulate in arrival order, then the stage sums
its peers). Reordering a sum of n float terms changes it by at most (n-1)·u·Σ|g| (u the unit
roundoff). In float64 (u ≈ 1.1e-16, n = 4 microbatches) that is ~1e-15 relative per step; AdamW
divides by sqrt(v) and can amplify a difference by lr/ε at worst, but over 4 steps from the same
start the parameters stay within 1e-10 absolute, which we assert. In float32 the same argument
gives ~1e-6; we assert 2e-5.
"""

from __future__ import annotations

import pytest
import torch

import labkit
from labkit.config import ModelConfig, RunConfig
from labkit.data import WindowSampler, load_corpus
from labkit.model import assemble
from labkit.runtime.reference import reference_model, train_reference


def _swarm_params(cfg: RunConfig) -> dict[str, torch.Tensor]:
    run = labkit.launch(cfg)
    summary = run.wait(240)
    assert summary["status"] == "finished", summary
    return assemble([s["params"] for s in run.snapshot().result().stages])


def _reference_params(cfg: RunConfig) -> dict[str, torch.Tensor]:
    sampler = WindowSampler(load_corpus(cfg.data).train, cfg.model.seq_len, cfg.seed)
    model, _ = train_reference(cfg, sampler)
    return model.state_dict()


@pytest.mark.parametrize(("stages", "peers", "dtype", "tol"), [
    (1, 1, "float64", 1e-10),
    (2, 2, "float64", 1e-10),
    (3, 2, "float64", 1e-10),
    (2, 2, "float32", 2e-5),
])
def test_swarm_matches_single_process(small_run: RunConfig, stages: int, peers: int, dtype: str, tol: float) -> None:
    cfg = small_run.replace(model=ModelConfig(size="nano", seq_len=32, dtype=dtype), stages=stages, peers=peers, steps=4)
    got, want = _swarm_params(cfg), _reference_params(cfg)
    assert got.keys() == want.keys()
    init = reference_model(cfg).state_dict()
    moved = max(float((want[k] - init[k]).abs().max()) for k in want)
    assert moved > 1e-3, "training must move the parameters, or the comparison proves nothing"
    worst = max(float((got[k] - want[k]).abs().max()) for k in want)
    assert worst <= tol, f"max |swarm - reference| = {worst:.3g} > {tol}"



def test_one_trainer_with_several_microbatches_in_flight_keeps_equivalence(small_run: RunConfig) -> None:
    """Lanes of one trainer share its router; the ledger credits each lane's microbatch alone."""
    cfg = small_run.replace(model=ModelConfig(size="nano", seq_len=32, dtype="float64"), stages=2, peers=2, steps=4,
                            trainers=1, inflight=4)
    got, want = _swarm_params(cfg), _reference_params(cfg)
    worst = max(float((got[k] - want[k]).abs().max()) for k in want)
    assert worst <= 1e-10, f"max |swarm - reference| = {worst:.3g}"


@pytest.mark.parametrize("option", ["delayed_updates", "activation_checkpointing"])
def test_options_keep_equivalence(small_run: RunConfig, option: str) -> None:
    """Activation checkpointing changes nothing; delayed updates equal the reference's stale loop."""
    cfg = small_run.replace(model=ModelConfig(size="nano", seq_len=32, dtype="float64"), stages=2, peers=2,
                            steps=4, **{option: True})
    got, want = _swarm_params(cfg), _reference_params(cfg)
    plain = _reference_params(cfg.replace(**{option: False}))
    worst = max(float((got[k] - want[k]).abs().max()) for k in want)
    assert worst <= 1e-10, f"max |swarm - reference| = {worst:.3g}"
    differs = max(float((plain[k] - want[k]).abs().max()) for k in want)
    assert (differs > 1e-4) == (option == "delayed_updates"), f"{option}: differs from plain training by {differs:.3g}"
