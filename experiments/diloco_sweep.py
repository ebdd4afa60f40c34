"""DiLoCo-SWARM sync sweep: SWARM all-reduce vs DiLoCo with H in {10, 20, 50}, 2 stages x 2 peers.

Same seed, data, steps and inner optimizer for every row; reports final validation loss and the
data-parallel bytes sent (gradients every step, or pseudo-gradients every H steps). With
`--seeds N` every row runs under seeds 0 .. N-1 and the table gives mean +- standard deviation,
each seed's losses and, per seed, whether loss rises with H (the report's order) or falls; the
summaries go to <out>/diloco_sweep_lr<lr>.json.

    python experiments/diloco_sweep.py [--steps 300] [--lr 3e-3] [--seeds 1] [--out docs/figures]
"""

from __future__ import annotations

import argparse
import json
from itertools import pairwise

from _runs import parse_with_out, print_table
from _seeds import mean_std, run_seeds

from labkit.config import DataConfig, ModelConfig, RunConfig, SyncConfig

H_VALUES = (10, 20, 50)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--size", default="nano")
    parser.add_argument("--lr", type=float, default=RunConfig().lr, help="inner (and all-reduce) peak learning rate")
    parser.add_argument("--peers", type=int, default=2)
    parser.add_argument("--seeds", type=int, default=1, help="run every row under seeds 0 .. N-1")
    args, out = parse_with_out(parser)
    base = RunConfig(model=ModelConfig(size=args.size, seq_len=64), data=DataConfig(max_bytes=16_000_000), stages=2,
                     peers=args.peers, global_batch=32, microbatch=8, steps=args.steps, eval_every=0, eval_batches=16,
                     lr=args.lr)
    configs = {"SWARM all-reduce": base}
    for h in H_VALUES:
        configs[f"DiLoCo H={h}"] = base.replace(sync=SyncConfig(mode="diloco", inner_steps=h))
    results = run_seeds(configs, args.seeds)
    losses = {name: [s["val_loss_after"] for s in runs] for name, runs in results.items()}
    ref = results["SWARM all-reduce"][0]["dp_bytes_total"]
    print_table(f"{args.size}, {args.steps} steps, 2 stages x {args.peers} peers, lr {args.lr}, seeds 0..{args.seeds - 1}",
                ["sync", "val loss (nats/byte)", "per seed", "DP MB", "DP vs all-reduce", "pipeline MB"],
                [[name, mean_std(losses[name]), ", ".join(f"{x:.4f}" for x in losses[name]),
                  f"{runs[0]['dp_bytes_total'] / 1e6:.1f}", f"{runs[0]['dp_bytes_total'] / ref:.3f}",
                  f"{runs[0]['pipeline_bytes_total'] / 1e6:.1f}"] for name, runs in results.items()])
    by_h = [losses[f"DiLoCo H={h}"] for h in H_VALUES]
    rising = [all(a < b for a, b in pairwise(seed)) for seed in zip(*by_h, strict=True)]
    falling = [all(a > b for a, b in pairwise(seed)) for seed in zip(*by_h, strict=True)]
    beat = [all(x < ar for x in seed) for ar, *seed in zip(losses["SWARM all-reduce"], *by_h, strict=True)]
    print(f"loss rises with H (the report's order) in {sum(rising)} of {len(rising)} seeds: {rising}")
    print(f"loss falls with H in {sum(falling)} of {len(falling)} seeds: {falling}")
    print(f"every DiLoCo row beats all-reduce in {sum(beat)} of {len(beat)} seeds: {beat}")
    (out / f"diloco_sweep_lr{args.lr:g}.json").write_text(json.dumps(
        {"steps": args.steps, "size": args.size, "lr": args.lr, "peers": args.peers, "seeds": args.seeds,
         "runs": results}, default=str))


if __name__ == "__main__":
    main()
