"""The task pool paper's task-pool executor against SWARM on the same model, clients and churn.

Both train the same 2-stage model with 2 unreliable peers per stage (SWARM's stage peers, the
task pool's clients), in-process, on the same samples. With churn, every `--every` steps, at the step's
first backward hop, a peer of one stage (alternating) is killed and a new one added to that stage
(`labkit.lab.churn.kill_every`): SWARM recomputes the microbatches whose gradients the dead peer had
accumulated, the task pool only the slices it held.
A measurement is tokens per second from the first step after `--warmup` to the last step; repeats
alternate the order of the executors (AB, BA, ...) to cancel drift on a shared machine; medians.

    python benchmarks/taskpool.py [--steps 40] [--every 5] [--repeats 3]

Last line: `taskpool_over_swarm_churn=<task-pool tokens/s over SWARM's, with churn>`.
"""

from __future__ import annotations

import argparse
import statistics

import labkit
from labkit.config import ModelConfig, RunConfig
from labkit.lab.churn import extra_forward, kill_every, tokens_per_s

WARMUP = 3  # steps left out of the speed measurement


def measure(cfg: RunConfig, every: int) -> tuple[float, int]:
    """(tokens per second after the warm-up, forward samples computed beyond the minimum)."""
    run = labkit.launch(cfg)
    try:
        kill_every(run, every)
        summary = run.wait(timeout=600)
    finally:
        run.stop()
    assert summary["status"] == "finished", summary
    return tokens_per_s(run, WARMUP), extra_forward(run, cfg)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--every", type=int, default=5, help="steps between kills (with churn)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    base = RunConfig(model=ModelConfig(size="nano", seq_len=64), stages=2, peers=2, trainers=4, global_batch=32,
                     microbatch=8, steps=args.steps, eval_every=0)
    results: dict[tuple[str, bool], list[float]] = {}
    recomputed: dict[str, list[int]] = {}
    for repeat in range(args.repeats):
        order = ["swarm", "taskpool"] if repeat % 2 == 0 else ["taskpool", "swarm"]
        for churn in (False, True):
            for executor in order:
                speed, lost = measure(base.replace(executor=executor), args.every if churn else 0)
                results.setdefault((executor, churn), []).append(speed)
                if churn:
                    recomputed.setdefault(executor, []).append(lost)
                print(f"repeat {repeat} {executor:8s} churn={churn!s:5s} tokens/s={speed:,.0f} extra forward samples={lost}")
    med = {key: statistics.median(values) for key, values in results.items()}
    for churn in (False, True):
        print(f"churn={churn}: swarm {med['swarm', churn]:,.0f} tokens/s, taskpool {med['taskpool', churn]:,.0f} "
              f"tokens/s, ratio {med['taskpool', churn] / med['swarm', churn]:.3f}")
    print("forward samples computed beyond the minimum, per run with churn (median): " +
          ", ".join(f"{k} {statistics.median(v):g}" for k, v in recomputed.items()))
    print(f"taskpool_over_swarm_quiet={med['taskpool', False] / med['swarm', False]:.3f}")
    print(f"taskpool_over_swarm_churn={med['taskpool', True] / med['swarm', True]:.3f}")


if __name__ == "__main__":
    main()
