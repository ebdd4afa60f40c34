"""The synchronous pipeline (executor='pipeline') in-process: it equals the single-process loop in
float64 for every shape and both schedules; a killed peer stalls it until add_peer replaces it,
and the step in progress is recomputed from its start (the run still equals the loop), also when
the kill lands while the replicas step; what it cannot do is refused with one clear error; the
lab's form and `labkit train --executor pipeline` launch it.

Tolerance: as in test_equivalence.py, the pipeline and the reference differ only in the order the
global batch's microbatch gradients are added up (each lane sums its share, then the stage sums
its lanes): ~1e-15 relative per step in float64; 1e-10 absolute holds over a few steps."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import labkit
import labkit.lab
from labkit.config import ConfigError, ModelConfig, RunConfig, SyncConfig
from labkit.data import WindowSampler, load_corpus
from labkit.executors.pipeline.config import PipelineConfig
from labkit.executors.pipeline.peers import LocalStage, LocalStages
from labkit.executors.pipeline.run import launch as launch_pipeline
from labkit.pipeline.schedule import deal, stage_order
from labkit.executors.registry import SPECS
from labkit.model import assemble
from labkit.runtime.reference import reference_model, train_reference
from tests.waiting import wait_until

CFG = RunConfig(model=ModelConfig(size="nano", seq_len=32, dtype="float64"), stages=2, peers=2, global_batch=16,
                microbatch=4, steps=4, eval_every=0, eval_batches=2, executor="pipeline")


def assert_equals_reference(run: labkit.RunHandle, cfg: RunConfig, steps: int | None = None) -> None:
    """The run's committed parameters equal the single-process loop's to 1e-10, and every step's
    gradient covered the global batch exactly once at every stage (nothing lost, nothing doubled)."""
    got = assemble([s["params"] for s in run.snapshot().result().stages])
    sampler = WindowSampler(load_corpus(cfg.data).train, cfg.model.seq_len, cfg.seed)
    reference, _ = train_reference(cfg, sampler, steps=steps)
    want = reference.state_dict()
    init = reference_model(cfg).state_dict()
    assert max(float((want[k] - init[k]).abs().max()) for k in want) > 1e-3, "training must move the parameters"
    worst = max(float((got[k] - v).abs().max()) for k, v in want.items())
    assert worst <= 1e-10, f"max |pipeline - reference| = {worst:.3g}"
    counted = [s["stage_samples"] for s in run.events.history("step")]
    assert counted == [[cfg.global_batch] * cfg.stages] * len(counted), counted


@pytest.mark.parametrize("schedule", ["1f1b", "gpipe"])
@pytest.mark.parametrize(("stages", "peers"), [(1, 1), (2, 1), (2, 2), (4, 1)])
def test_the_pipeline_equals_the_single_process_loop(stages: int, peers: int, schedule: str) -> None:
    cfg = CFG.replace(stages=stages, peers=peers, executor=PipelineConfig(schedule=schedule))
    run = labkit.launch(cfg)
    summary = run.wait(timeout=240)
    assert summary["status"] == "finished", summary
    assert summary["executor"] == "pipeline"
    assert_equals_reference(run, cfg)
    hops = run.events.history("hop")
    assert {h["peer"] for h in hops} == {f"s{s}p{p}" for s in range(stages) for p in range(peers)}
    assert {h["trainer"] for h in hops} == {f"lane{p}" for p in range(peers)}
    shares = deal(cfg.microbatches_per_step, peers)
    for stage, lane in itertools.product(range(stages), range(peers)):  # each peer's first step, in schedule order
        order = [(op, shares[lane][i]) for op, i in stage_order(schedule, stages, stage, len(shares[lane]))]
        ran = [(h["op"], h["microbatch"]) for h in hops if h["peer"] == f"s{stage}p{lane}"][:len(order)]
        assert ran == order, (stage, lane, ran)
    bubbles = [s["bubble"] for s in run.events.history("step")]
    assert len(bubbles) == cfg.steps and all(0 <= b < 1 for b in bubbles), bubbles


@pytest.mark.parametrize("lanes", [1, 2], ids=["the stage left with no peer", "a lane left with no peer"])
def test_a_killed_peer_stalls_the_pipeline_until_add_peer_and_nothing_is_lost_or_doubled(tmp_path: Path,
                                                                                          lanes: int) -> None:
    cfg = CFG.replace(steps=5, peers=lanes)
    victim, upstream, replacement = f"s1p{lanes - 1}", f"s0p{lanes - 1}", f"s1p{lanes}"
    run = labkit.launch(cfg, run_dir=tmp_path)
    try:
        run.wait_for(step=2, timeout=120)
        run.set_peer_delay(victim, 30.0)  # it holds its next request: the kill lands mid-step
        run.wait_for(event={"type": "hop", "peer": upstream}, timeout=60)
        run.kill_peer(victim)
        paused = run.wait_for(event={"type": "run", "state": "paused"}, timeout=60)
        assert "add_peer(1)" in paused["reason"], paused
        state = run.state()
        assert state["paused_stages"] == [1]
        assert [p["peer"] for p in state["stages"][1]["peers"]] == [f"s1p{n}" for n in range(lanes - 1)]
        stalled_at = state["step"]
        with pytest.raises(ValueError, match=f"stage 0 has a live peer in each of its {lanes} lanes"):
            run.add_peer(0)
        assert run.state()["step"] == stalled_at  # no step commits while a lane has no peer (checked below too)
        assert run.add_peer(1) == replacement
        resumed = run.wait_for(event={"type": "run", "state": "resumed"}, timeout=60)
        assert resumed["t"] > paused["t"]
        summary = run.wait(timeout=240)
    finally:
        run.stop()
    assert summary["status"] == "finished", summary
    steps = run.events.history("step")
    assert [s["step"] for s in steps] == list(range(1, cfg.steps + 1))
    assert not [s for s in steps if paused["t"] < s["t"] < resumed["t"]], "no step commits while a lane has no peer"
    assert_equals_reference(run, cfg)
    assert {h["peer"] for h in run.events.history("hop") if h["t"] > resumed["t"]} >= {replacement}


def test_a_slow_peer_slows_every_lane_and_widens_the_bubble() -> None:
    cfg = CFG.replace(steps=4, peers=1)
    run = labkit.launch(cfg)
    try:
        run.wait_for(step=1, timeout=120)
        run.set_peer_delay("s0p0", 0.1)
        summary = run.wait(timeout=240)
    finally:
        run.stop()
    assert summary["status"] == "finished", summary
    slow = [h for h in run.events.history("hop") if h["peer"] == "s0p0" and h["seconds"] >= 0.1]
    assert slow, "the delay holds the slow peer's requests"
    last = run.events.history("step")[-1]
    assert last["bubble"] > 0.3, last  # stage 1 waits on stage 0 most of the step
    assert_equals_reference(run, cfg)


@pytest.mark.parametrize(("changes", "message"), [
    ({"stages": 2, "peers": (2, 1)}, "RunConfig.peers=\\(2, 1\\) is not allowed: one number, or the same number for every stage"),
    ({"sync": SyncConfig(mode="diloco")}, "RunConfig.sync=.* is not allowed: SyncConfig\\(mode='allreduce'\\)"),
    ({"delayed_updates": True}, "RunConfig.delayed_updates=True is not allowed: False with executor='pipeline'"),
])
def test_what_the_pipeline_cannot_do_is_refused_with_one_clear_error(changes: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        CFG.replace(**changes)


def test_a_bad_schedule_and_the_fixed_wiring_verbs_are_refused() -> None:
    with pytest.raises(ConfigError, match="PipelineConfig.schedule='zigzag' is not allowed: one of \\['1f1b', 'gpipe'\\]"):
        PipelineConfig(schedule="zigzag")
    run = labkit.launch(CFG.replace(steps=1000))
    try:
        run.wait_for(step=1, timeout=120)
        for verb, args in [("move_peer", ("s0p0", 1)), ("rebalance", ()), ("set_sync", (SyncConfig(),)),
                           ("set_compression", ("fp16",)), ("set_layer_split", ((3, 1),))]:
            with pytest.raises(ValueError, match=f"{verb} is not available with executor='pipeline': "):
                getattr(run, verb)(*args)
        with pytest.raises(ValueError, match="peer='s9p9' is not allowed: one of the live peers"):
            run.kill_peer("s9p9")
        with pytest.raises(ValueError, match="every stage has a live peer in each of its 2 lanes"):
            run.add_peer()
        assert run.state()["status"] == "running"
    finally:
        run.stop()
    assert run.wait(timeout=120)["status"] == "stopped"


def test_a_peer_killed_while_the_replicas_step_sends_every_peer_back_to_the_committed_state() -> None:
    """s1p1 is killed at its first optimizer step of step 2, after s0p0, s0p1 and s1p0 have taken
    theirs: they must go back to the committed state, or the recomputed step would be applied twice."""
    run_of: list[labkit.RunHandle] = []

    class KillAtItsStep:
        """A real in-process peer that is killed (through the run's verb) when its optimizer step arrives."""

        worker = "local"

        def __init__(self, port: LocalStage) -> None:
            self.port = port

        def request(self, method: str, *args: object) -> object:
            if method == "optimizer_step" and args[1] == 2 and run_of[0].state()["stages"][1]["peers"][-1]["peer"] == "s1p1":
                run_of[0].kill_peer("s1p1")
            return self.port.request(method, *args)

        def set_delay(self, seconds: float) -> None:
            self.port.set_delay(seconds)

        def kill(self) -> None:
            self.port.kill()

    class Host(LocalStages):
        def spawn(self, name: str, stage: int, state: dict, place: str) -> object:
            port = super().spawn(name, stage, state, place)
            return KillAtItsStep(port) if name == "s1p1" else port

    run_of.append(launch_pipeline(CFG, hosts=Host))
    run = run_of[0]
    try:
        paused = run.wait_for(event={"type": "run", "state": "paused"}, timeout=120)
        assert run.state()["step"] == 2 and "s1p1" in paused["reason"]
        run.add_peer(1)
        summary = run.wait(timeout=240)
    finally:
        run.stop()
    assert summary["status"] == "finished", summary
    assert_equals_reference(run, CFG)


def _labkit(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """`labkit` in a subprocess, importing this checkout's labkit (not an installed one)."""
    env = {**os.environ, "PYTHONPATH": str(Path(labkit.__file__).parents[1])}
    return subprocess.run([sys.executable, "-m", "labkit.cli.main", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def test_labkit_train_runs_the_pipeline_and_refuses_unequal_lanes_in_one_line(tmp_path: Path) -> None:
    out = _labkit("train", "--executor", "pipeline", "--schedule", "gpipe", "--steps", "3", "--seq-len", "32",
                  "--global-batch", "16", "--microbatch", "4", "--eval-every", "0", "--no-progress", "--run-dir", "run",
                  cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "2 stages x 2 lanes, gpipe schedule" in out.stdout
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["steps"] == 3
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["executor"] == {"name": "pipeline", "schedule": "gpipe"}
    report = (tmp_path / "run" / "report.html").read_text()
    assert report.count("<svg") == len(SPECS["pipeline"].charts) and "<h2>timeline</h2>" in report
    bad = _labkit("train", "--executor", "pipeline", "--peers", "2,1", cwd=tmp_path)
    lines = bad.stderr.strip().splitlines()
    assert bad.returncode == 2 and len(lines) == 1 and "RunConfig.peers=(2, 1) is not allowed" in lines[0], bad.stderr


def test_the_form_launches_a_pipeline_whose_panel_kills_and_replaces_a_peer_from_its_rows() -> None:
    lab = labkit.lab.Lab(defaults=CFG.replace(model=ModelConfig(size="nano", seq_len=32), steps=5000), hz=4)
    lab.form.fields["executor"].value = "pipeline"
    lab.form.fields["pipeline.schedule"].value = "gpipe"
    lab.form.launch_button.click()
    run = lab.wait_attached(timeout=120)
    try:
        assert run.config.executor == PipelineConfig(schedule="gpipe")
        assert set(lab.view.charts.boxes) == set(SPECS["pipeline"].charts)
        run.wait_for(step=2, timeout=120)
        wait_until(lambda: set(lab.controls.rows) == {"s0p0", "s0p1", "s1p0", "s1p1"}, 30, "the peers in the table")
        controls = lab.controls
        assert controls.rows["s1p1"].move.disabled and not controls.rows["s1p1"].kill.disabled
        assert controls.rows["s1p1"].move.tooltip.startswith("not with executor='pipeline': the wiring is fixed")
        controls.rows["s1p1"].kill.click()
        controls.pending().result(60)
        run.wait_for(event={"type": "run", "state": "paused"}, timeout=60)
        controls.add_stage.value = 1
        controls.add_button.click()
        assert controls.pending().result(60) == "s1p2"
        run.wait_for(event={"type": "run", "state": "resumed"}, timeout=60)
        wait_until(lambda: "s1p2" in {r["peer"] for r in lab.view.charts.spec("timeline")["datasets"]["timeline"]},
                   30, "the replacement's requests in the timeline chart")
        wait_until(lambda: set(controls.rows) == {"s0p0", "s0p1", "s1p0", "s1p2"}, 30, "the table to follow the peers")
        controls.stop_button.click()
        assert run.wait(60)["status"] == "stopped"
    finally:
        run.stop()
        lab.close()


@pytest.mark.parametrize(("first", "then"), [("pipeline", "pipeline"), ("pipeline", "swarm"), ("swarm", "pipeline")])
def test_a_pipeline_checkpoint_resumes_exactly(tmp_path: Path, first: str, then: str) -> None:
    """A pipeline's checkpoint holds every stage's committed parameters and optimizer state: a pipeline or
    a SWARM run of the same shape resumes it and ends where the single-process loop does (and a
    pipeline resumes a SWARM run's checkpoint so)."""
    earlier = labkit.launch(CFG.replace(steps=2, executor=first), run_dir=tmp_path / "first")
    assert earlier.wait(timeout=240)["status"] == "finished"
    cfg = CFG.replace(steps=4, executor=then)
    second = labkit.launch(cfg, run_dir=tmp_path / "second", resume=tmp_path / "first" / "checkpoint.pt")
    summary = second.wait(timeout=240)
    assert summary["status"] == "finished" and summary["steps"] == 4, summary
    got = assemble([s["params"] for s in second.snapshot().result().stages])
    reference, _ = train_reference(cfg, WindowSampler(load_corpus(cfg.data).train, cfg.model.seq_len, cfg.seed))
    assert max(float((got[k] - v).abs().max()) for k, v in reference.state_dict().items()) <= 1e-10
