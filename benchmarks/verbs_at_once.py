"""How often the Dask verbs-at-once check fails: the suite's `check_verbs_at_once` (ten verbs
and a checkpoint sent at the same moment from eleven threads, two layer splits among them, while
a peer is killed) on one 8-worker cluster, `--runs` times, with `--hogs` busy processes beside it
(a loaded CI machine). A failing run prints its verbs' outcomes and the peers' story.

    PYTHONPATH=. python benchmarks/verbs_at_once.py [--runs 24] [--hogs 2]

Last line: verbs_at_once runs=<n> failed=<m> hogs=<h>
"""

from __future__ import annotations

import argparse
import multiprocessing
import tempfile
import time
from pathlib import Path

import labkit
from labkit.config import DataConfig, ModelConfig, RunConfig
from labkit.backends.dask.connect import restarting_cluster
from tests.cluster.helpers import WORKERS, wait_for_restart
from tests.integration.test_verb_inputs import check_verbs_at_once

CFG = RunConfig(model=ModelConfig(size="nano", seq_len=32), data=DataConfig(max_bytes=2_000_000), stages=2, peers=2,
                global_batch=16, microbatch=4, steps=10_000, eval_every=0, eval_batches=2, lr=3e-3, warmup_steps=1)


def hog(seconds: float) -> None:
    """Keep one core busy for `seconds`."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        sum(range(10_000))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=24)
    parser.add_argument("--hogs", type=int, default=2, help="busy processes beside the runs")
    args = parser.parse_args()
    hogs = [multiprocessing.Process(target=hog, args=(3600.0,), daemon=True) for _ in range(args.hogs)]
    failed = 0
    with restarting_cluster(WORKERS, dashboard_address=None) as cluster:
        for hogger in hogs:
            hogger.start()
        try:
            for i in range(args.runs):
                run = labkit.launch(CFG, backend="dask", scheduler=cluster.scheduler_address)
                try:
                    check_verbs_at_once(run, Path(tempfile.mkdtemp(prefix="labkit-verbs-")))
                    print(f"run {i}: ok", flush=True)
                except (AssertionError, TimeoutError, ValueError, RuntimeError) as exc:
                    failed += 1
                    print(f"run {i}: FAILED {type(exc).__name__}: {exc}", flush=True)
                finally:
                    run.stop()
                    run.wait(120)
                wait_for_restart(cluster)
        finally:
            for hogger in hogs:
                hogger.terminate()
    print(f"verbs_at_once runs={args.runs} failed={failed} hogs={args.hogs}")


if __name__ == "__main__":
    main()
