"""SWARM Table 7 in shape: no compression, 8-bit codec, bottleneck and maxout boundaries.

2 stages x 1 peer, 2x boundary compression, the same seed, data and steps for every row; reports
validation loss after a fixed number of steps and the pipeline bytes actually sent. With
`--seeds N` every row runs under seeds 0 .. N-1 and the table gives mean +- standard deviation,
each seed's losses and, per seed, whether the paper's order (bottleneck ahead of maxout) holds;
the summaries go to <out>/compression_table7.json.

    python experiments/compression_table7.py [--steps 300] [--size nano] [--seeds 1] [--out docs/figures]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics

from _runs import parse_with_out, print_table
from _seeds import mean_std, run_seeds

from labkit.config import CompressionConfig, DataConfig, ModelConfig, RunConfig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--size", default="nano")
    parser.add_argument("--seeds", type=int, default=1, help="run every row under seeds 0 .. N-1")
    args, out = parse_with_out(parser)
    base = RunConfig(model=ModelConfig(size=args.size, seq_len=128), data=DataConfig(max_bytes=16_000_000), stages=2,
                     peers=1, trainers=2, global_batch=32, microbatch=16, steps=args.steps, eval_every=0, eval_batches=16)
    rows = {
        "none (fp32)": CompressionConfig(),
        "8-bit codec": CompressionConfig(codec="int8"),
        "bottleneck 2x": CompressionConfig(boundary="bottleneck", factor=2),
        "maxout 2x": CompressionConfig(boundary="maxout", factor=2),
    }
    results = run_seeds({name: base.replace(compression=c) for name, c in rows.items()}, args.seeds)
    losses = {name: [s["val_loss_after"] for s in runs] for name, runs in results.items()}
    ref = results["none (fp32)"][0]["pipeline_bytes_total"]
    print_table(f"{args.size}, {args.steps} steps, 2 stages x 1 peer, seeds 0..{args.seeds - 1}",
                ["method", "val loss (nats/byte)", "val ppl (per byte)", "per seed", "pipeline MB", "vs none"],
                [[name, mean_std(losses[name]), f"{math.exp(statistics.mean(losses[name])):.3f}",
                  ", ".join(f"{x:.4f}" for x in losses[name]), f"{runs[0]['pipeline_bytes_total'] / 1e6:.1f}",
                  f"{runs[0]['pipeline_bytes_total'] / ref:.3f}"] for name, runs in results.items()])
    ahead = [b < m for b, m in zip(losses["bottleneck 2x"], losses["maxout 2x"], strict=True)]
    print(f"bottleneck ahead of maxout (the paper's order) in {sum(ahead)} of {len(ahead)} seeds: {ahead}")
    (out / "compression_table7.json").write_text(json.dumps(
        {"steps": args.steps, "size": args.size, "seeds": args.seeds, "runs": results}, default=str))


if __name__ == "__main__":
    main()
