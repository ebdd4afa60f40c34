"""Overhead of the in-process SWARM runtime against a plain PyTorch loop.

The same model, data, samples and global batch are trained by (a) `train_reference`, a plain
single-process loop, (b) labkit in-process with 1 stage x 1 peer and (c) 2 stages x 1 peer.
Repeats are interleaved and medians reported, since the machine is shared and noisy.

    python benchmarks/overhead.py [--size nano] [--steps 40] [--repeats 3]

Last line: overhead_ratio=<labkit 1x1 tokens/s / plain tokens/s>.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import labkit
from labkit.config import DataConfig, ModelConfig, RunConfig
from labkit.data import WindowSampler, load_corpus
from labkit.runtime.reference import reference_model, train_reference


def plain_tokens_per_second(cfg: RunConfig, sampler: WindowSampler) -> float:
    model = reference_model(cfg)
    train_reference(cfg, sampler, steps=2, model=model)  # warm-up, as labkit's first step is excluded too
    start = time.perf_counter()
    train_reference(cfg, sampler, steps=cfg.steps - 1, model=model)
    return (cfg.steps - 1) * cfg.global_batch * cfg.model.seq_len / (time.perf_counter() - start)


def labkit_tokens_per_second(cfg: RunConfig) -> float:
    summary = labkit.launch(cfg).wait()
    assert summary["status"] == "finished", summary
    return summary["tokens_per_second"]


def workload_parser(description: str) -> argparse.ArgumentParser:
    """Flags of the training workload the throughput benchmarks share (and --repeats)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--size", default="nano")
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--global-batch", type=int, default=32)
    parser.add_argument("--microbatch", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    return parser


def workload_config(args: argparse.Namespace, **changes: object) -> RunConfig:
    """The benchmark workload: a capped stdlib corpus, no evaluation during the run."""
    return RunConfig(model=ModelConfig(size=args.size, seq_len=args.seq_len), data=DataConfig(max_bytes=8_000_000),
                     global_batch=args.global_batch, microbatch=args.microbatch, steps=args.steps, eval_every=0,
                     eval_batches=1, **changes)


def main() -> None:
    parser = workload_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    base = workload_config(args, threads=args.threads)
    sampler = WindowSampler(load_corpus(base.data).train, base.model.seq_len, base.seed)
    variants = {
        "labkit 1x1": base.replace(stages=1, peers=1, trainers=1),
        "labkit 2x1": base.replace(stages=2, peers=1, trainers=2),
    }
    results: dict[str, list[float]] = {"plain": [], **{k: [] for k in variants}}
    for _ in range(args.repeats):
        results["plain"].append(plain_tokens_per_second(base, sampler))
        for name, cfg in variants.items():
            results[name].append(labkit_tokens_per_second(cfg))
    print(f"model={args.size} seq_len={args.seq_len} global_batch={args.global_batch} microbatch={args.microbatch} "
          f"steps={args.steps} threads={args.threads} repeats={args.repeats}")
    medians = {name: statistics.median(values) for name, values in results.items()}
    for name, values in results.items():
        print(f"{name:>11}: median {medians[name]:,.0f} tokens/s  (runs: {', '.join(f'{v:,.0f}' for v in values)})")
    paired = [a / b for a, b in zip(results["labkit 1x1"], results["plain"])]
    print(f"paired 1x1/plain ratios per repeat: {', '.join(f'{r:.3f}' for r in paired)} (median {statistics.median(paired):.3f})")
    print(f"overhead_ratio={medians['labkit 1x1'] / medians['plain']:.3f}")


if __name__ == "__main__":
    main()
