"""The coordinator's ledger and step boundary over the in-memory fake transport: no model, no
trainer threads. The test plays the trainers: it takes tasks, has fake peers accumulate, and
credits them; the fake peers reduce among themselves with the real ring."""

from __future__ import annotations

import tempfile
from pathlib import Path
import threading

import pytest
import torch

from labkit.config import ModelConfig, RunConfig, SyncConfig
from labkit.runtime import moves, recovery
from labkit.runtime.boundary import Commit, step_boundary
from labkit.runtime.coordinator import Coordinator
from labkit.executors.swarm.core import SwarmCore
from labkit.runtime.eventlog import EventLog
from tests.unit.fake_transport import FakePeers
from tests.waiting import wait_until

CFG = RunConfig(model=ModelConfig(size="nano", seq_len=32), stages=2, peers=2, global_batch=8, microbatch=2, steps=3,
                eval_every=0)


def _coordinator(cfg: RunConfig = CFG) -> tuple[Coordinator, FakePeers, EventLog]:
    log, peers = EventLog(), FakePeers()
    states = [{"params": {"stage": s}, "optimizer": None} for s in range(cfg.stages)]
    return Coordinator(cfg, log.emit, peers, states, checkpoints=tempfile.mkdtemp(prefix="labkit-test-")), peers, log


def _play_step(c: Coordinator, peers: FakePeers, route: dict[int, list[str]], grad: float = 1.0) -> None:
    """Hand out every microbatch of the step; microbatch i goes to route[stage][i % len]."""
    index = 0
    while (work := c.next_task("t0")) is not None and not c.ledger.ready():
        task, _ = work
        credits = {}
        for stage in task.stages:
            name = route[stage][index % len(route[stage])]
            peers.made[name].accumulate([grad, 2 * grad], c.cfg.microbatch, task.key)
            credits[stage] = name
        c.finish("t0", task, credits, loss=0.5)
        index += 1
        if c.ledger.ready():
            return


def _boundary(c: Coordinator) -> Commit:
    """Run the step boundary on the coordinator's books and apply its commit, as its thread does."""
    with c.cond:
        commit = step_boundary(c.books())
        c.apply(commit)
        return commit


def test_allreduce_applies_the_stage_sum_on_every_peer_and_commits_the_step() -> None:
    c, peers, log = _coordinator()
    _play_step(c, peers, {0: ["s0p0", "s0p1"], 1: ["s1p0", "s1p1"]})
    assert c.ledger.ready()
    _boundary(c)
    for name in ("s0p0", "s0p1", "s1p0", "s1p1"):
        (method, grads), = peers.made[name].applied
        assert method == "optimizer_step"
        assert torch.equal(grads[0], torch.tensor([4.0, 8.0]))  # 4 microbatches of [1, 2] over the stage's peers
    step, = log.history("step")
    assert step["step"] == 1 and step["stage_samples"] == [8, 8] and step["loss"] == pytest.approx(2.0)
    assert [(e["kind"], e["bytes"]) for e in log.history("sync")] == [("allreduce", 2 * 8)] * 2  # 2 (N-1) x 8 bytes
    assert c.ledger.step == 1 and c.committed_states()[1]["steps_taken"] == 1
    assert step["boundary"]["tensor_bytes"] == 0 and set(step["boundary"]["seconds"]) == {"prepare", "commit_step"}


def test_the_boundary_is_a_value_that_changes_nothing_until_the_coordinator_applies_it() -> None:
    c, peers, log = _coordinator()
    _play_step(c, peers, {0: ["s0p0", "s0p1"], 1: ["s1p0", "s1p1"]})
    with c.cond:
        commit = step_boundary(c.books())
        assert c.ledger.step == 0 and not log.history("step") and c.schedule.inner == 0
        assert commit.taken and commit.keep == [["s0p0", "s0p1"], ["s1p0", "s1p1"]] and not commit.drop
        assert [e["type"] for e in commit.events] == ["sync", "sync", "step"] and commit.diverged is None
        c.apply(commit)
    assert c.ledger.step == 1 and c.committed_states()[1]["steps_taken"] == 1 and len(log.history("step")) == 1


def test_a_peer_whose_sum_lacks_a_credited_attempt_breaks_the_run_loudly() -> None:
    c, peers, _ = _coordinator()
    _play_step(c, peers, {0: ["s0p0"], 1: ["s1p0"]})
    peers.made["s0p0"].attempts.popitem()  # a credited gradient gone from the sum: no fault explains it
    with pytest.raises(RuntimeError, match=r"accounting broke at step 1: \{'s0p0': 'its sum lacks credited attempts"):
        _boundary(c)


def test_a_late_backward_after_a_timeout_is_dropped_not_evicted_and_recomputed() -> None:
    """A trainer gives up on s1p1 (a loss request past `peer_timeout`) and retries on s1p0; the
    late request accumulates on s1p1 all the same. The boundary drops s1p1's sum (no credit came
    for that attempt) and recomputes what the ledger credited it; no peer is evicted."""
    c, peers, log = _coordinator()
    task, _ = c.next_task("t0")
    peers.made["s1p1"].accumulate([9.0, 9.0], 2, task.key)  # served after its trainer gave up
    c.peer_timed_out("s1p1", may_have_accumulated=True)
    for name in ("s1p0", "s0p0"):
        peers.made[name].accumulate([1.0, 2.0], 2, task.key)
    c.finish("t0", task, {0: "s0p0", 1: "s1p0"}, loss=0.5)
    _play_step(c, peers, {0: ["s0p0"], 1: ["s1p0", "s1p1"]})
    commit = _boundary(c)
    assert list(commit.drop) == ["s1p1"] and not commit.evict and not commit.taken
    assert str(task.key) in commit.drop["s1p1"]
    banned, = [e for e in log.history("peer") if e["state"] == "banned"]
    assert banned["peer"] == "s1p1" and "may accumulate" in banned["reason"]
    assert peers.suspected == ["s1p1"], "the backend is asked whether the peer hangs"
    assert not [e for e in log.history("peer") if e["state"] == "killed"] and peers.made["s1p1"].samples == 0
    _play_step(c, peers, {0: ["s0p0"], 1: ["s1p0"]})
    _boundary(c)
    step, = log.history("step")
    assert step["stage_samples"] == [8, 8]
    (_, grads), = peers.made["s1p0"].applied
    assert torch.equal(grads[0], torch.tensor([4.0, 8.0])), "the late gradient is in no stage's sum"


def test_a_gradient_of_an_earlier_step_is_dropped_at_the_next_boundary() -> None:
    """A request that lands after its step was taken accumulates into the next step's sum under
    its own (earlier) attempt key: the next boundary drops that sum and recomputes its credits."""
    c, peers, log = _coordinator()
    _play_step(c, peers, {0: ["s0p0"], 1: ["s1p0"]})
    _boundary(c)
    peers.made["s0p0"].accumulate([5.0, 5.0], 2, (0, 1, 99))  # step 0's attempt, arriving late
    _play_step(c, peers, {0: ["s0p0"], 1: ["s1p0"]})
    commit = _boundary(c)
    assert list(commit.drop) == ["s0p0"] and "(0, 1, 99)" in commit.drop["s0p0"]
    _play_step(c, peers, {0: ["s0p1"], 1: ["s1p0"]})
    _boundary(c)
    assert [e["step"] for e in log.history("step")] == [1, 2]


def test_a_peer_failing_while_its_stage_reduces_is_evicted_and_its_samples_recomputed() -> None:
    c, peers, log = _coordinator()
    _play_step(c, peers, {0: ["s0p0", "s0p1"], 1: ["s1p0"]})
    peers.made["s0p1"].fail_on.add("prepare")
    _boundary(c)
    killed, = [e for e in log.history("peer") if e["state"] == "killed"]
    assert killed["peer"] == "s0p1" and killed["lost_samples"] == 4
    assert "prepare failed at the step boundary" in killed["reason"]
    assert not [p for p in peers.made.values() if p.applied if p.name != "s0p1"], "no peer stepped"
    assert not log.history("step") and not c.ledger.ready(), "no step without the lost samples"
    task, _ = c.next_task("t0")
    assert task.stages == frozenset({0}), "only the stage that lost the samples recomputes them"


def test_diloco_outer_step_averages_pseudo_gradients_weighted_by_samples() -> None:
    cfg = CFG.replace(sync=SyncConfig(mode="diloco", inner_steps=1))
    c, peers, log = _coordinator(cfg)
    route = {0: ["s0p0", "s0p0", "s0p0", "s0p1"], 1: ["s1p0", "s1p1"]}  # s0p0 takes 3 of 4 microbatches
    peers.made["s0p0"].pseudo, peers.made["s0p1"].pseudo = [torch.tensor([4.0, 0.0])], [torch.tensor([0.0, 8.0])]
    _play_step(c, peers, route)
    _boundary(c)
    for name in ("s0p0", "s0p1"):
        method, delta = peers.made[name].applied[-1]
        assert method == "outer_step" and torch.equal(delta[0], torch.tensor([3.0, 2.0]))  # 0.75 * a + 0.25 * b
    assert [(e["stage"], e["kind"], e["peers"]) for e in log.history("sync")] == [(0, "diloco", 2), (1, "diloco", 2)]
    boundary = log.history("step")[0]["boundary"]
    assert set(boundary["seconds"]) == {"prepare", "commit_step", "outer_reduce", "outer_apply"}
    assert boundary["total"] >= sum(boundary["seconds"].values()) and boundary["peer_seconds"] == {}  # fakes: unmeasured
    assert boundary["tensor_bytes"] == 0


def test_verbs_after_the_run_ended_are_refused_with_one_clear_error() -> None:
    c, _, _ = _coordinator()
    c.stop()
    with pytest.raises(RuntimeError, match="kill_peer is not available: the run has ended"):
        c.members.kill_peer("s0p0")
    with pytest.raises(RuntimeError, match="set_compression is not available"):
        SwarmCore(c).set_compression("fp16")


def test_gradients_of_a_dead_trainers_microbatch_are_dropped_and_their_samples_recomputed() -> None:
    """A trainer dies mid-microbatch: a peer accumulated its gradient, no credit will come. The
    peer drops its gradients and its credits are recomputed (elsewhere or by itself); it is not
    evicted, which could leave its stage empty, and the run does not stop on broken accounting."""
    c, peers, log = _coordinator()
    task, _ = c.next_task("t9")
    peers.made["s1p1"].accumulate([1.0, 1.0], 2, task.key)  # t9's loss request reached s1p1, then its worker died
    c.trainer_lost("t9", "its worker left")
    _play_step(c, peers, {0: ["s0p0"], 1: ["s1p0", "s1p1"]})
    credited = c.ledger.samples(1)["s1p1"]
    _boundary(c)
    dropped, = [e for e in log.history("setting") if e["name"] == "gradients_dropped"]
    assert dropped["value"].startswith(f"s1p1: its sum holds attempts the ledger never credited it: [{task.key}]")
    assert f"{credited} samples to recompute" in dropped["value"]
    assert not [e for e in log.history("peer") if e["state"] == "killed"] and "s1p1" in c.members.peers
    assert peers.made["s1p1"].samples == 0 and "s1p1" not in c.ledger.samples(1)
    assert not log.history("step"), "the step waits for the dropped samples"
    _play_step(c, peers, {0: ["s0p0"], 1: ["s1p1"]})  # they are recomputed, here by s1p1 itself
    _boundary(c)
    step, = log.history("step")
    assert step["stage_samples"] == [8, 8]


def test_a_lost_trainers_call_still_waiting_takes_no_microbatch() -> None:
    """A trainer's worker dies while its `next_task` call waits on the coordinator (every
    microbatch in flight). The call outlives the trainer: once the trainer is reported lost it
    must return with nothing, or it takes the next free microbatch, which then stays in flight
    with no one working on it and the step never comes (seen once in CI: 12 of 16 samples
    credited, every queue empty)."""
    c, peers, log = _coordinator()
    taken = [c.next_task(f"t{i + 2}#1")[0] for i in range(c.cfg.microbatches_per_step)]
    got: list = []
    waiting = threading.Thread(target=lambda: got.append(c.next_task("t1#1")))
    waiting.start()
    c.trainer_lost("t1#1", "its worker left")
    waiting.join(timeout=10)
    assert got == [None], got
    c.finish("t2#1", taken[0], {}, None)  # a microbatch comes free: the restarted trainer takes it
    again, _ = c.next_task("t1#2")
    assert again.microbatch == taken[0].microbatch


def test_a_lost_trainer_hands_back_the_microbatch_of_every_lane() -> None:
    """A trainer with lanes "t1#1/0" and "t1#1/1" dies: both microbatches go out again, and a
    lane's call still waiting takes none."""
    c, peers, log = _coordinator()
    held = [c.next_task(f"t1#1/{k}")[0] for k in range(2)]
    others = [c.next_task(f"t2#1/{k}")[0] for k in range(c.cfg.microbatches_per_step - 2)]
    c.trainer_lost("t1#1", "its worker left")
    assert c.next_task("t1#1/0") is None
    again = {c.next_task(f"t3#1/{k}")[0].microbatch for k in range(2)}
    assert again == {t.microbatch for t in held} and not again & {t.microbatch for t in others}


def test_a_joiner_starts_without_the_lock_and_enters_with_the_state_committed_meanwhile() -> None:
    """A start takes seconds on Dask (a worker's imports, the state download): steps go on while
    it runs, and the joiner enters holding the state of the step committed meanwhile."""
    c, peers, log = _coordinator()
    c.running = True
    started, release = threading.Event(), threading.Event()

    def slow_start() -> None:
        started.set()
        assert release.wait(10)

    peers.starting = slow_start
    joined: list[str] = []
    adder = threading.Thread(target=lambda: joined.append(c.members.add_peer(0)))
    adder.start()
    assert started.wait(10)
    assert c.lock.acquire(timeout=1), "the coordinator's lock is held during a peer's start"
    c.lock.release()
    _play_step(c, peers, {0: ["s0p0", "s0p1"], 1: ["s1p0"]})
    _boundary(c)
    assert c.ledger.step == 1 and "s0p2" not in c.members.peers
    release.set()
    adder.join(10)
    assert joined == ["s0p2"] and peers.admitted == ["s0p2"]
    assert peers.made["s0p2"].state_ == peers.made["s0p0"].state() and peers.made["s0p0"].state()["steps_taken"] == 1
    assert [e["peer"] for e in log.history("peer") if e["state"] == "joined"][-1] == "s0p2"


def test_a_joiner_whose_download_fails_starts_from_the_checkpoint_that_is_newest_then() -> None:
    """The neighbour leaves during the download, while a newer checkpoint replaces (and deletes) the
    one there was when the join began: the joiner starts from the newest, then catches up."""
    c, peers, _ = _coordinator()
    c.running = True
    first = c.checkpoints.latest

    def download_fails() -> None:
        peers.starting = None
        c.checkpoints.write_now(1, c.cfg, c.schedule, [{"params": {"stage": s}, "optimizer": None} for s in range(2)])
        raise ConnectionError("s0p0 left during the download")

    peers.starting = download_fails
    name = c.members.add_peer(0)
    assert not Path(first.shard(0)).exists(), "the checkpoint of the join's start was deleted"
    assert peers.started_from[name] == c.checkpoints.latest.shard(0) != first.shard(0)
    assert peers.made[name].state_ == peers.made["s0p0"].state(), "it caught up from a live neighbour"


def test_a_credit_to_a_peer_that_is_gone_is_withdrawn_at_the_boundary() -> None:
    """The rule's verdict for a peer that reports nothing is drop, whether it failed to answer or
    is no longer a member: its credits go back to the ledger and are recomputed, never summed."""
    c, peers, log = _coordinator()
    task, _ = c.next_task("t0")
    c.finish("t0", task, {0: "s0p0", 1: "gone"}, loss=0.5)  # credited to a peer the run no longer has
    peers.made["s0p0"].accumulate([1.0, 2.0], 2, task.key)
    _play_step(c, peers, {0: ["s0p0"], 1: ["s1p0"]})
    commit = _boundary(c)
    assert commit.evict == {"gone": "it reported no gradient sum"} and not commit.taken
    assert "gone" not in c.ledger.samples(1) and not log.history("step")
    _play_step(c, peers, {0: ["s0p0"], 1: ["s1p0"]})
    _boundary(c)
    step, = log.history("step")
    assert step["stage_samples"] == [8, 8]


def test_a_moved_peer_keeps_its_place_in_a_world_under_every_new_name() -> None:
    """A move starts the peer afresh under a new name; in a world it must keep the region and
    device of the peer it was (as the simulator's moved peer does), however often it moves."""
    c, peers, _ = _coordinator(CFG.replace(peers=3))
    c.running = True
    first = moves.move_peer(c.members, "s0p1", 1)
    second = moves.move_peer(c.members, first, 0)
    joiner = c.members.add_peer(1)
    assert (first, second, joiner) == ("s1p3", "s0p3", "s1p4")
    assert peers.places == {**{n: None for n in ("s0p0", "s0p1", "s0p2", "s1p0", "s1p1", "s1p2")},
                            "s1p3": "s0p1", "s0p3": "s0p1", "s1p4": None}
    assert c.members.emulates == {"s0p3": "s0p1"}
    c.members.kill_peer(second)
    assert c.members.emulates == {}


def test_the_boundary_learns_its_deadlines_from_its_answers_and_backs_off_when_one_passes() -> None:
    """The first boundary waits `peer_timeout`; each kind of request that every peer answered then
    teaches its own deadline (never under the boundary's floor), and a kind that timed out doubles."""
    from labkit.swarm.deadline import BOUNDARY_FLOOR
    c, peers, _ = _coordinator(CFG.replace(peer_timeout=60.0))
    assert c.books().deadline("prepare ring") == 60.0
    _play_step(c, peers, {0: ["s0p0", "s0p1"], 1: ["s1p0", "s1p1"]})
    commit = _boundary(c)
    assert set(commit.took) == {"prepare ring", "commit_step"} and not commit.late
    assert all(0 < s < 1 for s in commit.took.values())
    books = c.books()
    assert books.deadline("prepare ring") == books.deadline("commit_step") == BOUNDARY_FLOOR
    assert books.deadline("outer_reduce") == 60.0  # never seen: the ceiling
    c.deadlines.learn({}, {"commit_step"})
    assert c.books().deadline("commit_step") == 2 * BOUNDARY_FLOOR


def _hold(peer) -> threading.Event:
    """Keep `peer`'s one request thread busy until the returned event is set (a slow, not dead, peer)."""
    release = threading.Event()
    peer._thread.submit(release.wait, 30)
    return release


def test_a_state_read_asks_the_stages_other_peers_once_its_first_is_slow(monkeypatch) -> None:
    monkeypatch.setattr(recovery, "HEDGE_S", 0.2)
    c, peers, _ = _coordinator()
    peers.made["s0p1"].state_["who"] = "s0p1"
    release = _hold(peers.made["s0p0"])
    try:
        states = c.committed_states()
    finally:
        release.set()
    assert states[0]["who"] == "s0p1" and states[1]["params"] == {"stage": 1}


def test_a_run_whose_peers_do_not_answer_at_its_stop_keeps_its_checkpoint_whole_and_says_so(monkeypatch) -> None:
    """Never a stage's checkpoint beside another's live state: the whole last checkpoint, a
    `final_state` setting naming the stage and its peers, and the run's step counts to it."""
    monkeypatch.setattr(recovery, "HEDGE_S", 0.1)
    c, peers, log = _coordinator(CFG.replace(checkpoint_every=0))  # the start's is the last checkpoint
    _play_step(c, peers, {0: ["s0p0", "s0p1"], 1: ["s1p0", "s1p1"]})
    _boundary(c)
    held = [_hold(peers.made[name]) for name in ("s1p0", "s1p1")]
    try:
        with pytest.raises(recovery.StatesUnread, match=r"no live peer of stage 1 \(s1p0, s1p1\) answered"):
            recovery.committed_states(c, 0.5)
        with c.lock:
            recovery.keep_final(c, None, 0.5)
    finally:
        for release in held:
            release.set()
    assert c.ledger.step == 1 and c.final_step == 0
    assert [s["params"] for s in c.final] == [{"stage": 0}, {"stage": 1}]  # step 0's, both stages
    final, = [e["value"] for e in log.history("setting") if e["name"] == "final_state"]
    assert final["step"] == 0 and "stage 1 (s1p0, s1p1)" in final["reason"]


def test_a_stop_that_cannot_read_its_peers_says_why() -> None:
    """The `final_state` reason names what kept the stop from the peers' state: the lock a step
    boundary held, or the stages left without a peer; nothing when it can read them."""
    assert recovery.unreadable_at_stop(True, 5.0, set()) is None
    assert recovery.unreadable_at_stop(False, 2.5, {1}) == "a step boundary held the run's lock for the 2.5 s the stop waited"
    assert recovery.unreadable_at_stop(True, 2.5, {1, 0}) == "stages [0, 1] had no peer"


def test_a_rebalancing_round_takes_its_peer_out_with_the_choice_and_starts_it_without_the_lock() -> None:
    """Algorithm 2 picks s0p0 (stage 1 is loaded): the peer is out of its stage as the round's
    start begins, so no kill can race the move, and the lock is free until the mover enters."""
    c, peers, log = _coordinator(CFG.replace(peers=3))
    c.running = True
    peers.made["s1p0"].queue_length = 9
    started, release = threading.Event(), threading.Event()

    def slow_start() -> None:
        started.set()
        assert release.wait(10)

    peers.starting = slow_start
    moved: list[str | None] = []
    mover = threading.Thread(target=lambda: moved.append(moves.rebalance(c.members)))
    mover.start()
    assert started.wait(10)
    assert c.lock.acquire(timeout=1), "the run's lock is held during the mover's start"
    c.lock.release()
    assert "s0p0" not in c.members.peers and "s1p3" not in c.members.peers
    with pytest.raises(KeyError, match="no live peer named 's0p0'"):
        c.members.kill_peer("s0p0")
    release.set()
    mover.join(10)
    assert moved == ["s1p3"] and peers.places["s1p3"] == "s0p0"
    move, = [e for e in log.history("peer") if e["state"] == "moved"]
    assert (move["peer"], move["to"], move["to_stage"], move["place"]) == ("s0p0", "s1p3", 1, "s0p0")
    assert move["left_at"] < move["t"], "it left its stage when the round chose it, before its start"


def test_rebalancing_rounds_go_on_after_a_mover_fails_to_start() -> None:
    """A mover whose start fails is reported lost and the round says why; the next round still runs."""
    c, peers, log = _coordinator(CFG.replace(peers=3, rebalance_period=0.05))
    c.running = True
    peers.made["s1p0"].queue_length = 9
    starts: list[str] = []

    def first_move_fails() -> None:  # from its neighbour, then from the checkpoint
        starts.append("start")
        if len(starts) <= 2:
            raise ConnectionError("its worker left")

    peers.starting = first_move_fails
    rounds = threading.Thread(target=moves.rebalance_rounds, args=(c.members,))
    rounds.start()
    try:
        wait_until(lambda: any(e["state"] == "moved" for e in log.history("peer")), 10, "a later round's move")
    finally:
        c.stopped.set()
        rounds.join(10)
    failed, = [e for e in log.history("setting") if e["name"] == "rebalance_failed"]
    assert failed["value"] == "ConnectionError: its worker left"
    lost, = [e for e in log.history("peer") if e["state"] == "killed"]
    assert lost["peer"] == "s0p0" and "failed to start" in lost["reason"]

