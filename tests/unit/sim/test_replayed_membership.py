"""A real run's membership decisions replayed in the simulator (`run_events(moves=, join_stages=)`,
`labkit.lab.worlds.real_membership`): what is left between the two runs then is not which peer
Algorithm 2 moved, nor which stage a joiner took."""

from __future__ import annotations

from labkit.lab.worlds import of_type, real_membership
from labkit.sim import SimScenario
from labkit.sim.events_sim import run_events
from labkit.sim.presets import even_peers


def _world(**kw) -> SimScenario:
    return SimScenario(**{**dict(model="small", stages=4, peers=even_peers("T4", 3, 4), duration=60.0, bin_seconds=10.0,
                                 service_cv=0.0, trainers=4, window=2, rebalance_period=5.0, move_seconds=1.0), **kw})


def test_the_moves_and_join_stages_given_are_made_and_algorithm_2_makes_none() -> None:
    own = of_type(run_events(_world(trace=((10.0, 1),))).events, "peer")
    assert any(e["state"] == "moved" for e in own), "the world has Algorithm 2 moves of its own to replace"
    peers = of_type(run_events(_world(trace=((10.0, 1),)), moves=[(20.0, 0, 3), (30.0, 5, 0)], join_stages=[2]).events,
                    "peer")
    assert [(e["t"], e["peer"], e["stage"]) for e in peers if e["state"] == "moved"] == [
        (20.0, "peer-00000", 3), (30.0, "peer-00005", 0)]
    assert [(e["t"], e["peer"], e["stage"]) for e in peers if e["state"] == "joined" and e["t"] > 0] == [
        (10.0, "peer-00012", 2)]
    assert [(e["t"], e["peer"]) for e in peers if e["state"] == "alive" and e["t"] > 0][:1] == [(11.0, "peer-00012")]


def test_a_move_whose_peer_is_not_serving_then_is_skipped() -> None:
    peers = of_type(run_events(_world(trace=((5.0, -1),), seed=1), moves=[(20.0, 3, 1)]).events, "peer")
    killed, = [e["peer"] for e in peers if e["state"] == "killed"]
    index = int(killed.split("-")[1])
    peers = of_type(run_events(_world(trace=((5.0, -1),), seed=1), moves=[(20.0, index, (index // 3 + 1) % 4)]).events,
                    "peer")
    assert not [e for e in peers if e["state"] == "moved"]


def test_a_real_runs_moves_are_known_by_their_place_and_its_joiners_by_their_turn() -> None:
    """s1p0 moves twice (its place stays s1p0), the trace's joiner s1p2 moves once: the simulator's
    peer 2 (the 3rd in the file) and 4 (its first joiner), at the times each left its stage."""
    s = SimScenario(model="small", stages=2, peers=even_peers("T4", 2, 2))
    peer = lambda t, state, name, stage, **kw: {"type": "peer", "t": t, "state": state, "peer": name, "stage": stage,
                                                "queue": 0, **kw}
    events = [peer(99.9, "joined", n, int(n[1])) for n in ("s0p0", "s0p1", "s1p0", "s1p1")]
    events += [{"type": "run", "t": 100.0, "state": "started"}, peer(104.0, "killed", "s1p1", 1),
               peer(105.0, "joined", "s1p2", 1),
               peer(106.0, "joined", "s0p2", 0), peer(106.0, "moved", "s1p0", 1, to="s0p2", to_stage=0, place="s1p0",
                                                      left_at=105.5),
               peer(108.0, "joined", "s1p3", 1), peer(108.0, "moved", "s0p2", 0, to="s1p3", to_stage=1, place="s1p0",
                                                      left_at=107.5),
               peer(109.0, "joined", "s0p3", 0), peer(109.0, "moved", "s1p2", 1, to="s0p3", to_stage=0, place="s1p2",
                                                      left_at=108.5)]
    assert real_membership(s, events, 100.0) == ([(5.5, 2, 0), (7.5, 2, 1), (8.5, 4, 0)], [1])
