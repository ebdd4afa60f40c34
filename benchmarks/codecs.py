"""Wire codec cost: encode + decode time per codec, and its share of a nano stage step.

For each codec, on a 4x512x768 float32 tensor (a GPT-2 small boundary activation): median encode
and decode times, throughput in GB/s of float32 input, exact wire bytes, and the break-even link
bandwidth = (bytes saved vs fp32) / (encode + decode time): on slower links the codec pays off.
Then each codec's time on the output activation of nano stage 0 of 2 (16x128 microbatch) as a
share of that stage's forward + backward time. Repeats are interleaved across codecs and medians
reported, since the machine is shared and noisy. Measured with 1 torch thread (labkit's default,
RunConfig.threads) and with torch's default thread count.

    python benchmarks/codecs.py [--repeats 20] [--warmup 3] [--blocksize 1024]

Last line (from the 1-thread run): int8_breakeven_gbps=<x> int8_bytes_ratio=<fp32 bytes / int8 bytes>.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable, Mapping
from typing import Any

import torch

from labkit.config import ModelConfig
from labkit.model import build_stage, init_full_state
from labkit.wire import CODECS, Codec, get_codec
from labkit.wire.codecs import INT8_BLOCKSIZE, INT8_BLOCKSIZES


def seconds(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def codec_times(codecs: Mapping[Any, Codec], x: torch.Tensor, repeats: int, warmup: int) -> dict[Any, tuple[float, ...]]:
    """Median wall seconds of (encode, decode, encode+decode) and CPU seconds of encode+decode per
    codec (all threads of this process: the work done, whatever other jobs take), interleaved."""
    runs: dict[Any, list[tuple[float, float, float]]] = {name: [] for name in codecs}
    for r in range(warmup + repeats):
        for name, codec in codecs.items():
            box: list = []
            cpu = time.process_time()
            enc = seconds(lambda: box.append(codec.encode(x)))
            dec = seconds(lambda: codec.decode(box[0]))
            cpu = time.process_time() - cpu
            if r >= warmup:
                runs[name].append((enc, dec, cpu))
    return {name: (statistics.median(e for e, _, _ in v), statistics.median(d for _, d, _ in v),
                   statistics.median(e + d for e, d, _ in v), statistics.median(c for _, _, c in v))
            for name, v in runs.items()}


def stage_step_seconds(repeats: int, warmup: int) -> tuple[float, torch.Tensor]:
    """Median forward + backward time of nano stage 0 of 2 on a 16x128 microbatch, and its output."""
    cfg = ModelConfig(size="nano", seq_len=128)
    stage = build_stage(cfg, 0, 2, init_full_state(cfg, seed=0))
    tokens = torch.randint(0, cfg.vocab_size, (16, 128), generator=torch.Generator().manual_seed(0))

    def step() -> None:
        out = stage(tokens)
        out.backward(torch.ones_like(out))

    times = [seconds(step) for _ in range(warmup + repeats)][warmup:]
    with torch.no_grad():
        return statistics.median(times), stage(tokens)


def report(threads: int, args: argparse.Namespace) -> dict[str, float]:
    torch.set_num_threads(threads)
    codecs = {name: get_codec(name, **({"blocksize": args.blocksize} if name == "int8" else {})) for name in CODECS}
    x = torch.randn(4, 512, 768, generator=torch.Generator().manual_seed(0))
    raw = x.numel() * x.element_size()
    times = codec_times(codecs, x, args.repeats, args.warmup)
    step, act = stage_step_seconds(args.repeats, args.warmup)
    act_times = codec_times(codecs, act, args.repeats, args.warmup)
    print(f"\n-- torch threads={threads}; tensor 4x512x768 float32 ({raw:,} bytes); int8 blocksize={args.blocksize}; "
          f"medians of {args.repeats} after {args.warmup} warm-up; load average {os.getloadavg()[0]:.1f}")
    print(f"{'codec':>5} {'enc ms':>8} {'dec ms':>8} {'enc+dec':>8} {'cpu ms':>8} {'enc GB/s':>9} {'dec GB/s':>9} "
          f"{'wire bytes':>11} {'ratio':>6} {'break-even Gb/s':>15} {'(by cpu)':>8} {'stage share':>11}")
    breakeven = {}
    for name, codec in codecs.items():
        enc, dec, both, cpu = times[name]
        wire = codec.wire_bytes(codec.encode(x))
        breakeven[name] = (raw - wire) * 8 / both / 1e9
        share = act_times[name][2] / step
        print(f"{name:>5} {enc * 1e3:8.3f} {dec * 1e3:8.3f} {both * 1e3:8.3f} {cpu * 1e3:8.3f} {raw / enc / 1e9:9.2f} "
              f"{raw / dec / 1e9:9.2f} {wire:11,d} {raw / wire:6.3f} {breakeven[name]:15.2f} "
              f"{(raw - wire) * 8 / max(cpu, 1e-9) / 1e9:8.2f} {share:11.2%}")
    print(f"nano stage 0 of 2 (blocks 0-1 + embeddings), 16x128 microbatch: forward+backward {step * 1e3:.2f} ms; "
          f"its output {tuple(act.shape)}; stage share = codec enc+dec on that output / step (the gradient sent back adds as much again)")
    return {"breakeven": breakeven["int8"], "ratio": raw / codecs["int8"].wire_bytes(codecs["int8"].encode(x))}


def blocksize_sweep(repeats: int, warmup: int) -> None:
    """int8 round-trip error (relative L2), bytes ratio and time per blocksize, on the test tensor
    with 3 of its 768 features scaled x20 (outlier features, as transformer activations have)."""
    x = torch.randn(4, 512, 768, generator=torch.Generator().manual_seed(0))
    x[..., :3] *= 20.0
    codecs = {bs: get_codec("int8", blocksize=bs) for bs in INT8_BLOCKSIZES}
    times = codec_times(codecs, x, repeats, warmup)
    print("\n-- int8 blocksize sweep (1 torch thread), tensor 4x512x768 with 3 outlier features")
    for bs, codec in codecs.items():
        enc = codec.encode(x)
        err = float((codec.decode(enc) - x).norm() / x.norm())
        print(f"blocksize {bs:>4}: rel L2 error {err:.4f}  fp32/int8 bytes {x.numel() * 4 / codec.wire_bytes(enc):.3f}  "
              f"enc+dec {times[bs][2] * 1e3:.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--blocksize", type=int, default=INT8_BLOCKSIZE)
    args = parser.parse_args()
    default_threads = torch.get_num_threads()
    one = report(1, args)
    blocksize_sweep(args.repeats, args.warmup)
    report(default_threads, args)
    print(f"int8_breakeven_gbps={one['breakeven']:.2f} int8_bytes_ratio={one['ratio']:.3f}")


if __name__ == "__main__":
    main()
