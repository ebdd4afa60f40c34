"""The Dask backend reproduces the golden loss curve `tests/assets/losses/nano_50.json`.

The shared LocalCluster of the Dask tests runs the golden config (with 8 workers, the 4 peers and
the coordinator get their own; trainers take the rest and share the coordinator's). Tolerance: relative 1e-9 on every step loss and on the validation loss before
and after, for the reason given in tests/integration/test_golden_loss.py (float64; only the
summation order of microbatch gradients differs, see test_equivalence's docstring).
"""

from __future__ import annotations

import pytest

from tests.golden import check_backend

pytestmark = pytest.mark.slow


def test_dask_reproduces_golden_losses(cluster) -> None:
    check_backend("dask", timeout=280, scheduler=cluster.scheduler_address)
