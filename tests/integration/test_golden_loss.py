"""The in-process backend reproduces the golden loss curve `tests/assets/losses/nano_50.json`.

The golden curve is the single-process reference loop's (`labkit.runtime.reference`), written by
`tests/assets/make_golden.py`: nano in float64, 50 steps. A SWARM run of the same config (2 stages
x 2 peers) sees the same parameters, samples and per-microbatch gradients; as explained in
test_equivalence's docstring, only the order in which the global batch's microbatch gradients (and
losses) are summed differs, by ~1e-15 relative per step in float64. AdamW can amplify such a
difference, and 50 steps give it time to grow, so we assert a relative tolerance of 1e-9 on every
step loss and on the validation loss before and after training: far above the ~1e-13 measured,
far below what any real change to the training arithmetic (a different sample, scale, learning
rate or update) produces. In float32 the same argument would give ~1e-6 per step, too loose for a
curve meant to catch small regressions, hence float64.
"""

from __future__ import annotations

from tests.golden import GOLDEN_PATH, check_backend, load_golden


def test_golden_file_matches_todays_config() -> None:
    """A change of defaults (or of `golden_config`) fails here, telling you to re-run make_golden.py."""
    golden = load_golden()  # raises, naming the differing fields and the command to re-run, on a mismatch
    assert len(golden["losses"]) == golden["config"]["steps"], f"{GOLDEN_PATH.name} is incomplete"


def test_inprocess_reproduces_golden_losses() -> None:
    check_backend("inprocess", timeout=240)
