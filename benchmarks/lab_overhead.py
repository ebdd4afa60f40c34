"""What the notebook lab costs a run: tokens/s with the panel and every live chart attached vs
nothing attached (alternating runs of one config, medians), and the refresher's cost per tick once
50 000 events have been folded.

    PYTHONPATH=. python benchmarks/lab_overhead.py [--pairs 5] [--steps 160]

Last line: `lab_ratio=<with / without> tick_ms=<median refresher tick at 50 000 events>`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import labkit
from labkit import events as ev
from labkit.config import DataConfig, ModelConfig, RunConfig
from labkit.lab.live import Charts
from labkit.lab.panel import Lab
from labkit.lab.rows import Rows

BUFFERED = 50_000


def tokens_per_s(cfg: RunConfig, with_lab: bool) -> float:
    """Tokens/s of one run of `cfg`, with the whole panel attached or with nothing."""
    run = labkit.launch(cfg)
    lab = Lab(run) if with_lab else None
    summary = run.wait()
    if lab is not None:
        lab.close()
    assert summary["status"] == "finished", summary
    return summary["tokens_per_second"]


def synthetic_events(n: int) -> list[ev.Event]:
    """`n` events in a live 2 x 2 run's proportions: hops, load samples, steps, now and then a kill."""
    out: list[ev.Event] = []
    t = 0.0
    while len(out) < n:
        t += 0.01
        i = len(out)
        stage, peer = i % 2, f"s{i % 2}p{(i // 2) % 2}"
        out.append(ev.hop(t, trainer=f"t{i % 4}", stage=stage, peer=peer, direction="forward" if i % 3 else "backward",
                          nbytes=20_000, seconds=0.008, microbatch=i))
        if i % 8 == 0:
            out.append(ev.load(t, peer=peer, stage=stage, queue=i % 3))
        if i % 40 == 0:
            out.append(ev.step(t, step=i // 40, loss=3.0, samples=16, tokens=512))
        if i % 5000 == 0:
            out.append(ev.peer(t, peer=peer, stage=stage, state="killed", queue=0))
    return out[:n]


def tick_ms(repeats: int = 20) -> tuple[float, float]:
    """Median ms of one refresher tick (fold 100 new events, redraw every chart) after BUFFERED
    events, and ms to fold those BUFFERED events once."""
    events = synthetic_events(BUFFERED + 100 * repeats)
    rows = Rows(tokens_per_microbatch=128)
    start = time.perf_counter()
    rows.extend(events[:BUFFERED])
    fold_ms = (time.perf_counter() - start) * 1000
    charts = Charts()
    ticks = []
    for k in range(repeats):
        start = time.perf_counter()
        rows.extend(events[BUFFERED + 100 * k: BUFFERED + 100 * (k + 1)])
        charts.draw(rows)
        ticks.append((time.perf_counter() - start) * 1000)
    return statistics.median(ticks), fold_ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5, help="alternating (without, with) run pairs")
    parser.add_argument("--steps", type=int, default=160, help="optimizer steps per run")
    args = parser.parse_args()
    cfg = RunConfig(model=ModelConfig(size="nano", seq_len=64), data=DataConfig(max_bytes=4_000_000), stages=2,
                    peers=2, trainers=4, global_batch=32, microbatch=8, steps=args.steps, eval_every=0)
    tokens_per_s(cfg, False)  # warm-up: corpus cache, imports, numba
    without, with_lab = [], []
    for pair in range(args.pairs):
        for attached, into in ((False, without), (True, with_lab)) if pair % 2 == 0 else ((True, with_lab), (False, without)):
            into.append(tokens_per_s(cfg, attached))
            print(f"pair {pair}: {'with the lab' if attached else 'without    '} {into[-1]:8.0f} tokens/s")
    tick, fold = tick_ms()
    ratio = statistics.median(with_lab) / statistics.median(without)
    print(f"median tokens/s: without {statistics.median(without):.0f}, with the lab {statistics.median(with_lab):.0f}; "
          f"load average {os.getloadavg()[0]:.1f}")
    print(f"refresher at {BUFFERED} folded events: {tick:.1f} ms per tick (fold 100 events, redraw 6 charts); "
          f"folding the {BUFFERED} took {fold:.0f} ms")
    print(f"lab_ratio={ratio:.3f} tick_ms={tick:.1f}")


if __name__ == "__main__":
    main()
