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
import statistics
import time
from collections.abc import Callable

import torch

from labkit.config import ModelConfig
from labkit.model import build_stage, init_full_state
from labkit.wire import CODECS, Codec, get_codec
from labkit.wire.codecs import INT8_BLOCKSIZE


def seconds(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def codec_times(codecs: dict[str, Codec], x: torch.Tensor, repeats: int, warmup: int) -> dict[str, tuple[float, float, float]]:
    """Median (encode, decode, encode+decode) seconds per codec, repeats interleaved across codecs."""
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in codecs}
    for r in range(warmup + repeats):
        for name, codec in codecs.items():
            box: list = []
            enc = seconds(lambda: box.append(codec.encode(x)))
            dec = seconds(lambda: codec.decode(box[0]))
            if r >= warmup:
                runs[name].append((enc, dec))
    return {name: (statistics.median(e for e, _ in v), statistics.median(d for _, d in v), statistics.median(e + d for e, d in v))
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
    codecs = {name: get_codec(name, blocksize=args.blocksize) if name == "int8" else get_codec(name) for name in CODECS}
    x = torch.randn(4, 512, 768, generator=torch.Generator().manual_seed(0))
    raw = x.numel() * x.element_size()
    times = codec_times(codecs, x, args.repeats, args.warmup)
    step, act = stage_step_seconds(args.repeats, args.warmup)
    act_times = codec_times(codecs, act, args.repeats, args.warmup)
    print(f"\n-- torch threads={threads}; tensor 4x512x768 float32 ({raw:,} bytes); int8 blocksize={args.blocksize}; "
          f"medians of {args.repeats} after {args.warmup} warm-up")
    print(f"{'codec':>5} {'enc ms':>8} {'dec ms':>8} {'enc+dec':>8} {'enc GB/s':>9} {'dec GB/s':>9} "
          f"{'wire bytes':>11} {'ratio':>6} {'break-even Gb/s':>15} {'stage share':>11}")
    breakeven = {}
    for name, codec in codecs.items():
        enc, dec, both = times[name]
        wire = codec.wire_bytes(codec.encode(x))
        breakeven[name] = (raw - wire) * 8 / both / 1e9
        share = act_times[name][2] / step
        print(f"{name:>5} {enc * 1e3:8.3f} {dec * 1e3:8.3f} {both * 1e3:8.3f} {raw / enc / 1e9:9.2f} {raw / dec / 1e9:9.2f} "
              f"{wire:11,d} {raw / wire:6.3f} {breakeven[name]:15.2f} {share:11.2%}")
    print(f"nano stage 0 of 2 (blocks 0-1 + embeddings), 16x128 microbatch: forward+backward {step * 1e3:.2f} ms; "
          f"its output {tuple(act.shape)}; stage share = codec enc+dec on that output / step (the gradient sent back adds as much again)")
    return {"breakeven": breakeven["int8"], "ratio": raw / codecs["int8"].wire_bytes(codecs["int8"].encode(x))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--blocksize", type=int, default=INT8_BLOCKSIZE)
    args = parser.parse_args()
    default_threads = torch.get_num_threads()
    one = report(1, args)
    report(default_threads, args)
    print(f"int8_breakeven_gbps={one['breakeven']:.2f} int8_bytes_ratio={one['ratio']:.3f}")


if __name__ == "__main__":
    main()
