"""Named scenarios: `labkit simulate --preset NAME` and the reproductions start from these."""

from __future__ import annotations

from collections.abc import Callable

from labkit.sim.scenario import Link, PeerGroup, SimScenario
from labkit.sim.traces import ChurnModel

# Churn of the Table 5 reproduction: single preemptions plus bursts (0.2 per hour, each taking a
# mean 3 % of the live peers from one stage), joins falling to zero by hour 32; chosen on the
# no-rebalancing row only (the experiment's 10 seeds, paper 82.7 / 99.0 / 45.4 % of optimal, the
# closest of 20 settings, docs/reproductions.md); T = 300 s and T = 60 s were not tuned.
TABLE5_CHURN = ChurnModel(hours=32.0, join_per_hour=30.0, leave_per_peer_hour=0.07, waves_per_hour=0.2,
                          wave_fraction=0.03, join_decay=1.0)


def even_peers(device: str, per_stage: int, stages: int, region: str = "default") -> tuple[PeerGroup, ...]:
    """`per_stage` peers of one device on every stage."""
    return tuple(PeerGroup(device=device, count=per_stage, stage=s, region=region) for s in range(stages))


def table5(period: float | None = None, seed: int = 0, stages: int = 4, per_stage: int = 100) -> SimScenario:
    """SWARM Table 5 / App. I: 32 h of preemptible T4s on 4 stages, rebalancing period T."""
    return SimScenario(name=f"table5 T={period}", model="large", stages=stages,
                       peers=even_peers("T4", per_stage, stages), trainers=100, window=32, churn=TABLE5_CHURN,
                       duration=TABLE5_CHURN.hours * 3600.0, rebalance_period=period, bin_seconds=60.0, seed=seed)


def small_swarm() -> SimScenario:
    """16 T4s on 4 stages for ten minutes with some churn and T = 60 s: a quick look."""
    return SimScenario(name="small-swarm", model="small", stages=4, peers=even_peers("T4", 4, 4), trainers=4, window=8,
                       duration=600.0, trace=((120.0, -2), (300.0, 3), (420.0, -1)), rebalance_period=60.0,
                       global_batch=256, bin_seconds=30.0)


def global_mix() -> SimScenario:
    """Mixed consumer and datacenter GPUs in three regions, trainers in Europe, one hour."""
    peers = (PeerGroup(device="RTX3080", count=6, stage=0, region="eu"),
             PeerGroup(device="RTX4090", count=4, stage=1, region="us"),
             PeerGroup(device="A100", count=2, stage=2, region="us"),
             PeerGroup(device="RTX2080", count=8, stage=3, region="asia"))
    links = (Link(a="eu", b="eu", rtt_ms=10.0, bandwidth_mbps=1000.0),
             Link(a="eu", b="us", rtt_ms=90.0, bandwidth_mbps=500.0),
             Link(a="eu", b="asia", rtt_ms=220.0, bandwidth_mbps=200.0))
    return SimScenario(name="global-mix", model="medium", stages=4, peers=peers, trainer_region="eu", links=links,
                       trainers=8, window=8, compression=2.0, duration=3600.0,
                       churn=ChurnModel(hours=1.0, join_per_hour=10.0, leave_per_peer_hour=0.4), rebalance_period=120.0,
                       global_batch=1024, bin_seconds=60.0)


def world(stages: int, per_stage: int, trainers: int, name: str) -> SimScenario:
    """A world for the real runtime (`RunConfig(world=...)`): SWARM's xxlarge priced on a mix of
    T4, V100, RTX3080 and A100 in three regions (3 : 2 : 2 : 1 of every stage), trainers in eu.
    Each device takes 0.03-0.5 s a request, so 2 CPU cores computing the nano stand-in keep up."""
    mix = (("T4", "eu", 3), ("V100", "us", 2), ("RTX3080", "eu", 2), ("A100", "asia", 1))
    peers = tuple(PeerGroup(device=d, count=per_stage * k // 8, stage=st, region=r)
                  for st in range(stages) for d, r, k in mix)
    links = (Link(a="eu", b="eu", rtt_ms=5.0, bandwidth_mbps=1000.0), Link(a="eu", b="us", rtt_ms=90.0, bandwidth_mbps=200.0),
             Link(a="eu", b="asia", rtt_ms=200.0, bandwidth_mbps=100.0), Link(a="us", b="asia", rtt_ms=150.0, bandwidth_mbps=100.0))
    return SimScenario(name=name, model="xxlarge", stages=stages, peers=peers, trainer_region="eu", links=links,
                       trainers=trainers, window=2, microbatch=4, seq_len=512, duration=120.0, bin_seconds=10.0)


WORLD_PRESETS: dict[str, Callable[[], SimScenario]] = {
    "world-64": lambda: world(4, 16, 16, "world-64"),
    "world-16": lambda: world(2, 8, 4, "world-16"),
}

SIM_PRESETS: dict[str, Callable[[], SimScenario]] = {
    "small-swarm": small_swarm,
    "global-mix": global_mix,
    "table5-none": lambda: table5(None),
    "table5-t300": lambda: table5(300.0),
    "table5-t60": lambda: table5(60.0),
}
