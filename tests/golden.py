"""The golden loss curve: its config, loading it, and checking a run of either backend against it.

`tests/assets/make_golden.py` writes `tests/assets/losses/nano_50.json` from the single-process
reference loop; `tests/integration/test_golden_loss.py` (in-process) and
`tests/cluster/test_golden_loss_dask.py` (Dask) launch the stored config and compare.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import labkit
from labkit.config import DataConfig, ModelConfig, RunConfig

GOLDEN_PATH = Path(__file__).parent / "assets" / "losses" / "nano_50.json"
REGENERATE = "PYTHONPATH=$PWD python tests/assets/make_golden.py"
REL_TOL = 1e-9  # float64: only the summation order of microbatch gradients differs (see the tests' docstrings)


def golden_config() -> RunConfig:
    """The golden run: conftest's `small_run` in float64, 50 steps, 2 stages x 2 peers."""
    return RunConfig(model=ModelConfig(size="nano", seq_len=32, dtype="float64"), data=DataConfig(max_bytes=2_000_000),
                     global_batch=16, microbatch=4, steps=50, eval_every=0, eval_batches=2, lr=3e-3, warmup_steps=1,
                     stages=2, peers=2)


def load_golden() -> dict[str, Any]:
    """The golden file's contents, after checking it was made from today's `golden_config()`."""
    golden = json.loads(GOLDEN_PATH.read_text())
    want = golden_config().to_dict()
    if golden["config"] != want:
        changed = sorted(k for k in want.keys() | golden["config"].keys() if golden["config"].get(k) != want.get(k))
        raise AssertionError(f"{GOLDEN_PATH.name} was made from another config (fields {changed} differ), e.g. after "
                             f"a change of defaults: re-run `{REGENERATE}` and commit the new file")
    return golden


def relative_difference(got: float, want: float) -> float:
    """|got - want| / |want|."""
    return abs(got - want) / abs(want)


def check_backend(backend: str, timeout: float, **options: str) -> float:
    """Launch the golden config on `backend` (with `options`, e.g. a scheduler), wait, and assert
    its step and validation losses equal the golden ones to `REL_TOL`; returns the largest
    relative difference seen."""
    golden = load_golden()
    cfg = RunConfig.from_dict(golden["config"])
    run = labkit.launch(cfg, backend=backend, **options)
    summary = run.wait(timeout)
    if not run.done:
        run.stop()  # leave no run training (or cluster running) behind a failed test
        run.wait(60)
    assert summary.get("status") == "finished", f"{backend} run did not finish in {timeout} s: {summary}"
    losses = [e["loss"] for e in run.events.history("step")]
    through = [e["boundary"]["tensor_bytes"] for e in run.events.history("step")]
    assert through == [0] * len(losses), "a tensor crossed the coordinator at a step boundary"
    want = golden["losses"]
    assert len(losses) == len(want) == cfg.steps, f"{len(losses)} step losses, golden has {len(want)}"
    for name, curve in (("golden", want), (backend, losses)):
        assert curve[-1] < 0.9 * curve[0], f"{name} loss went {curve[0]:.4f} -> {curve[-1]:.4f}: no training happened"
    pairs = [(f"step {i + 1} loss", got, ref) for i, (got, ref) in enumerate(zip(losses, want))]
    pairs += [(key, summary[key], golden[key]) for key in ("val_loss_before", "val_loss_after")]
    worst = max(pairs, key=lambda p: relative_difference(p[1], p[2]))
    diff = relative_difference(worst[1], worst[2])
    assert diff <= REL_TOL, f"{backend}: {worst[0]} = {worst[1]!r}, golden {worst[2]!r} (relative diff. {diff:.3g})"
    return diff
