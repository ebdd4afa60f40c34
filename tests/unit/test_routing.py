"""Router semantics (SWARM Algorithm 1) and the rebalancing policy's public functions."""

import heapq

from labkit.swarm.rebalance import Move, choose_move, join_stage
from labkit.swarm.routing import Router


def _virtual_clock_shares(speeds: dict[str, float], hops: int) -> dict[str, int]:
    """Route `hops` microbatches with one in flight per peer; a peer answers in 1/speed seconds."""
    router = Router(gamma=0.3)
    for name in speeds:
        router.announce(name, stage=0)
    counts = dict.fromkeys(speeds, 0)
    clock = [(0.0, i) for i in range(len(speeds))]  # free trainers: (time, id)
    for _ in range(hops):
        now, trainer = heapq.heappop(clock)
        peer = router.choose(0)
        seconds = 1.0 / speeds[peer]
        router.report(peer, seconds)
        counts[peer] += 1
        heapq.heappush(clock, (now + seconds, trainer))
    return counts


def test_iwrr_shares_converge_to_speeds_1_2_4():
    counts = _virtual_clock_shares({"slow": 1.0, "mid": 2.0, "fast": 4.0}, hops=7000)
    total = sum(counts.values())
    for name, share in (("slow", 1 / 7), ("mid", 2 / 7), ("fast", 4 / 7)):
        assert abs(counts[name] / total - share) < 0.01, counts


def test_banned_peer_gets_nothing_until_reannounced():
    router = Router()
    for name in "abc":
        router.announce(name, stage=1)
    router.ban("b")
    assert "b" not in {router.choose(1) for _ in range(50)}
    assert router.peers(1, include_banned=False) == ["a", "c"]
    router.announce("b", stage=1)  # re-enters at the stage's smallest priority + epsilon
    assert router.record("b").priority == min(router.record(p).priority for p in "ac") + router.epsilon
    assert "b" in {router.choose(1) for _ in range(3)}


def test_newcomer_gets_stage_mean_ema_and_floor_priority():
    router = Router(epsilon=0.5)
    router.announce("a", stage=0)
    router.announce("b", stage=0)
    router.report("a", 3.0)  # a's first answer replaces its prior: ema a = 3; b keeps the prior 1
    router.choose(0)
    router.announce("c", stage=0)
    record = router.record("c")
    assert abs(record.ema - (3.0 + 1.0) / 2) < 1e-12
    assert record.priority == 1.5  # a: 0.5 then charged 3; b: 0.5 + 0.5 = 1.0 -> floor 1.0 + epsilon
    assert router.choose(1) is None


def test_removed_peer_slot_is_reused_without_leaking_state():
    router = Router()
    router.announce("a", stage=0)
    router.remove("a")
    router.announce("b", stage=2)
    assert router.peers() == ["b"] and router.choose(0) is None and router.choose(2) == "b"


def test_choose_move_and_join_stage():
    queues = {"p1": (0, 1.0), "p0": (0, 1.0), "q": (1, 9.0), "r": (2, 4.0)}
    assert choose_move(queues, 3) == Move(peer="p0", source=0, target=1)
    assert join_stage(queues, 3) == 1
    assert join_stage({"a": (0, 0.0)}, 2) == 1
    idle = {"a": (0, 0.0), "b": (0, 0.0), "c": (1, 0.0), "d": (2, 0.0), "e": (2, 0.0)}
    assert join_stage(idle, 3) == 1  # every queue empty: the stage with the fewest peers, not the first
    assert join_stage(idle | {"f": (1, 0.0)}, 3) == 0  # equal loads and counts: the first stage


def test_peers_joining_at_once_spread_as_if_they_joined_one_after_another():
    queues = {"a": (0, 10.0), "b": (1, 4.0)}
    assert join_stage(queues, 2) == 0
    assert join_stage(queues, 2, starting={0: 1}) == 0  # stage 0's 10 over 2 peers: 5 > 4
    assert join_stage(queues, 2, starting={0: 2}) == 1  # 10 over 3 peers: 3.3 < 4
    assert join_stage({"a": (0, 1.0)}, 2, starting={1: 1}) == 0  # an empty stage someone joins is not empty
    assert join_stage({"a": (0, 1.0)}, 3, starting={1: 1}) == 2
    assert choose_move({"a": (0, 0.0), "b": (1, 5.0)}, 2) is None  # would empty stage 0


def test_debiased_router_learns_a_link_from_its_first_answer():
    """Issue 26: a near peer (20 ms) and a far one (300 ms) from a 1 s prior. Debiased, the first
    answer of each replaces the prior, so the far peer gets its fair ~1/16 of the picks at once;
    the paper's plain EMA keeps sending it about a third of the first 48 (the warm-up that made the
    real two-continents runs route a third of their hops far)."""
    def far_share(debias: bool) -> float:
        router = Router(debias=debias)
        router.announce("near", stage=0)
        router.announce("far", stage=0)
        far = 0
        for _ in range(48):
            peer = router.choose(0)
            router.report(peer, 0.02 if peer == "near" else 0.3)
            far += peer == "far"
        return far / 48

    assert far_share(True) <= 0.1 < 0.25 <= far_share(False)
    assert Router(debias=True).prior_weight == 0.0 and Router(debias=False).prior_weight == 1.0


def test_debiased_ema_is_the_mean_while_young_and_the_ema_later():
    router = Router(gamma=0.5)
    router.announce("a", stage=0)
    router.report("a", 2.0)
    assert router.record("a").ema == 2.0  # the first answer replaces the prior of 1 s
    router.report("a", 4.0)  # weights 0.5 * 2 (the first, decayed) and 0.5 * 4 over 0.75
    assert abs(router.record("a").ema - (0.25 * 2.0 + 0.5 * 4.0) / 0.75) < 1e-12
    classic = Router(gamma=0.5, debias=False)
    classic.announce("a", stage=0)
    classic.report("a", 2.0)
    assert classic.record("a").ema == 0.5 * 2.0 + 0.5 * 1.0


def test_routers_with_phases_spread_their_first_picks_and_keep_them_apart():
    # four trainers' routers (one microbatch in flight each) over two equal peers: without a phase
    # all four send their first microbatch to "a" and then alternate in step; trainer k skipping k
    # picks splits every round 2-2
    routers = [Router(phase=k) for k in range(4)]
    plain = [Router() for _ in range(4)]
    for r in routers + plain:
        r.announce("a", stage=1)
        r.announce("b", stage=1)
    for _ in range(6):
        picks = [r.choose(1) for r in routers]
        assert sorted(picks) == ["a", "a", "b", "b"], picks
        herd = [r.choose(1) for r in plain]
        assert len(set(herd)) == 1, herd
        for r, peer in zip(routers + plain, picks + herd):
            r.report(peer, 0.5)  # each answers in 0.5 s, not the 1 s prior its first pick was charged


def test_a_phase_skips_only_at_a_stages_first_pick_and_must_not_be_negative():
    r = Router(phase=3)
    assert r.choose(0) is None  # no peer yet: the skip waits for the first live one
    for name in "abc":
        r.announce(name, stage=0)
    assert [r.choose(0) for _ in range(4)] == ["a", "b", "c", "a"]  # 3 mod 3 = 0 skipped
    r2 = Router(phase=1)
    for name in "abc":
        r2.announce(name, stage=0)
    assert [r2.choose(0) for _ in range(4)] == ["b", "c", "a", "b"]
    try:
        Router(phase=-1)
    except ValueError as exc:
        assert "phase=-1" in str(exc) and ">= 0" in str(exc)
    else:
        raise AssertionError("a negative phase was accepted")


def test_a_trainers_router_phase_is_its_rank_times_its_lanes():
    from labkit.runtime.trainer import router_phase, trainer_name
    assert [router_phase(trainer_name(k), 2) for k in range(3)] == [0, 2, 4]
    assert router_phase("learner", 1) == 0
