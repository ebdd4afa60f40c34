"""benchmarks/boundary_scaling.py on its smallest cell (nano, 2 stages x 2 peers, Dask): the last line
keeps its format, and no tensor byte crossed the coordinator at any step boundary (issue 25)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).parents[2]
SCALING = ROOT / "benchmarks" / "boundary_scaling.py"


def test_boundary_scaling_last_line_and_no_tensor_through_the_coordinator() -> None:
    out = subprocess.run([sys.executable, str(SCALING), "--cells", "nano:2", "--steps", "3", "--warmup", "1",
                          "--round-trips", "1", "--repeats", "1"],
                         env=dict(os.environ, PYTHONPATH=str(ROOT)),  # this tree's labkit, not an installed one
                         check=False, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    last = out.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"boundary_scaling coordinator_tensor_bytes=\d+ worst_over_bound=\d+\.\d\d "
                        r"worst_over_bound_n8=na", last), out.stdout[-3000:]
    assert "coordinator_tensor_bytes=0 " in last, out.stdout[-3000:]
    assert float(re.search(r"worst_over_bound=(\S+)", last)[1]) > 0, last
    assert f"labkit from {ROOT / 'labkit'}" in out.stdout, out.stdout[:500]
