"""DP vs PP traffic per optimizer step for the GPT-2 family (DiLoCo-SWARM report's sizes).

Computed with `labkit.swarm.traffic` for 2 stages x 2 peers, seq_len 1024, vocab 50257, global
batch 512 (the report's setting shape), SWARM all-reduce and DiLoCo H=50; then checked against a
measured nano run, where formula and measurement must agree to the byte.

    python experiments/traffic_split.py
"""

from __future__ import annotations

import labkit
from labkit.config import DataConfig, ModelConfig, RunConfig, SyncConfig
from labkit.swarm.traffic import dp_bytes_per_step, pipeline_bytes_per_step


def main() -> None:
    print("| size | params (M) | PP GB/step | DP GB/step (all-reduce) | DP share | DP share DiLoCo H=50 |")
    print("| --- | --- | --- | --- | --- | --- |")
    for size in ("tiny", "small", "medium", "large"):
        model = ModelConfig(size=size, seq_len=1024, vocab_size=50257)
        cfg = RunConfig(model=model, stages=2, peers=2, global_batch=512, microbatch=8)
        pp, dp = sum(pipeline_bytes_per_step(cfg)), sum(dp_bytes_per_step(cfg))
        dp50 = sum(dp_bytes_per_step(cfg.replace(sync=SyncConfig(mode="diloco", inner_steps=50))))
        print(f"| {size} | {model.num_params() / 1e6:.0f} | {pp / 1e9:.2f} | {dp / 1e9:.2f} | "
              f"{dp / (dp + pp):.1%} | {dp50 / (dp50 + pp):.1%} |")
    check = RunConfig(model=ModelConfig(seq_len=64), data=DataConfig(max_bytes=4_000_000), stages=2, peers=2,
                      global_batch=32, microbatch=8, steps=10, eval_every=0, eval_batches=1)
    measured = labkit.launch(check).wait()
    pp, dp = [b * check.steps for b in pipeline_bytes_per_step(check)], [b * check.steps for b in dp_bytes_per_step(check)]
    ok = measured["pipeline_bytes"] == pp and measured["dp_bytes"] == dp
    print(f"measured nano 2x2, 10 steps: PP {measured['pipeline_bytes']} (formula {pp}), "
          f"DP {measured['dp_bytes']} (formula {[int(b) for b in dp]}): {'exact match' if ok else 'MISMATCH'}")


if __name__ == "__main__":
    main()
