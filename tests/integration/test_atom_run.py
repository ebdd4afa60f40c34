"""An ATOM run behind the run handle: replicas that come and go while the global batch is still
met exactly, a joiner bit-identical to the replica it copied, the same parameters as plain
training, and one clear error for every verb that has no meaning without stages."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import pytest
import torch

import labkit
from labkit import AtomConfig, ModelConfig, RunConfig
from labkit.data import WindowSampler, load_corpus
from labkit.executors.atom.local import LocalReplicas
from labkit.executors.atom.run import launch as launch_atom
from labkit.runtime.reference import train_reference

CFG = RunConfig(model=ModelConfig(size="nano", seq_len=32, dtype="float64"), global_batch=16, microbatch=2, steps=6,
                eval_every=0, executor=AtomConfig(replicas=2, accumulation=2))


def _params(snapshot_or_state) -> dict[str, torch.Tensor]:
    return snapshot_or_state["params"]


def test_replicas_leave_and_join_and_the_run_equals_plain_training(tmp_path: Path) -> None:
    run = labkit.launch(CFG.replace(executor=AtomConfig(replicas=3, accumulation=2)), run_dir=tmp_path)
    try:
        partition = run.wait_for(event={"type": "setting", "name": "atom_partition"}, timeout=120)["value"]
        assert sum(partition["sizes"]) == CFG.model.n_layer + 2
        assert partition["budget_bytes"] < partition["model_bytes"]
        run.wait_for(step=1, timeout=120)
        run.kill_peer("r1")
        joined = run.add_peer()
        run.wait_for(event={"type": "swap", "replica": joined}, timeout=120)
        step = run.wait_for(step=run.state()["step"] + 1, timeout=120)["step"]
        # between steps the replicas' parameters change only at the step, taken under the lock
        a, b = run.peer_state("r0"), run.peer_state(joined)
        assert all(torch.equal(a["params"][k], b["params"][k]) for k in a["params"]), f"after step {step}"
        summary = run.wait(timeout=300)
    finally:
        run.stop()
        run.wait(timeout=60)
    assert summary["status"] == "finished", summary
    steps = run.events.history("step")
    assert [e["samples"] for e in steps] == [CFG.global_batch] * CFG.steps
    sampler = WindowSampler(load_corpus(CFG.data).train, CFG.model.seq_len, CFG.seed)
    reference, losses = train_reference(CFG, sampler)
    got = torch.load(tmp_path / "checkpoint.pt", weights_only=False)["stages"][0]["params"]
    worst = max(float((got[k] - v).abs().max()) for k, v in reference.state_dict().items())
    assert worst <= 1e-10, worst
    assert [e["loss"] for e in steps] == pytest.approx(losses, rel=1e-9)
    assert summary["val_loss_after"] < summary["val_loss_before"]


def test_stage_verbs_are_refused_with_the_reason(tmp_path: Path) -> None:
    run = labkit.launch(CFG.replace(steps=50), run_dir=tmp_path)
    try:
        run.wait_for(step=1, timeout=120)
        with pytest.raises(ValueError, match="move_peer is not available with executor='atom': every replica"):
            run.move_peer("r0", 1)
        with pytest.raises(ValueError, match="set_compression is not available with executor='atom'"):
            run.set_compression("int8")
        with pytest.raises(ValueError, match="stage=1 is not allowed with executor='atom'"):
            run.add_peer(1)
        with pytest.raises(ValueError, match="peer='r9' is not allowed: one of the live replicas"):
            run.kill_peer("r9")
        assert run.state()["executor"] == "atom" and len(run.state()["stages"][0]["peers"]) == 2
    finally:
        run.stop()
        summary = run.wait(timeout=60)
    assert summary["status"] == "stopped"


def test_a_stop_asked_while_the_run_starts_ends_it_and_the_run_sets_torchs_threads() -> None:
    torch.set_num_threads(2)
    run = labkit.launch(CFG.replace(steps=5000, threads=1))
    run.stop()  # while it profiles the model, before any replica exists
    assert torch.get_num_threads() == 1  # as a SWARM run: one thread each, replicas already run side by side
    assert run.wait(timeout=60)["status"] == "stopped"


def test_atom_on_dask_with_a_device_named_is_one_clear_error() -> None:
    with pytest.raises(ValueError, match=r"atom.device='cuda' is not allowed with backend='dask': 'cpu' \(on Dask each "
                                         r"replica computes on its worker's GPU"):
        labkit.launch(CFG.replace(executor=AtomConfig(device="cuda")), backend="dask")


def test_an_atom_checkpoint_resumes_as_one_swarm_stage_and_as_atom(tmp_path: Path) -> None:
    first = labkit.launch(CFG.replace(steps=2), run_dir=tmp_path / "atom")
    assert first.wait(timeout=120)["status"] == "finished"
    checkpoint = tmp_path / "atom" / "checkpoint.pt"
    sampler = WindowSampler(load_corpus(CFG.data).train, CFG.model.seq_len, CFG.seed)
    reference, _ = train_reference(CFG.replace(steps=3), sampler)
    for name, cfg in [("swarm", CFG.replace(executor="swarm", stages=1, peers=1, trainers=1, steps=3)),
                      ("atom-again", CFG.replace(steps=3))]:
        run = labkit.launch(cfg, run_dir=tmp_path / name, resume=checkpoint)
        summary = run.wait(timeout=120)
        assert summary["status"] == "finished" and summary["steps"] == 3, (name, summary)
        assert [e["step"] for e in run.events.history("step")] == [3], name
        got = torch.load(tmp_path / name / "checkpoint.pt", weights_only=False)["stages"][0]["params"]
        worst = max(float((got[k] - v).abs().max()) for k, v in reference.state_dict().items())
        assert worst <= 1e-10, (name, worst)  # as if the run had never stopped


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error on a machine without CUDA")
def test_cuda_without_a_gpu_is_refused_at_launch() -> None:
    with pytest.raises(ValueError, match=r"atom.device='cuda' is not allowed here: torch.cuda.is_available\(\) is False"):
        labkit.launch(CFG.replace(executor=AtomConfig(device="cuda")))


def test_a_budget_below_the_least_that_works_names_the_least(tmp_path: Path) -> None:
    run = labkit.launch(CFG.replace(executor=AtomConfig(budget_mb=0.2)), run_dir=tmp_path)
    summary = run.wait(timeout=120)
    assert summary["status"] == "failed"
    assert "atom.budget_mb=0.2 is not allowed" in summary["error"] and "budget_mb >= " in summary["error"]
    assert not (tmp_path / "checkpoint.pt").exists()


class LaggingHeartbeats(LocalReplicas):
    """In-process replicas whose published counts lag: each step's first `lag` seconds they say
    nothing (a DHT that lags), and from step `broken` on r1's count is one short for good."""

    def __init__(self, *args, lag: float, broken: int) -> None:
        super().__init__(*args)
        self.lag, self.broken, self._seen = lag, broken, {}

    def heartbeats(self, replicas, step: int) -> dict[str, int]:
        counts = super().heartbeats(replicas, step)
        if time.monotonic() - self._seen.setdefault(step, time.monotonic()) < self.lag:
            return {}
        return {n: c - (n == "r1" and step >= self.broken) for n, c in counts.items()}


def test_heartbeats_that_disagree_longer_than_the_learnt_patience_stop_the_run() -> None:
    """Lags that end teach the patience (floor 5 s); a count that stays wrong then fails the run
    after that patience, not after the first-use ceiling (`peer_timeout`, 60 s here)."""
    cfg = CFG.replace(steps=100, peer_timeout=60.0)
    run = launch_atom(cfg, hosts=lambda *a: LaggingHeartbeats(*a, lag=0.3, broken=3))
    summary = run.wait(timeout=120)
    broke = next(e for e in run.events.history("run") if e["state"] == "failed")
    last_step = run.events.history("step")[-1]
    assert summary["status"] == "failed" and last_step["step"] == 3, (summary, last_step)  # ledger step 3 is the 4th
    assert "disagree for {'r1': (" in broke["reason"], broke
    waited = broke["t"] - last_step["t"]
    assert 5.0 <= waited < 15.0, f"the run failed {waited:.1f} s after the last step (patience learnt from 0.3 s lags)"


class SilentHeartbeats(LocalReplicas):
    """In-process replicas whose DHT loses r1's heartbeats from step `gone` on (r1 still computes:
    a replica cut off from the DHT, or hung, as the coordinator sees it)."""

    def __init__(self, *args, gone: int) -> None:
        super().__init__(*args)
        self.gone = gone

    def heartbeats(self, replicas, step: int) -> dict[str, int]:
        return {n: c for n, c in super().heartbeats(replicas, step).items() if not (n == "r1" and step >= self.gone)}


def test_a_replica_whose_heartbeats_stop_is_dropped_and_the_run_stays_exact() -> None:
    """Heartbeats that stop arriving from one replica while the others' still do: after the
    patience (here its first-use ceiling, `peer_timeout` 6 s) that replica is dropped as silent,
    its microbatches are done again by the others, and training equals the plain loop."""
    cfg = CFG.replace(executor=AtomConfig(replicas=3, accumulation=2), peer_timeout=6.0)
    run = launch_atom(cfg, hosts=lambda *a: SilentHeartbeats(*a, gone=2))
    summary = run.wait(timeout=120)
    assert summary["status"] == "finished", summary
    dropped = [e for e in run.events.history("peer") if e["state"] == "killed"]
    assert [e["peer"] for e in dropped] == ["r1"] and dropped[0]["reason"].endswith("(silent)"), dropped
    assert re.search(r"no heartbeat of step \d+ was read", dropped[0]["reason"]), dropped  # step >= 2: as r1 gets work
    check_exact(run, cfg)


def check_exact(run, cfg: RunConfig) -> None:
    """Every step summed the global batch, and parameters and losses equal the plain loop's."""
    steps = run.events.history("step")
    assert [e["samples"] for e in steps] == [cfg.global_batch] * cfg.steps
    reference, losses = train_reference(cfg, WindowSampler(load_corpus(cfg.data).train, cfg.model.seq_len, cfg.seed))
    got = run.snapshot().result().stages[0]["params"]
    assert max(float((got[k] - v).abs().max()) for k, v in reference.state_dict().items()) <= 1e-10
    assert [e["loss"] for e in steps] == pytest.approx(losses, rel=1e-9)


class HungBetweenIterations(SilentHeartbeats):
    """r1 hangs, as the run sees it, once step `gone` begins: its heartbeats stop, and the host's
    watch says its worker hung, as the Dask fleet's check does (r1 still computes here: what the
    test asks is that the watch's word alone drops it, without a failed call or the patience)."""

    def __init__(self, *args, gone: int) -> None:
        super().__init__(*args, gone=gone)
        self._lost, self._told = None, False

    def watch(self, lost) -> None:
        self._lost = lost

    def heartbeats(self, replicas, step: int) -> dict[str, int]:
        if step >= self.gone and self._lost is not None and not self._told:
            self._told = True  # on a thread of its own, as the fleet tells: the caller holds the run's lock
            threading.Thread(target=self._lost, args=("r1", "r1: its worker did not answer (hung)")).start()
        return super().heartbeats(replicas, step)


def test_a_replica_its_host_sees_hung_between_iterations_is_dropped_at_once() -> None:
    """The host's word that r1 hangs drops it at once, though no call on it is waiting to fail:
    not after the heartbeats' patience (`peer_timeout`, 60 s here, when no lag has taught a
    shorter one); its microbatches are done again and training equals the plain loop."""
    cfg = CFG.replace(executor=AtomConfig(replicas=3, accumulation=2), peer_timeout=60.0)
    run = launch_atom(cfg, hosts=lambda *a: HungBetweenIterations(*a, gone=2))
    summary = run.wait(timeout=120)
    assert summary["status"] == "finished", summary
    dropped = [e for e in run.events.history("peer") if e["state"] == "killed"]
    assert [(e["peer"], e["reason"]) for e in dropped] == [("r1", "r1: its worker did not answer (hung)")], dropped
    step_before = run.events.history("step")[1]  # step 2 ends; the watch speaks as step `gone` (2) begins
    assert dropped[0]["t"] - step_before["t"] < 10.0, (dropped, step_before)  # not after the 60 s patience
    check_exact(run, cfg)