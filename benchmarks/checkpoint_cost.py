"""What the peers' periodic checkpoints cost a SWARM run (issue 25: the default `checkpoint_every`
must keep it under 5 % of a step).

Per model size: a short in-process run (2 stages x 1 peer, 4 trainers, global batch 32,
microbatch 8, seq_len 128) gives the median step seconds (gaps between step events, the first two
steps left out) and its final state; then a stage's shard of that state (parameters and AdamW
state, what a peer writes) is written with `shards.save_shard` --repeats times. The write blocks
the writing peer's thread, so its cost per step is at most write seconds / (K x step seconds) at
K = `checkpoint_every` (an upper bound: the other peers work on meanwhile).

    python benchmarks/checkpoint_cost.py [--sizes nano,tiny] [--repeats 5]

Last line: checkpoint_cost default_every=<K> worst_fraction=<max over sizes of write/(K x step)>
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import labkit
from labkit.config import ModelConfig, RunConfig
from labkit.runtime.shards import save_shard


def measure(size: str, repeats: int) -> tuple[float, float, float]:
    """(shard MB, median write s, median step s) for `size`."""
    cfg = RunConfig(model=ModelConfig(size=size, seq_len=128), stages=2, peers=1, trainers=4, global_batch=32,
                    microbatch=8, steps=8, eval_every=0, eval_batches=1)
    run = labkit.launch(cfg)
    assert run.wait(1800)["status"] == "finished"
    times = [e["t"] for e in run.events.history("step")]
    step = statistics.median(b - a for a, b in zip(times[2:], times[3:]))
    state = run.snapshot().result().stages[0]
    nbytes = sum(t.numel() * t.element_size() for t in state["params"].values())
    nbytes += sum(v.numel() * v.element_size() for s in state["optimizer"]["state"].values() for v in s.values()
                  if hasattr(v, "numel"))
    folder = Path(tempfile.mkdtemp(prefix="labkit-ckpt-bench-"))
    writes = []
    for i in range(repeats):
        start = time.perf_counter()
        save_shard(folder / f"stage-{i}.pt", state)
        writes.append(time.perf_counter() - start)
    return nbytes / 1e6, statistics.median(writes), step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="nano,tiny")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    every = RunConfig().checkpoint_every
    worst = 0.0
    print("| size | shard MB | write ms (median) | step ms (median) | write / (K x step) at K = %d |" % every)
    print("|---|---:|---:|---:|---:|")
    for size in args.sizes.split(","):
        mb, write, step = measure(size, args.repeats)
        fraction = write / (every * step)
        worst = max(worst, fraction)
        print(f"| {size} | {mb:.1f} | {write * 1e3:.1f} | {step * 1e3:.1f} | {fraction:.4f} |")
    print(f"checkpoint_cost default_every={every} worst_fraction={worst:.4f}")


if __name__ == "__main__":
    main()
