"""What ATOM's compute stream spends between sub-model turns and on device <-> host copies, measured
on the machine's CUDA device: the constants of the simulator's overhead model (`labkit.sim.atom.Overheads`).

- turn gap: one `SwapReplica` (the ATOM executor) trains `small` cut one layer per sub-model, with a
  short sequence so the stash copies are tiny; per turn, the seconds from the later of (the
  previous turn's compute end, this turn's load end) to this turn's compute start: the executor's
  Python, bookkeeping and stream synchronisation between turns, loading excluded.
- copy rates: a 256 MB fp16 tensor device -> pageable host (how the executor moves gradients and
  the stash), device -> pinned host, and pinned host -> device (how it loads), median of 5.

    PYTHONPATH=. python experiments/atom_turn_gap.py [--iterations 5] [--device cuda]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from labkit import DataConfig, ModelConfig, RunConfig
from labkit.data import WindowSampler, load_corpus
from labkit.executors.atom.layers import layer_names
from labkit.executors.atom.swap import SwapReplica, SwapSpan
from labkit.runtime.reference import reference_model

COPY_BYTES = 256 * 2**20


def turn_gaps(iterations: int, device: str, accumulation: int = 4) -> list[float]:
    """Seconds between turns, loading excluded, over `iterations` iterations after a cold one."""
    cfg = RunConfig(model=ModelConfig(size="small", seq_len=64), data=DataConfig(max_bytes=8_000_000),
                    microbatch=1, global_batch=accumulation, eval_every=0)
    model = reference_model(cfg)
    spans: list[SwapSpan] = []
    whole = sum(t.numel() * t.element_size() for t in [*model.parameters(), *model.buffers()])
    layers = len(layer_names(model))
    replica = SwapReplica(model, (1,) * layers, device, 4 * whole, prefetch=True, on_span=spans.append)
    sampler = WindowSampler(load_corpus(cfg.data).train, cfg.model.seq_len, cfg.seed)
    gaps: list[float] = []
    for it in range(iterations + 1):
        spans.clear()
        replica.iteration([sampler.batch(0, it * accumulation + j, 1) for j in range(accumulation)], 1e-3)
        if it:
            for prev, span in zip(spans, spans[1:]):
                ready = max(prev.compute_end, span.load_end or 0.0)
                gaps.append(span.compute_start - ready)
    replica.close()
    return gaps


def copy_gbps(kind: str) -> float:
    """GB/s of one 256 MB copy of `kind`, median of 5 after a warm-up."""
    dev = torch.empty(COPY_BYTES // 2, dtype=torch.float16, device="cuda")
    host = torch.empty(COPY_BYTES // 2, dtype=torch.float16, pin_memory=kind != "d2h pageable")
    times = []
    for _ in range(6):
        torch.cuda.synchronize()
        start = time.perf_counter()
        if kind == "h2d pinned":
            dev.copy_(host, non_blocking=True)
        else:
            host.copy_(dev)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return COPY_BYTES / statistics.median(times[1:]) / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="cpu: the turn gap only")
    args = parser.parse_args()
    name = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    print(f"device: {name}, torch {torch.__version__}")
    gaps = sorted(turn_gaps(args.iterations, args.device))
    print(f"turn gap: {len(gaps)} turns, median {1e3 * statistics.median(gaps):.3f} ms, "
          f"p10 {1e3 * gaps[len(gaps) // 10]:.3f} ms, p90 {1e3 * gaps[9 * len(gaps) // 10]:.3f} ms")
    for kind in ("d2h pageable", "d2h pinned", "h2d pinned") if args.device == "cuda" else ():
        print(f"copy {kind}: {copy_gbps(kind):.1f} GB/s")


if __name__ == "__main__":
    main()
