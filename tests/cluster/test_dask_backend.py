"""The Dask backend: every peer and trainer an actor on its own worker process, found through a
hivemind DHT. Real worker processes on loopback; a SIGKILL is a real SIGKILL.

Equivalence tolerance: as in test_equivalence (float64, 4-6 steps, only the summation order of
microbatch gradients differs) the parameters stay within 1e-10 of single-process training.
"""

from __future__ import annotations

import gc
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest
import torch
from distributed import Client

import labkit
from labkit.backends.dask.dht import release
from labkit.backends.dask.peer_actor import PeerActor, peer_actor
from labkit.backends.dask.remote import START_TIMEOUT, RemotePeer
from labkit.backends.dask.workers import cluster_workers
from labkit.config import ModelConfig, RunConfig
from tests.integration.test_links import check_links, linked_run, two_continents
from tests.integration.test_world import check_world, small_world, world_run
from tests.integration.test_faults import check_stop_is_bounded
from tests.integration.test_verb_inputs import check_verb_inputs, check_verbs_at_once
from labkit.data import WindowSampler, load_corpus
from labkit.model import assemble
from labkit.model.assembly import initial_states
from labkit.runtime.reference import train_reference
from tests.cluster.helpers import assert_exact_accounting
from tests.waiting import wait_until

pytestmark = pytest.mark.slow
TOL = 1e-10


def _float64(small_run: RunConfig, **changes) -> RunConfig:
    return small_run.replace(**{"model": ModelConfig(size="nano", seq_len=32, dtype="float64"), "stages": 2, "peers": 2,
                                "trainers": 2, **changes})


def _final_params(run_dir: Path) -> dict[str, torch.Tensor]:
    checkpoint = torch.load(run_dir / "checkpoint.pt", weights_only=False)
    return assemble([s["params"] for s in checkpoint["stages"]])


def _distance_to_reference(cfg: RunConfig, got: dict[str, torch.Tensor]) -> float:
    model, _ = train_reference(cfg, WindowSampler(load_corpus(cfg.data).train, cfg.model.seq_len, cfg.seed))
    want = model.state_dict()
    assert got.keys() == want.keys()
    return max(float((got[k] - want[k]).abs().max()) for k in want)


def _listeners_off_loopback() -> list[str]:
    """TCP listeners and bound UDP sockets of this process and its descendants (scheduler,
    workers, hivemind's p2pd daemons) whose address is not loopback."""
    me = psutil.Process()
    found = []
    for process in [me, *me.children(recursive=True)]:
        try:
            sockets = process.net_connections(kind="inet")
        except psutil.Error:
            continue
        for c in sockets:
            listening = c.status == psutil.CONN_LISTEN or (c.type == socket.SOCK_DGRAM and not c.raddr)
            if listening and c.laddr.ip not in ("127.0.0.1", "::1"):
                found.append(f"{process.name()} pid {process.pid} {c.type.name} {c.laddr.ip}:{c.laddr.port}")
    return found


def test_embedded_cluster_trains_with_falling_loss(small_run: RunConfig, tmp_path: Path) -> None:
    """launch(backend="dask") with no scheduler starts its own LocalCluster of worker processes,
    and nothing of it (scheduler, workers, dashboard, DHT daemons; TCP or UDP) listens off loopback."""
    cfg = small_run.replace(stages=2, peers=2, trainers=2, steps=12)
    run = labkit.launch(cfg, backend="dask", run_dir=tmp_path)
    run.wait_for(step=1, timeout=300)
    exposed = _listeners_off_loopback()
    assert not exposed, f"a default run listens beyond loopback: {exposed}"
    summary = run.wait(300)
    assert summary["status"] == "finished", summary
    assert summary["val_loss_after"] < summary["val_loss_before"] - 0.3
    assert_exact_accounting(run, cfg)
    hops = run.events.history("hop")
    assert {h["peer"] for h in hops} == {"s0p0", "s0p1", "s1p0", "s1p1"}
    parts = [h["timing"] for h in hops]  # where each hop's seconds went (benchmarks/step_breakdown.py)
    assert all(set(p) == {"queue", "compute", "dispatch", "request", "served", "reply"} for p in parts)
    assert all(p["served"] >= p["queue"] + p["compute"] - 1e-3 for p in parts)
    assert all(p["dispatch"] + p["request"] + p["served"] + p["reply"] <= h["seconds"] + 1e-3 for p, h in zip(parts, hops))
    assert {"events.jsonl", "summary.json", "checkpoint.pt", "config.json"} <= {p.name for p in tmp_path.iterdir()}
    assert (run.dashboard() or "").startswith("http://127.0.0.1:")


def test_matches_single_process_and_keeps_it_across_a_layer_split(cluster, small_run: RunConfig, tmp_path: Path) -> None:
    """Synchronous equivalence holds across processes, and re-cutting the stages mid-run moves
    blocks with their optimizer state without changing the model. A liveness check of a peer the
    split replaced (under the same name) that finds it silent evicts no one."""
    cfg = _float64(small_run, steps=8)
    run = labkit.launch(cfg, backend="dask", scheduler=cluster.scheduler_address, run_dir=tmp_path)
    run.wait_for(step=2, timeout=120)
    core = run._core.c  # noqa: SLF001 - the stale check's hook
    replaced = core.members.peers["s1p0"]
    run.set_layer_split([3, 1])
    run.wait_for(step=4, timeout=120)
    assert core.members.peers["s1p0"] is not replaced and run.state()["status"] == "running"
    core.factory.peer_silent(replaced, "checked before the split replaced it, it did not answer (hung)")
    summary = run.wait(300)
    assert summary["status"] == "finished", summary
    assert [e for e in run.events.history("peer") if e["state"] == "killed"] == []
    assert [e["value"] for e in run.events.history("setting") if e["name"] == "layer_split"] == [[3, 1]]
    checkpoint = torch.load(tmp_path / "checkpoint.pt", weights_only=False)
    assert checkpoint["config"]["layer_split"] == [3, 1]
    assert _distance_to_reference(cfg, _final_params(tmp_path)) <= TOL


def _fail_at_averaging(method: str, how: str, dask_worker=None) -> None:
    """Run on one peer's worker: from its next step-boundary `method` request on ("prepare": the
    stage's peers reduce their sums over their ring; "commit_step": the reduced sum is applied),
    the process dies by SIGKILL
    ("dies") or the request never returns ("hangs"). The fault is forced here, at the averaging,
    but it is real: a dead process or a silent peer."""
    from labkit.backends.dask.peer_actor import PeerActor

    peer = next(a.peer for a in dask_worker.state.actors.values()  # the live one: a worker of a shared cluster
                if isinstance(a, PeerActor) and a.serving)  # may still hold an earlier run's stopped peer

    def fail(*args):
        if how == "dies":
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(3600)

    setattr(peer, method, fail)


@pytest.mark.parametrize(("method", "how"), [("prepare", "dies"), ("prepare", "hangs"), ("commit_step", "dies")])
def test_a_peer_failing_mid_average_is_dropped_with_exact_accounting(cluster, small_run: RunConfig, tmp_path: Path,
                                                                      method: str, how: str) -> None:
    """The run neither hangs nor loses a sample: the failed peer is evicted (at once, or after
    peer_timeout). If it failed while its stage reduced, no peer stepped and its samples are
    recomputed by the survivors; if it failed while the sum was applied, the survivors have
    applied it. Either way training still equals the single-process loop."""
    cfg = _float64(small_run, peers=(2, 2), steps=20, peer_timeout=5.0)
    run = labkit.launch(cfg, backend="dask", scheduler=cluster.scheduler_address, run_dir=tmp_path)
    run.wait_for(step=1, timeout=120)
    victim = next(p for p in run.state()["stages"][1]["peers"] if p["peer"] == "s1p1")
    with Client(cluster.scheduler_address) as client:
        client.run(_fail_at_averaging, method, how, workers=[victim["worker"]])
    assert run.state()["step"] < cfg.steps - 2, "the fault must come with steps left to run"
    summary = run.wait(300)
    assert summary["status"] == "finished", summary
    killed = [e for e in run.events.history("peer") if e["state"] == "killed"]
    assert [e["peer"] for e in killed] == ["s1p1"], killed
    assert f"{method} failed at the step boundary" in killed[0]["reason"], killed
    assert_exact_accounting(run, cfg)
    assert _distance_to_reference(cfg, _final_params(tmp_path)) <= TOL


def _call_stale(address: str, key: str) -> str:
    """On a worker, as a trainer would: one request to the peer actor `key`; what came of it."""
    try:
        return RemotePeer("s0p0", 0, key, address, peer_actor(address, key)).call("echo", "ping").result(10)
    except Exception as exc:
        return type(exc).__name__


def test_emulated_links_delay_dask_hops_as_modelled_and_work_shifts_to_near_peers(cluster, small_run: RunConfig,
                                                                                    tmp_path: Path) -> None:
    """The same links, with trainers and peers in worker processes (the file read on each worker)."""
    cfg = linked_run(small_run, two_continents(tmp_path))
    check_links(labkit.launch(cfg, backend="dask", scheduler=cluster.scheduler_address))


def test_a_world_runs_on_dask_on_virtual_devices_with_its_churn_and_stays_exact(cluster, small_run: RunConfig,
                                                                                 tmp_path: Path) -> None:
    """The same world, each peer on its virtual device in its worker process."""
    cfg = world_run(small_run, small_world(tmp_path))
    check_world(labkit.launch(cfg, backend="dask", scheduler=cluster.scheduler_address), cfg)


def test_a_stale_handle_on_a_stopped_peer_fails_at_once(cluster) -> None:
    """A trainer whose DHT view still names a peer that left (rebuilt, moved, killed) gets
    `PeerDied` at once instead of waiting: the stopped actor refuses new requests, and it is kept
    for `ANNOUNCE_TTL` after its handle is dropped (a call to a released actor never returns)."""
    cfg = RunConfig(model=ModelConfig(size="nano"), stages=1, peers=1)
    state = initial_states(cfg)[0]
    run_id = uuid.uuid4().hex[:12]
    key = f"labkit-peer-{run_id}-s0p0"
    with Client(cluster.scheduler_address) as client:
        host, trainer = sorted(cluster_workers(client))[:2]
        try:
            peer = RemotePeer("s0p0", 0, key, host, owner=client.submit(PeerActor, run_id, key, "s0p0", 0, cfg, state, 0.0, [],
                                                                  None, key=key, actor=True, workers=[host],
                                                                  allow_other_workers=False))
            peer.actor  # started
            assert client.submit(_call_stale, host, key, workers=[trainer], pure=False).result(START_TIMEOUT) == "ping"
            peer.close()
            del peer
            gc.collect()
            assert client.submit(_call_stale, host, key, workers=[trainer], pure=False).result(60) == "PeerDied"
        finally:
            client.run(release, run_id, workers=[host])


def test_a_joiner_whose_source_has_left_fails_at_once_and_frees_its_worker(cluster) -> None:
    """A joiner downloads its state over the source's data plane: from a live source it gets the
    state bit for bit; from one that has left (a chaos kill mid-join) it fails within seconds,
    where the Dask actor call it used before waited `START_TIMEOUT` on the worker's only thread."""
    cfg = RunConfig(model=ModelConfig(size="nano"), stages=1, peers=1)
    state = initial_states(cfg)[0]
    run_id = uuid.uuid4().hex[:12]
    with Client(cluster.scheduler_address) as client:
        host, joiner = sorted(cluster_workers(client))[:2]

        def start(name: str, source: str | None) -> RemotePeer:
            key = f"labkit-peer-{run_id}-{name}"
            return RemotePeer(name, 0, key, joiner if source else host,
                              owner=client.submit(PeerActor, run_id, key, name, 0, cfg, None if source else state, 0.0,
                                                  [], source, key=key, actor=True, workers=[joiner if source else host],
                                                  allow_other_workers=False))
        try:
            source = start("s0p0", None)
            address = source.contact
            copy = start("s0p1", address)
            assert _equal_states(copy.call("state").result(60), source.call("state").result(60))
            source.close()
            began = time.monotonic()
            with pytest.raises(Exception, match="PeerDied|the peer at"):
                start("s0p2", address).actor
            assert time.monotonic() - began < 30, f"the download failed after {time.monotonic() - began:.1f} s"
        finally:
            client.run(release, run_id, workers=[host, joiner])


def _equal_states(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_equal_states(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_equal_states(x, y) for x, y in zip(a, b))
    return a == b


def test_add_peer_downloads_its_neighbours_state_bit_for_bit(cluster, small_run: RunConfig) -> None:
    """The joining peer's parameters and optimizer state equal its neighbour's exactly. The run is
    paused (stage 1 emptied) so that no step changes the neighbour meanwhile."""
    cfg = small_run.replace(stages=2, peers=(1, 1), trainers=2, steps=500)
    run = labkit.launch(cfg, backend="dask", scheduler=cluster.scheduler_address)
    try:
        run.wait_for(step=3, timeout=120)
        run.kill_peer("s1p0")
        run.wait_for(event={"type": "run", "state": "paused"}, timeout=60)
        joined = run.add_peer(0)
        assert _equal_states(run.peer_state(joined), run.peer_state("s0p0"))
        assert run.peer_state(joined)["optimizer"]["state"], "the optimizer state must be non-trivial"
        run.add_peer(1)  # resumes the run from its last checkpoint
        run.wait_for(event=lambda e: e["type"] == "hop" and e["peer"] == joined, timeout=120)  # the joiner serves
    finally:
        run.stop()
    summary = run.wait(120)
    assert summary["status"] == "stopped", summary
    assert_exact_accounting(run, cfg)


def test_rebalancing_moves_a_peer_to_the_slow_stage(cluster, small_run: RunConfig) -> None:
    """Stage 1's peers are slowed down, so its queues (published to the DHT) grow: Algorithm 2
    moves a peer from idle stage 0 to stage 1, which downloads stage 1's state."""
    cfg = small_run.replace(stages=2, peers=(3, 1), trainers=3, steps=500, rebalance_period=2.0)
    run = labkit.launch(cfg, backend="dask", scheduler=cluster.scheduler_address)
    try:
        run.wait_for(step=1, timeout=120)
        run.set_peer_delay("s1p0", 0.3)
        move = run.wait_for(event={"type": "peer", "state": "moved"}, timeout=90)
        assert move["stage"] == 0 and move["to_stage"] == 1
        run.wait_for(event={"type": "hop", "peer": move["to"]}, timeout=60)
    finally:
        run.stop()
    assert run.wait(120)["status"] == "stopped"
    assert_exact_accounting(run, cfg)


@pytest.fixture
def external_cluster(tmp_path: Path):
    """`dask scheduler` and `dask worker` as subprocesses (not LocalCluster); every process group
    is killed at the end. Yields (scheduler address, a function that starts one more worker)."""
    procs: list[subprocess.Popen] = []
    scheduler_file = tmp_path / "scheduler.json"
    dask = str(Path(sys.executable).parent / "dask")  # the console script, as the README runs it

    def start(kind: str, *args: str) -> None:
        procs.append(subprocess.Popen([dask, kind, *args], start_new_session=True,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

    def add_worker(nworkers: int = 1) -> None:
        start("worker", "--scheduler-file", str(scheduler_file), "--nworkers", str(nworkers), "--nthreads", "1",
              "--host", "127.0.0.1", "--no-dashboard")

    try:
        start("scheduler", "--host", "127.0.0.1", "--port", "0", "--scheduler-file", str(scheduler_file), "--no-dashboard")
        wait_until(scheduler_file.exists, 60, "the scheduler file")
        add_worker(4)
        with Client(scheduler_file=str(scheduler_file), timeout=60) as client:
            client.wait_for_workers(4, timeout=120)
            yield client.scheduler.address, add_worker, client
    finally:
        for proc in procs:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(timeout=30)


def test_external_scheduler_and_a_worker_joining_mid_run(external_cluster, small_run: RunConfig) -> None:
    """A run on a `dask scheduler` given by address; a `dask worker` started mid-run gets a peer."""
    address, add_worker, client = external_cluster
    cfg = small_run.replace(stages=2, peers=1, trainers=1, steps=500)
    run = labkit.launch(cfg, backend="dask", scheduler=address)
    try:
        run.wait_for(step=2, timeout=120)
        add_worker()
        run.wait_for(event={"type": "setting", "name": "worker_joined"}, timeout=120)
        joined = [e["peer"] for e in run.events.history("peer") if e["state"] == "joined"][-1]
        run.wait_for(event={"type": "hop", "peer": joined}, timeout=60)
    finally:
        run.stop()
    assert run.wait(120)["status"] == "stopped"
    assert_exact_accounting(run, cfg)


def test_bad_scheduler_address_is_one_clear_error(small_run: RunConfig) -> None:
    run = labkit.launch(small_run, backend="dask", scheduler="tcp://127.0.0.1:9")
    summary = run.wait(120)
    assert summary["status"] == "failed" and "scheduler='tcp://127.0.0.1:9' cannot be reached" in summary["error"]
    with pytest.raises(ValueError, match="needs backend='dask'"):
        labkit.launch(small_run, backend="inprocess", scheduler="tcp://127.0.0.1:9")


def test_diloco_averages_pseudo_gradients_across_processes(cluster, small_run: RunConfig) -> None:
    """DiLoCo's outer step takes the same cross-process path: every H steps each stage averages
    its peers' pseudo-gradients, weighted by samples, and the run keeps exact accounting."""
    from labkit.config import SyncConfig

    cfg = small_run.replace(stages=2, peers=2, trainers=2, steps=4, sync=SyncConfig(mode="diloco", inner_steps=2))
    run = labkit.launch(cfg, backend="dask", scheduler=cluster.scheduler_address)
    summary = run.wait(300)
    assert summary["status"] == "finished", summary
    syncs = run.events.history("sync")
    assert [(e["step"], e["stage"], e["kind"], e["peers"]) for e in syncs] == [
        (2, 0, "diloco", 2), (2, 1, "diloco", 2), (4, 0, "diloco", 2), (4, 1, "diloco", 2)]
    assert_exact_accounting(run, cfg)


def test_bad_verb_arguments_are_refused_as_in_process(cluster, small_run: RunConfig, tmp_path: Path) -> None:
    """The same bad calls as in-process give the same errors and leave the run stepping (a bad
    split once ended a Dask run: its ConfigError could not be unpickled on the driver)."""
    run = labkit.launch(small_run.replace(steps=10_000), backend="dask", scheduler=cluster.scheduler_address)
    check_verb_inputs(run, tmp_path)


def test_verbs_sent_at_once_are_each_done_or_refused_on_dask(cluster, small_run: RunConfig, tmp_path: Path) -> None:
    """The in-process test's verbs at once, on actors: done or refused each, the run exact."""
    run = labkit.launch(small_run.replace(stages=2, peers=2, steps=10_000), backend="dask",
                        scheduler=cluster.scheduler_address)
    try:
        check_verbs_at_once(run, tmp_path)
    finally:
        run.stop()
    assert run.wait(120)["status"] == "stopped"


def test_stop_is_bounded_whatever_a_peers_delay_on_dask(cluster, small_run: RunConfig) -> None:
    check_stop_is_bounded(labkit.launch(small_run.replace(steps=10_000), backend="dask",
                                        scheduler=cluster.scheduler_address))
