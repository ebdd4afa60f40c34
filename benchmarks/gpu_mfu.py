"""A stage step's model FLOPs utilisation on CUDA: one `StagePeer` holding the whole model (one
stage), forward and backward of one microbatch through its `loss` call, timed with CUDA events
after warm-up; the median of repeats, for each size and parameter dtype asked.

FLOPs of a step = tokens x (6 x all parameters + 12 x layers x seq_len x d_model): the usual
6·N·D plus the attention scores' matmuls counted in full (not halved for the causal mask), as
`ModelConfig.block_flops_per_token` does. MFU = FLOP/s over the card's dense bf16 peak
(`gpu_common.PEAKS`); fp32 runs (TF32 off, torch's default) are also set against the fp32 peak.

    python benchmarks/gpu_mfu.py [--sizes small medium] [--seq-len 1024] [--microbatch 8] [--out mfu.json]
"""

from __future__ import annotations

import argparse
import statistics

import torch

from benchmarks.gpu_common import peaks, without_cuda, write
from labkit.config import DataConfig, ModelConfig, RunConfig
from labkit.data import WindowSampler, load_corpus
from labkit.model.assembly import initial_states, stage_module
from labkit.runtime.peer import StagePeer

CODECS = {"bfloat16": "bf16", "float32": "fp32"}


def step_flops(model: ModelConfig, tokens: int) -> float:
    """Training FLOPs of one forward and backward over `tokens` tokens (see the module's note)."""
    return tokens * (6.0 * model.num_params() + 12.0 * model.n_layer * model.seq_len * model.d_model)


def measure(size: str, dtype: str, seq_len: int, microbatch: int, warmup: int, repeats: int) -> dict[str, float]:
    """Median seconds of one microbatch's forward and backward on one whole-model stage peer."""
    cfg = RunConfig(model=ModelConfig(size=size, seq_len=seq_len, dtype=dtype), data=DataConfig(max_bytes=4_000_000),
                    stages=1, peers=1, global_batch=microbatch, microbatch=microbatch)
    state = initial_states(cfg)[0]
    peer = StagePeer("s0p0", 0, stage_module(cfg, 0, state["params"]), cfg, "cuda")
    peer.load_state(state)
    inputs, targets = WindowSampler(load_corpus(cfg.data).train, seq_len, cfg.seed).batch(0, 0, microbatch)
    inputs, targets = inputs.cuda(), targets.cuda()
    scale = 1.0 / (microbatch * seq_len)
    torch.cuda.reset_peak_memory_stats()
    times = []
    try:
        for i in range(warmup + repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            peer.call("loss", i, inputs, targets, scale, True, microbatch, CODECS[dtype]).result()
            end.record()
            end.synchronize()
            if i >= warmup:
                times.append(start.elapsed_time(end) / 1e3)
            peer.call("clear_gradients").result()
    finally:
        peer.close()
    seconds = statistics.median(times)
    flops = step_flops(cfg.model, microbatch * seq_len)
    return {"params": cfg.model.num_params(), "tokens": microbatch * seq_len, "seconds": seconds,
            "seconds_min": min(times), "tflops": flops / seconds / 1e12,
            "max_memory_allocated_gb": torch.cuda.max_memory_allocated() / 1e9}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", nargs="+", default=["small", "medium"])
    parser.add_argument("--dtypes", nargs="+", default=["bfloat16", "float32"], choices=sorted(CODECS))
    parser.add_argument("--seq-len", type=int, default=1024)
    parser.add_argument("--microbatch", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--out", default=None, help="a JSON file for the figures")
    args = parser.parse_args()
    if without_cuda(args.out, "mfu"):
        return
    bf16_peak, fp32_peak = peaks() or (float("nan"), float("nan"))
    rows = []
    for size in args.sizes:
        for dtype in args.dtypes:
            row = {"size": size, "dtype": dtype, **measure(size, dtype, args.seq_len, args.microbatch, args.warmup,
                                                           args.repeats)}
            row["mfu_bf16_peak"] = row["tflops"] * 1e12 / bf16_peak
            if dtype == "float32":
                row["mfu_fp32_peak"] = row["tflops"] * 1e12 / fp32_peak
            rows.append(row)
            print(f"mfu size={size} dtype={dtype} params={row['params']:,} tokens={row['tokens']} "
                  f"step_ms={row['seconds'] * 1e3:.2f} (min {row['seconds_min'] * 1e3:.2f}) "
                  f"tflops={row['tflops']:.1f} mfu={row['mfu_bf16_peak']:.3f} of {bf16_peak / 1e12:.0f} bf16"
                  + (f", {row['mfu_fp32_peak']:.3f} of {fp32_peak / 1e12:.0f} fp32" if dtype == "float32" else "")
                  + f" peak_mem={row['max_memory_allocated_gb']:.1f} GB", flush=True)
    write(args.out, "mfu", {"seq_len": args.seq_len, "microbatch": args.microbatch, "repeats": args.repeats,
                            "peak_bf16": bf16_peak, "peak_fp32": fp32_peak, "rows": rows})


if __name__ == "__main__":
    main()
