"""Faults on the Dask backend are real: worker processes die by SIGKILL (by pid) mid-run.

A dead worker is noticed within seconds (the scheduler drops it; the run watches the scheduler),
the requests waiting on it fail at once, its microbatches are recomputed, and the run neither
stalls nor loses or doubles a sample. `state()` answers while it happens, a restarted worker takes
a peer, and the final checkpoint resumes. (A kill during the step boundary is
test_dask_backend.py::test_a_peer_failing_mid_average_is_dropped_with_exact_accounting.)

Bounds: detection is asserted under `DETECT_SECONDS` and the longest gap between steps under
`STALL_SECONDS`; on a quiet 2-core machine both are a few seconds (docs/benchmarks.md).
These tests SIGKILL up to five workers and SIGSTOP two, so they share a cluster of their own
(`own_cluster`), not the session's.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest
import torch
from distributed import Client

import labkit
from labkit import AtomConfig, ModelConfig, RunConfig, TaskPoolConfig
from labkit.backends.dask import actor_fleet
from labkit.backends.dask.actor_fleet import WORKER_CHECK
from labkit.backends.dask.dht import ANNOUNCE_PERIOD, StageDirectory
from labkit.backends.dask.liveness import SUSPECT_AFTER
from labkit.backends.dask.workers import cluster_workers
from labkit.swarm.deadline import BOUNDARY_FLOOR
from labkit.data import WindowSampler, load_corpus
from labkit.model import assemble
from labkit.runtime.reference import train_reference
from tests.cluster.helpers import assert_exact_accounting
from tests.coordinator_death import death_config, kill_the_coordinator_and_resume
from tests.integration.test_pipeline_run import CFG as PIPELINE
from tests.waiting import wait_until

pytestmark = pytest.mark.slow
DETECT_SECONDS = 15.0  # a kill to its `killed` event, on a loaded CI machine
STALL_SECONDS = 30.0  # the longest gap between two steps of a run that loses workers
# a SIGSTOP to the hung peer's eviction (or a hung trainer's restart): its DHT record (or heartbeat)
# is SUSPECT_AFTER old at most an ANNOUNCE_PERIOD later (a trainer's timed-out request may come
# sooner), and the direct liveness check then waits at most BOUNDARY_FLOOR; plus slack for a loaded CI machine
HUNG_SECONDS = SUSPECT_AFTER + ANNOUNCE_PERIOD + BOUNDARY_FLOOR + 5.0
# a hung trainer: its worker's scheduler heartbeat is SUSPECT_AFTER late, seen within a WORKER_CHECK,
# and the fleet's check of the worker waits BOUNDARY_FLOOR (its DHT heartbeat's expiry, ANNOUNCE_TTL, comes later)
HUNG_TRAINER_SECONDS = SUSPECT_AFTER + WORKER_CHECK + BOUNDARY_FLOOR + 5.0


def _kill_worker(cluster, address: str) -> float:
    """SIGKILL the process of the worker at `address`; returns the monotonic time of the kill."""
    with Client(cluster.scheduler_address) as client:
        pid = client.run(os.getpid, workers=[address])[address]
    os.kill(pid, signal.SIGKILL)
    return time.monotonic()


def _worker_of(run: labkit.RunHandle, peer: str) -> str:
    return next(p["worker"] for s in run.state()["stages"] for p in s["peers"] if p["peer"] == peer)


def _kill_peer_worker(cluster, run: labkit.RunHandle, peer: str) -> float:
    """Kill `peer`'s worker; returns the seconds until the run reported the peer killed."""
    killed_at = _kill_worker(cluster, _worker_of(run, peer))
    asked = time.monotonic()
    run.state()
    assert time.monotonic() - asked < 5, "state() must answer while a worker dies"
    event = run.wait_for(event={"type": "peer", "peer": peer, "state": "killed"}, timeout=60)
    detected = time.monotonic() - killed_at
    assert detected < DETECT_SECONDS, f"{peer}'s death was noticed after {detected:.1f} s ({event['reason']})"
    return detected


def _longest_stall(run: labkit.RunHandle) -> float:
    times = [e["t"] for e in run.events.history("step")]
    return max((b - a for a, b in zip(times, times[1:])), default=0.0)


def _resumes(run_dir: Path, cfg: RunConfig) -> None:
    """The final checkpoint is usable: an in-process run resumes from it and takes a step."""
    step = torch.load(run_dir / "checkpoint.pt", weights_only=False)["step"]
    resumed = labkit.launch(cfg.replace(steps=step + 1), resume=run_dir / "checkpoint.pt")
    assert resumed.wait(120)["status"] == "finished"
    assert [e["step"] for e in resumed.events.history("step")] == [step + 1]


def test_a_killed_peer_worker_is_noticed_fast_and_survived_exactly(own_cluster, small_run: RunConfig,
                                                                   tmp_path: Path) -> None:
    """One SIGKILL: noticed within seconds, no stall, and training still equals the
    single-process loop (float64)."""
    cfg = small_run.replace(model=ModelConfig(size="nano", seq_len=32, dtype="float64"), stages=2, peers=(3, 2),
                            trainers=2, steps=8)
    run = labkit.launch(cfg, backend="dask", scheduler=own_cluster.scheduler_address, run_dir=tmp_path)
    run.wait_for(step=2, timeout=120)
    detected = _kill_peer_worker(own_cluster, run, "s0p1")
    summary = run.wait(300)
    assert summary["status"] == "finished", summary
    killed = [e for e in run.events.history("peer") if e["state"] == "killed"]
    assert [e["peer"] for e in killed] == ["s0p1"], killed
    assert_exact_accounting(run, cfg)
    assert _longest_stall(run) < STALL_SECONDS, _longest_stall(run)
    model, _ = train_reference(cfg, WindowSampler(load_corpus(cfg.data).train, cfg.model.seq_len, cfg.seed))
    got = assemble([s["params"] for s in torch.load(tmp_path / "checkpoint.pt", weights_only=False)["stages"]])
    assert max(float((got[k] - v).abs().max()) for k, v in model.state_dict().items()) <= 1e-10
    print(f"detection: one kill {detected:.2f} s")


def test_a_hung_peer_worker_is_evicted_within_its_bound_and_survived_exactly(own_cluster, small_run: RunConfig,
                                                                            tmp_path: Path) -> None:
    """SIGSTOP, not SIGKILL: the worker hangs with its sockets open, so nothing fails, it only never
    answers. Trainers give up on its requests at their learned deadlines, the run evicts it once
    its DHT record lapses, and training still equals the single-process loop (float64)."""
    cfg = small_run.replace(model=ModelConfig(size="nano", seq_len=32, dtype="float64"), stages=2, peers=(3, 2),
                            trainers=2, steps=8)
    run = labkit.launch(cfg, backend="dask", scheduler=own_cluster.scheduler_address, run_dir=tmp_path)
    run.wait_for(step=2, timeout=120)
    worker = _worker_of(run, "s0p1")
    with Client(own_cluster.scheduler_address) as client:
        pid = client.run(os.getpid, workers=[worker])[worker]
    os.kill(pid, signal.SIGSTOP)
    stopped = time.monotonic()
    try:
        event = run.wait_for(event={"type": "peer", "peer": "s0p1", "state": "killed"}, timeout=120)
        evicted = time.monotonic() - stopped
        summary = run.wait(300)
    finally:
        os.kill(pid, signal.SIGKILL)  # its nanny starts a fresh worker
    assert evicted < HUNG_SECONDS, f"the hung s0p1 was evicted after {evicted:.1f} s ({event['reason']})"
    assert summary["status"] == "finished", summary
    _equals_plain_loop(run, cfg, tmp_path)
    bans = [e for e in run.events.history("peer") if e["peer"] == "s0p1" and e["state"] == "banned"]
    print(f"hung peer: evicted {evicted:.2f} s after SIGSTOP ({event['reason']}); {len(bans)} bans before; "
          f"longest step gap {_longest_stall(run):.1f} s")


def test_a_worker_hung_before_the_launch_is_left_out_and_the_run_trains_on_the_others(
        own_cluster, small_run: RunConfig, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker SIGSTOPped before a run starts never answers: SWARM's launch leaves it out once it
    has not joined the DHT within `JOIN_TIMEOUT`, the pipeline's and the task pool's once it has not
    answered within `PROBE_TIMEOUT`, each with a `worker_unused` event naming it; nothing is placed
    on it and each run trains (a SWARM launch once waited on such a worker forever, in "starting";
    the pipeline's and the task pool's failed after an actor's 120 s start timeout)."""
    monkeypatch.setattr(actor_fleet, "JOIN_TIMEOUT", 10.0)
    monkeypatch.setattr(actor_fleet, "PROBE_TIMEOUT", 5.0)
    with Client(own_cluster.scheduler_address) as client:
        worker = sorted(cluster_workers(client))[0]
        pid = client.run(os.getpid, workers=[worker])[worker]
    runs = {"swarm": (small_run.replace(stages=2, peers=1, steps=3), "join the run's DHT within 10 s"),
            "pipeline": (PIPELINE.replace(steps=2), "answer within 5 s"),
            "taskpool": (small_run.replace(stages=2, peers=1, steps=2, executor=TaskPoolConfig()), "answer within 5 s")}
    os.kill(pid, signal.SIGSTOP)
    try:
        for executor, (cfg, why) in runs.items():
            run = labkit.launch(cfg, backend="dask", scheduler=own_cluster.scheduler_address)
            run.wait_for(step=1, timeout=120)
            placed = {p["worker"] for s in run.state()["stages"] for p in s["peers"]}
            summary = run.wait(120)
            assert summary["status"] == "finished", (executor, summary)
            unused = [e["value"] for e in run.events.history("setting") if e["name"] == "worker_unused"]
            # a healthy worker too slow to answer on a loaded machine would be left out too: not this test's point
            assert f"{worker}: it did not {why} (hung)" in unused, (executor, unused)
            assert worker not in placed, (executor, placed)
    finally:
        os.kill(pid, signal.SIGKILL)  # its nanny starts a fresh worker


def test_a_hung_trainer_worker_is_replaced_within_its_bound_and_survived_exactly(own_cluster, small_run: RunConfig,
                                                                                tmp_path: Path) -> None:
    """SIGSTOP a trainer's worker: the microbatch it holds is never finished and nothing fails (its
    sockets stay open). Its worker's heartbeats to the scheduler stop, the fleet's check finds it
    hung, the run hands the microbatch out again and restarts the trainer on another worker, and
    training still equals the single-process loop."""
    cfg = small_run.replace(model=ModelConfig(size="nano", seq_len=32, dtype="float64"), stages=2, peers=(2, 2),
                            trainers=2, steps=8)
    run = labkit.launch(cfg, backend="dask", scheduler=own_cluster.scheduler_address, run_dir=tmp_path)
    run.wait_for(step=2, timeout=120)
    with Client(own_cluster.scheduler_address) as client:
        worker, names = next((w, n) for w, n in client.run(_trainer_names).items() if n)
        pid = client.run(os.getpid, workers=[worker])[worker]
    os.kill(pid, signal.SIGSTOP)
    stopped = time.monotonic()
    try:
        lost = run.wait_for(event={"type": "setting", "name": "trainer_lost"}, timeout=120)
        replaced = time.monotonic() - stopped
        summary = run.wait(300)
    finally:
        os.kill(pid, signal.SIGKILL)  # its nanny starts a fresh worker
    assert lost["value"].startswith(f"{names[0]}#1: ") and lost["value"].endswith("(hung)"), lost
    assert replaced < HUNG_TRAINER_SECONDS, f"the hung trainer was replaced after {replaced:.1f} s"
    assert summary["status"] == "finished", summary
    _equals_plain_loop(run, cfg, tmp_path)
    print(f"hung trainer: replaced {replaced:.2f} s after SIGSTOP; longest step gap {_longest_stall(run):.1f} s")


def _equals_plain_loop(run: labkit.RunHandle, cfg: RunConfig, run_dir: Path) -> None:
    """Every step summed the global batch at every stage, and the final checkpoint equals the
    single-process loop's model (float64)."""
    assert_exact_accounting(run, cfg)
    model, _ = train_reference(cfg, WindowSampler(load_corpus(cfg.data).train, cfg.model.seq_len, cfg.seed))
    got = assemble([s["params"] for s in torch.load(run_dir / "checkpoint.pt", weights_only=False)["stages"]])
    assert max(float((got[k] - v).abs().max()) for k, v in model.state_dict().items()) <= 1e-10


def test_three_kills_and_a_trainer_kill_in_a_row(own_cluster, small_run: RunConfig, tmp_path: Path) -> None:
    """Three peer workers die one after another (a live peer stays in every stage), then a
    trainer's worker with two microbatches in flight: each is noticed within seconds, its work
    recomputed, the peers' restarted workers take peers, the trainer's takes none (the run keeps
    its size), and the run stops on request with exact accounting and a checkpoint that resumes."""
    cfg = small_run.replace(stages=2, peers=(3, 2), trainers=2, inflight=2, steps=5000)  # a trainer's 2 lanes die
    run = labkit.launch(cfg, backend="dask", scheduler=own_cluster.scheduler_address, run_dir=tmp_path)
    try:
        run.wait_for(step=2, timeout=120)
        detected = []
        for victim in ("s0p1", "s1p0", "s0p2"):
            detected.append(_kill_peer_worker(own_cluster, run, victim))
            run.wait_for(step=run.state()["step"] + 1, timeout=STALL_SECONDS)
        with Client(own_cluster.scheduler_address) as client:
            trainers = client.run(_trainer_names)
        worker, names = next((w, n) for w, n in trainers.items() if n)
        killed_at = _kill_worker(own_cluster, worker)
        lost = run.wait_for(event={"type": "setting", "name": "trainer_lost"}, timeout=60)
        detected.append(time.monotonic() - killed_at)
        assert lost["value"].startswith(names[0]) and detected[-1] < DETECT_SECONDS, (lost, detected)
        run.wait_for(step=run.state()["step"] + 2, timeout=STALL_SECONDS)
        for joined in [e for e in run.events.history("setting") if e["name"] == "worker_joined"]:
            run.wait_for(event={"type": "hop", "peer": joined["value"].split(" serves ")[1]}, timeout=60)
        size = sum(cfg.peers_per_stage)
        wait_until(lambda: len(_live_peers(run)) == size, 60, f"{size} live peers again", seen=lambda: (
            _live_peers(run), [f'{e["t"]:.1f} {e["name"]}: {e["value"]}'[:160] for e in run.events.history("setting")]))
        later = run.clock() + 3.0  # the watch looks at new workers every second: 3 s to take a peer
        run.wait_for(event=lambda e: e["type"] == "step" and e["t"] > later, timeout=60)
        assert len(_live_peers(run)) == size, _live_peers(run)  # the trainer's worker took none when it came back
    finally:
        run.stop()
    summary = run.wait(120)
    assert summary["status"] == "stopped", summary
    assert_exact_accounting(run, cfg)
    assert _longest_stall(run) < STALL_SECONDS, _longest_stall(run)
    _resumes(tmp_path, cfg)
    print("detection: " + ", ".join(f"{s:.2f} s" for s in detected))


def _live_peers(run: labkit.RunHandle) -> list[str]:
    return [p["peer"] for s in run.state()["stages"] for p in s["peers"]]


def _trainer_names(dask_worker=None) -> list[str]:
    """On a worker: the names of the trainers it runs (one at most)."""
    from labkit.backends.dask.trainer_actor import TrainerActor

    return [a.trainer.name for a in dask_worker.state.actors.values() if isinstance(a, TrainerActor)]


def _same_step_states(run: labkit.RunHandle, names: tuple[str, str]) -> tuple[dict, dict]:
    """Two replicas' states read within one step (a step may fall between two reads: read again)."""
    for _ in range(20):
        before = run.state()["step"]
        states = tuple(run.peer_state(n) for n in names)
        if run.state()["step"] == before:
            return states
    raise AssertionError("every pair of reads straddled a step")


def test_atom_replicas_on_dask_survive_a_sigkill_and_take_a_bit_identical_joiner(own_cluster, tmp_path: Path) -> None:
    """ATOM's replicas as actors, one per worker: their DHT heartbeats carry the step's counts, a
    replica whose worker is SIGKILLed is dropped and its microbatches recomputed by the others, a
    joiner downloads a live replica's state and is bit-identical, and the run equals plain
    training on the same samples (float64)."""
    cfg = RunConfig(model=ModelConfig(size="nano", seq_len=32, dtype="float64"), global_batch=16, microbatch=2,
                    steps=500, eval_every=0, threads=1, executor=AtomConfig(replicas=3, accumulation=2))
    run = labkit.launch(cfg, backend="dask", scheduler=own_cluster.scheduler_address, run_dir=tmp_path)
    try:
        run.wait_for(step=1, timeout=180)
        peers = run.state()["stages"][0]["peers"]
        assert len({p["worker"] for p in peers}) == 3, peers  # a worker each
        assert all(isinstance(p["heartbeat"], int) and 0 <= p["heartbeat"] <= cfg.global_batch for p in peers), peers
        detected = _kill_peer_worker(own_cluster, run, "r1")
        joined = run.add_peer()
        run.wait_for(event={"type": "swap", "replica": joined}, timeout=120)
        run.wait_for(step=run.state()["step"] + 1, timeout=STALL_SECONDS)
        a, b = _same_step_states(run, ("r0", joined))
        assert all(torch.equal(a["params"][k], b["params"][k]) for k in a["params"])
    finally:
        run.stop()
    summary = run.wait(120)
    assert summary["status"] == "stopped", summary
    killed = [e for e in run.events.history("peer") if e["state"] == "killed"]
    assert [e["peer"] for e in killed] == ["r1"] and killed[0]["reason"].startswith("r1: its Dask worker"), killed
    steps = run.events.history("step")
    assert [e["samples"] for e in steps] == [cfg.global_batch] * len(steps)
    assert _longest_stall(run) < STALL_SECONDS, _longest_stall(run)
    checkpoint = torch.load(tmp_path / "checkpoint.pt", weights_only=False)
    sampler = WindowSampler(load_corpus(cfg.data).train, cfg.model.seq_len, cfg.seed)
    model, _ = train_reference(cfg.replace(steps=checkpoint["step"]), sampler)
    got = checkpoint["stages"][0]["params"]
    assert max(float((got[k] - v).abs().max()) for k, v in model.state_dict().items()) <= 1e-10
    print(f"atom on dask: {len(steps)} steps, kill noticed in {detected:.2f} s")


def test_task_pool_clients_on_dask_survive_sigkills_mid_forward_and_mid_backward(own_cluster, tmp_path: Path) -> None:
    """The task pool's clients as actors: a client whose worker is SIGKILLed while it holds a
    forward slice, and another while it holds a backward slice, lose no sample and double none;
    their slices are finished from the pool, no forward work is repeated beyond what they took
    with them, and training equals the single-process loop (float64)."""
    cfg = RunConfig(model=ModelConfig(size="nano", seq_len=32, dtype="float64"), stages=2, peers=2, global_batch=16,
                    microbatch=4, steps=500, eval_every=0, threads=1, executor=TaskPoolConfig(grace=600.0))  # only the kills take work away
    run = labkit.launch(cfg, backend="dask", scheduler=own_cluster.scheduler_address, run_dir=tmp_path)
    detected = []
    try:
        run.wait_for(step=1, timeout=180)
        for victim, kind in (("s0c1", "forward"), ("s1c1", "backward")):
            if kind == "backward":  # after its last forward slice of a pass, its work is backward
                after, last = run.events.latest("hop")["t"], cfg.microbatches_per_step - 1
                run.wait_for(event=lambda e: e["type"] == "hop" and e["peer"] == victim and e["kind"] == "forward"
                             and e["microbatch"] == last and e["t"] > after, timeout=60)
            run.set_peer_delay(victim, 30.0)  # it holds each result: the kill lands while it holds one

            def holding(victim: str = victim, kind: str = kind) -> bool:
                return any(p["peer"] == victim and (p["task"] or "").startswith(kind)
                           for s in run.state()["stages"] for p in s["peers"])
            wait_until(holding, timeout=120, what=f"{victim} holding a {kind} slice")
            detected.append(_kill_peer_worker(own_cluster, run, victim))
            run.add_peer(int(victim[1]))
            run.wait_for(step=run.state()["step"] + 2, timeout=STALL_SECONDS)
    finally:
        run.stop()
    summary = run.wait(120)
    assert summary["status"] == "stopped", summary
    killed = [e for e in run.events.history("peer") if e["state"] == "killed"]
    assert [e["peer"] for e in killed] == ["s0c1", "s1c1"] and all("Dask worker" in e["reason"] for e in killed), killed
    steps = run.events.history("step")
    assert all(s["stage_samples"] == [cfg.global_batch] * cfg.stages for s in steps), steps
    stats = [e["value"] for e in run.events.history("setting") if e["name"] == "pool"][-cfg.stages:]
    assert all(s["repeated_beyond_lost"] == 0 for s in stats) and sum(s["lost_samples"] for s in stats) > 0, stats
    checkpoint = torch.load(tmp_path / "checkpoint.pt", weights_only=False)
    sampler = WindowSampler(load_corpus(cfg.data).train, cfg.model.seq_len, cfg.seed)
    model, _ = train_reference(cfg, sampler, steps=checkpoint["step"])
    got = assemble([s["params"] for s in checkpoint["stages"]])
    assert max(float((got[k] - v).abs().max()) for k, v in model.state_dict().items()) <= 1e-10
    print(f"task pool on dask: {len(steps)} steps, kills noticed in " + ", ".join(f"{d:.2f} s" for d in detected))


def test_one_stages_peers_killed_in_succession_without_waiting(own_cluster, small_run: RunConfig) -> None:
    """Real churn does not wait for steps: three of stage 0's four peers' workers die 5 s and 15 s
    apart (a live peer always left; the restarted workers join as peers meanwhile, on the stage
    Algorithm 2's join rule picks from the queue lengths, not necessarily stage 0). Every death is
    reported within `DETECT_SECONDS` of the last kill, no gap between steps reaches
    `STALL_SECONDS`, nothing is lost or doubled. (A joiner once started under the coordinator's lock: the third death was noticed
    after 95 s and the next step came 219 s after it.)"""
    cfg = small_run.replace(stages=2, peers=(4, 2), trainers=1, steps=100_000)
    run = labkit.launch(cfg, backend="dask", scheduler=own_cluster.scheduler_address)
    try:
        run.wait_for(step=2, timeout=120)
        kills = []
        for pause in (0, 5, 15):
            time.sleep(pause)
            stage0 = [p["peer"] for s in run.state()["stages"] if s["stage"] == 0 for p in s["peers"]]
            assert len(stage0) >= 2, run.state()
            kills.append((stage0[0], _kill_worker(own_cluster, _worker_of(run, stage0[0]))))
        for peer, killed_at in kills:
            run.wait_for(event={"type": "peer", "peer": peer, "state": "killed"}, timeout=DETECT_SECONDS)
        run.wait_for(step=run.state()["step"] + 3, timeout=STALL_SECONDS)
    finally:
        run.stop()
    assert run.wait(120)["status"] == "stopped"
    assert_exact_accounting(run, cfg)
    assert _longest_stall(run) < STALL_SECONDS, _longest_stall(run)


def test_a_slow_dht_store_never_holds_up_a_kill_or_the_steps(own_cluster, small_run: RunConfig,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A DHT store can take its whole timeout (30 s) while the DHT still routes to dead nodes, and
    withdrawing a departed peer's record is one. The coordinator once waited on it holding its
    lock: in a 30-minute chaos run the step boundary evicting a peer waited 35 s there, and the
    whole run with it. Here every withdrawal the coordinator makes is stuck for a minute (its
    process only: the workers' own DHT nodes are untouched): a kill still returns at once, and
    the run steps on exactly."""
    unstuck = threading.Event()

    def stuck_withdraw(self: StageDirectory, stage: int, key: str) -> bool:
        unstuck.wait(60)
        return True

    monkeypatch.setattr(StageDirectory, "withdraw", stuck_withdraw)
    cfg = small_run.replace(stages=2, peers=(3, 2), trainers=1, steps=100_000)
    run = labkit.launch(cfg, backend="dask", scheduler=own_cluster.scheduler_address)
    try:
        run.wait_for(step=2, timeout=120)
        began = time.monotonic()
        run.kill_peer("s0p1")
        kill_seconds = time.monotonic() - began
        run.wait_for(step=run.state()["step"] + 3, timeout=30)
    finally:
        unstuck.set()
        run.stop()
    assert kill_seconds < 5.0, f"kill_peer took {kill_seconds:.1f} s: it waited on the DHT"
    assert run.wait(120)["status"] == "stopped"
    assert_exact_accounting(run, cfg)


def _no_orphans(cluster) -> float:
    """Wait until no worker of `cluster` runs a labkit thread (a dead driver's actors and DHT nodes
    stop their own); the seconds it took."""
    start = time.monotonic()
    with Client(cluster.scheduler_address) as client:
        try:
            wait_until(lambda: not any(client.run(_labkit_threads).values()), 60,
                       "the dead driver's actors to stop their threads")
        except AssertionError as exc:
            raise AssertionError(f"{exc}: {client.run(_labkit_threads)}") from None
    return time.monotonic() - start


@pytest.mark.parametrize("executor", ["atom", "pipeline", "swarm", "taskpool"])
def test_a_dask_run_whose_coordinator_was_sigkilled_resumes_from_its_run_directory_exactly(
        own_cluster, small_run: RunConfig, tmp_path: Path, executor: str) -> None:
    """The driver (the coordinator's process) of a Dask run of every executor SIGKILLed mid-run:
    its actors go with its client, each stops its own threads (its DHT node too) within seconds
    instead of running forever, and the periodic checkpoint written meanwhile resumes the run on
    the same cluster, exactly."""
    def no_orphans() -> None:
        print(f"the dead {executor} driver's actors and DHT nodes were gone {_no_orphans(own_cluster):.1f} s after the kill")

    step = kill_the_coordinator_and_resume(death_config(small_run, executor), tmp_path / "run", backend="dask",
                                           scheduler=own_cluster.scheduler_address, after_kill=no_orphans)
    print(f"resumed from the checkpoint of step {step}")


def _labkit_threads(dask_worker=None) -> list[str]:
    """On a worker: its threads a labkit actor started (peers, trainers, DHT nodes, data planes)."""
    prefixes = ("peer-", "announce-", "trainer-", "labkit-", "heartbeat-", "atom-")
    return [t.name for t in threading.enumerate() if t.name.startswith(prefixes)]
