"""SWARM Figure 6 (throughput vs 8 -> 128 peers) and Figure 7 (4 -> 32 stages, +/- rebalancing).

Figure 6: event granularity, T4 peers spread evenly over 4 stages of GPT-2 large, one trainer per
peer with 8 microbatches in flight, 500 Mb/s, 50 ms RTT, 8-bit activations and gradients
(compression 2), an all-reduce every 65536 samples of 512 tokens (the paper's LAMB batch of
16384 x 2048 tokens), 30 simulated minutes, no churn. Figure 7: fluid granularity, 32 h of churn at the Table 5 per-peer
preemption rate with the join rate scaled to the starting swarm (25 peers per block-equivalent
stage), no rebalancing vs T = 300 s, 5 seeds.
Run: PYTHONPATH=. python experiments/swarm_scaling.py [--plot docs/img/swarm_scaling]
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import numpy as np

from labkit.sim import PeerGroup, SimScenario, simulate
from labkit.sim.hardware import stage_costs
from labkit.sim.presets import TABLE5_CHURN, even_peers

PEERS = (8, 16, 32, 64, 128)
STAGES = (4, 8, 16, 32)


def figure6(peers: int) -> float:
    """Samples per second of `peers` T4s on 4 stages."""
    s = SimScenario(name=f"fig6 {peers}", model="large", stages=4, peers=even_peers("T4", peers // 4, 4),
                    trainers=peers, window=8, rtt_ms=50.0, bandwidth_mbps=500.0, compression=2.0, global_batch=65536,
                    duration=1800.0, bin_seconds=300.0)
    r = simulate(s, "events")
    return float(r.work.sum()) * s.microbatch / s.duration


def figure7(stages: int, period: float | None, seeds: int) -> tuple[float, float]:
    """(% of optimal overall, mean samples/s) over `seeds` 32 h runs with `stages` stages."""
    blocks = stage_costs(model="large", stages=stages, microbatch=4, seq_len=512, checkpointing=False).blocks
    counts = [max(1, round(25 * 4 * b * stages / (36 * 4))) for b in blocks]  # peers in proportion to blocks
    churn = dataclasses.replace(TABLE5_CHURN, join_per_hour=TABLE5_CHURN.join_per_hour * stages / 4)
    work = optimal = 0.0
    for seed in range(seeds):
        s = SimScenario(name=f"fig7 S={stages}", model="large", stages=stages,
                        peers=tuple(PeerGroup(device="T4", count=c, stage=k) for k, c in enumerate(counts)),
                        trainers=25 * stages, window=32, churn=churn, duration=churn.hours * 3600.0,
                        rebalance_period=period, bin_seconds=600.0, seed=seed)
        r = simulate(s, "fluid")
        work, optimal = work + r.work, optimal + r.optimal
    return 100.0 * float(np.sum(work) / np.sum(optimal)), float(np.sum(work)) * 4 / seeds / (32 * 3600.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--plot", type=Path, default=None)
    args = parser.parse_args()
    fig6 = [figure6(n) for n in PEERS]
    print(f"{'peers':>5} {'samples/s':>10} {'per peer':>9} {'vs linear from 8':>17}")
    for n, x in zip(PEERS, fig6):
        print(f"{n:5d} {x:10.1f} {x / n:9.2f} {100 * x / (fig6[0] * n / PEERS[0]):16.1f}%")
    fig7 = {(S, p): figure7(S, p, args.seeds) for S in STAGES for p in (None, 300.0)}
    print(f"{'stages':>6} {'none % opt':>11} {'T=300 % opt':>12} {'none samples/s':>15} {'T=300 samples/s':>16}")
    for S in STAGES:
        (a, x), (b, y) = fig7[(S, None)], fig7[(S, 300.0)]
        print(f"{S:6d} {a:11.1f} {b:12.1f} {x:15.1f} {y:16.1f}")
    if args.plot:
        import altair as alt

        from experiments._plot import save
        left = alt.Chart(alt.Data(values=[{"peers": n, "samples_per_s": x} for n, x in zip(PEERS, fig6)])).mark_line(
            point=True).encode(x="peers:Q", y="samples_per_s:Q").properties(
            width=300, height=240, title="Fig. 6: throughput vs peers (T4, 4 stages)")
        right = alt.Chart(alt.Data(values=[{"stages": S, "policy": "none" if p is None else "T=300",
                                            "pct_of_optimal": v[0]} for (S, p), v in fig7.items()])).mark_line(
            point=True).encode(x=alt.X("stages:Q", scale=alt.Scale(type="log", base=2)), y="pct_of_optimal:Q",
                               color="policy:N").properties(width=300, height=240,
                                                            title="Fig. 7: 32 h churn, % of optimal vs stages")
        print("plot:", save(alt.hconcat(left, right), args.plot))


if __name__ == "__main__":
    main()
