"""SWARM Table 7 in shape: no compression, 8-bit codec, bottleneck and maxout boundaries.

2 stages x 1 peer, 2x boundary compression, the same seed, data and steps for every row; reports
validation loss after a fixed number of steps and the pipeline bytes actually sent.

    python experiments/compression_table7.py [--steps 300] [--size nano]
"""

from __future__ import annotations

import argparse
import math

from _runs import print_table, run_all

from labkit.config import CompressionConfig, DataConfig, ModelConfig, RunConfig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--size", default="nano")
    args = parser.parse_args()
    base = RunConfig(model=ModelConfig(size=args.size, seq_len=128), data=DataConfig(max_bytes=16_000_000), stages=2,
                     peers=1, trainers=2, global_batch=32, microbatch=16, steps=args.steps, eval_every=0, eval_batches=16)
    rows = {
        "none (fp32)": CompressionConfig(),
        "8-bit codec": CompressionConfig(codec="int8"),
        "bottleneck 2x": CompressionConfig(boundary="bottleneck", factor=2),
        "maxout 2x": CompressionConfig(boundary="maxout", factor=2),
    }
    results = run_all({name: base.replace(compression=c) for name, c in rows.items()})
    ref = results["none (fp32)"]["pipeline_bytes_total"]
    print_table(f"{args.size}, {args.steps} steps, 2 stages x 1 peer",
                ["method", "val loss (nats/byte)", "val ppl (per byte)", "pipeline MB", "vs none"],
                [[name, f"{s['val_loss_after']:.4f}", f"{math.exp(s['val_loss_after']):.3f}",
                  f"{s['pipeline_bytes_total'] / 1e6:.1f}", f"{s['pipeline_bytes_total'] / ref:.3f}"]
                 for name, s in results.items()])


if __name__ == "__main__":
    main()
