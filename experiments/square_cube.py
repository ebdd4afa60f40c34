"""Square-cube law (SWARM Sec. 3.1) for the GPT-2 family: share of time spent communicating.

One block per server (stages = layers), one trainer with one microbatch of 1 x 1024 tokens in
flight, T4 peers (30 % of fp16 tensor peak), 500 Mb/s and 10 ms RTT, fp16 activations. Compute
per block grows as d^2 (d = model width) while the bytes per hop grow as d, so the share of
time communicating falls as the model grows.
Run: PYTHONPATH=. python experiments/square_cube.py [--plot docs/img/square_cube]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from labkit.config import MODEL_SIZES
from labkit.sim import PeerGroup, SimScenario, simulate
from labkit.sim.hardware import model_shape, stage_costs

MODELS = [m for m in MODEL_SIZES] + ["xxlarge", "gpt3"]


def communication_share(model: str, bandwidth_mbps: float = 500.0, rtt_ms: float = 10.0) -> tuple[float, float]:
    """(% of wall time not computing, block FLOPs per microbatch) for `model`."""
    d, layers = model_shape(model)
    s = SimScenario(name=f"square-cube {model}", model=model, stages=layers,
                    peers=tuple(PeerGroup(device="T4", count=1, stage=k) for k in range(layers)), trainers=1, window=1,
                    microbatch=1, seq_len=1024, rtt_ms=rtt_ms, bandwidth_mbps=bandwidth_mbps, service_cv=0.0,
                    duration=300.0, bin_seconds=300.0)
    r = simulate(s, "events")
    c = stage_costs(model=model, stages=layers, microbatch=1, seq_len=1024, checkpointing=False)
    return 100.0 * (1.0 - float(r.stage_busy.sum()) / s.duration), c.fwd_flops[0] + c.bwd_flops[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plot", type=Path, default=None)
    args = parser.parse_args()
    records = []
    print(f"{'model':<8} {'d':>6} {'FLOPs/block':>12} {'MB/hop':>7} {'comm %':>7}")
    for model in MODELS:
        d, _ = model_shape(model)
        share, flops = communication_share(model)
        print(f"{model:<8} {d:6d} {flops:12.3g} {1024 * d * 2 / 1e6:7.2f} {share:7.1f}")
        records.append({"model": model, "d_model": d, "communication_pct": share})
    if args.plot:
        import altair as alt

        from experiments._plot import save
        base = alt.Chart(alt.Data(values=records)).encode(
            x=alt.X("d_model:Q", scale=alt.Scale(type="log"), title="model width d"),
            y=alt.Y("communication_pct:Q", title="% of time communicating"))
        chart = (base.mark_line(point=True) + base.mark_text(dy=-10).encode(text="model:N")).properties(
            width=420, height=260, title="Square-cube law: T4 peers, 500 Mb/s, 10 ms RTT")
        print("plot:", save(chart, args.plot))


if __name__ == "__main__":
    main()
