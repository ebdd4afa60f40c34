"""What periodic checkpoints cost a run (issue 25: the default `checkpoint_every` must keep it
under 5 % of a step).

Per model size: a short in-process run (2 stages x 1 peer, 4 trainers, global batch 32,
microbatch 8, seq_len 128) gives the median step seconds (gaps between step events, the first two
steps left out) and its final state. SWARM (the default): a stage's shard of that state
(parameters and AdamW state, what a peer writes) is written with `shards.save_shard` --repeats
times; the write blocks the writing peer's thread, so its cost per step is at most write seconds /
(K x step seconds) at K = `checkpoint_every` (an upper bound: the other peers work on meanwhile).
`--executor atom|pipeline|taskpool` (the same shape; ATOM: one replica of the whole model): the
run shell writes every stage's shard itself, with the run's lock held
(`runtime/held_checkpoints.py`), so the write of the whole state is what a checkpoint costs.

    python benchmarks/checkpoint_cost.py [--sizes nano,tiny] [--repeats 5] [--executor swarm]

Last line: checkpoint_cost default_every=<K> worst_fraction=<max over sizes of write/(K x step)>
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import labkit
from labkit import AtomConfig
from labkit.config import ModelConfig, RunConfig
from labkit.runtime.held_checkpoints import HeldCheckpoints
from labkit.runtime.shards import save_shard


def run_config(size: str, executor: str) -> RunConfig:
    """The measured run of `size` with `executor`."""
    cfg = RunConfig(model=ModelConfig(size=size, seq_len=128), stages=2, peers=1, global_batch=32, microbatch=8,
                    steps=8, eval_every=0, eval_batches=1)
    if executor == "swarm":
        return cfg.replace(trainers=4)
    if executor == "atom":
        return cfg.replace(stages=1, executor=AtomConfig(replicas=1, accumulation=4))
    return cfg.replace(executor=executor)


def measure(size: str, repeats: int, executor: str = "swarm") -> tuple[float, float, float]:
    """(MB written, median write s, median step s) for `size` with `executor`: one stage's shard
    (SWARM: what one peer writes), else every stage's (what the run shell writes)."""
    cfg = run_config(size, executor)
    run = labkit.launch(cfg)
    assert run.wait(1800)["status"] == "finished"
    times = [e["t"] for e in run.events.history("step")]
    step = statistics.median(b - a for a, b in zip(times[2:], times[3:]))
    snapshot = run.snapshot().result()
    states = snapshot.stages if executor != "swarm" else snapshot.stages[:1]
    nbytes = sum(state_bytes(state) for state in states)
    folder = Path(tempfile.mkdtemp(prefix="labkit-ckpt-bench-"))
    if executor == "swarm":
        write = lambda i: save_shard(folder / f"stage-{i}.pt", states[0])  # noqa: E731
    else:
        held = HeldCheckpoints(cfg, folder, lambda event: None, lambda: 0.0)
        write = lambda i: held.write(i, snapshot.config, states)  # noqa: E731
    writes = []
    for i in range(repeats):
        start = time.perf_counter()
        write(i)
        writes.append(time.perf_counter() - start)
    return nbytes / 1e6, statistics.median(writes), step


def state_bytes(state: dict) -> int:
    """Bytes of a stage's parameters and optimizer state."""
    nbytes = sum(t.numel() * t.element_size() for t in state["params"].values())
    return nbytes + sum(v.numel() * v.element_size() for s in state["optimizer"]["state"].values() for v in s.values()
                        if hasattr(v, "numel"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="nano,tiny")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--executor", default="swarm", choices=("swarm", "atom", "pipeline", "taskpool"))
    args = parser.parse_args()
    every = RunConfig().checkpoint_every
    worst = 0.0
    print("| executor | size | MB written | write ms (median) | step ms (median) | write / (K x step) at K = %d |" % every)
    print("|---|---|---:|---:|---:|---:|")
    for size in args.sizes.split(","):
        mb, write, step = measure(size, args.repeats, args.executor)
        fraction = write / (every * step)
        worst = max(worst, fraction)
        print(f"| {args.executor} | {size} | {mb:.1f} | {write * 1e3:.1f} | {step * 1e3:.1f} | {fraction:.4f} |")
    print(f"checkpoint_cost default_every={every} worst_fraction={worst:.4f}")


if __name__ == "__main__":
    main()
