"""The planner benchmark's last line keeps the format other tools parse."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path


ROOT = Path(__file__).resolve().parents[3]


def test_benchmark_last_line_format() -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "benchmarks/planners.py", "--generations", "2",
                          "--reference-generations", "2",
                          "--ours-generations", "1"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300, check=True).stdout
    lines = out.strip().splitlines()
    paper = [line for line in lines if line.startswith("paper_")]
    assert len(paper) == 5 and all(re.fullmatch(r"paper_dtfm_\w+_n64 cost=\S+ reference=\S+ cpu_seconds=\S+ "
                                                r"reference_cpu_seconds=\S+ seed=0", line) for line in paper), paper
    last = lines[-1]
    assert re.fullmatch(r"dtfm_world_n64 cost=\d+\.\d+ random=\d+\.\d+ seconds=\d+\.\d+", last), last
    cost, rnd = (float(v) for v in re.findall(r"(?:cost|random)=(\S+)", last))
    assert cost < rnd
