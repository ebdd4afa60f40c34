"""DiLoCo-SWARM sync sweep: SWARM all-reduce vs DiLoCo with H in {10, 20, 50}, 2 stages x 2 peers.

Same seed, data, steps and inner optimizer for every row; reports final validation loss and the
data-parallel bytes sent (gradients every step, or pseudo-gradients every H steps).

    python experiments/diloco_sweep.py [--steps 300]
"""

from __future__ import annotations

import argparse

from _runs import print_table, run_all

from labkit.config import DataConfig, ModelConfig, RunConfig, SyncConfig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--size", default="nano")
    parser.add_argument("--lr", type=float, default=RunConfig().lr, help="inner (and all-reduce) peak learning rate")
    parser.add_argument("--peers", type=int, default=2)
    args = parser.parse_args()
    base = RunConfig(model=ModelConfig(size=args.size, seq_len=64), data=DataConfig(max_bytes=16_000_000), stages=2,
                     peers=args.peers, global_batch=32, microbatch=8, steps=args.steps, eval_every=0, eval_batches=16,
                     lr=args.lr)
    configs = {"SWARM all-reduce": base}
    for h in (10, 20, 50):
        configs[f"DiLoCo H={h}"] = base.replace(sync=SyncConfig(mode="diloco", inner_steps=h))
    results = run_all(configs)
    ref = results["SWARM all-reduce"]["dp_bytes_total"]
    print_table(f"{args.size}, {args.steps} steps, 2 stages x {args.peers} peers, lr {args.lr}",
                ["sync", "val loss (nats/byte)", "DP MB", "DP vs all-reduce", "pipeline MB"],
                [[name, f"{s['val_loss_after']:.4f}", f"{s['dp_bytes_total'] / 1e6:.1f}",
                  f"{s['dp_bytes_total'] / ref:.3f}", f"{s['pipeline_bytes_total'] / 1e6:.1f}"]
                 for name, s in results.items()])


if __name__ == "__main__":
    main()
