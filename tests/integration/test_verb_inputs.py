"""A verb's arguments are checked once, in the handle, before anything leaves the process: the same
bad input gives the same one-line error on every backend, and a refused verb never harms the run.
`check_verb_inputs` and `check_verbs_at_once` are shared with the Dask tests (tests/cluster/test_dask_backend.py)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

import pytest

import labkit
from labkit.config import RunConfig
from labkit.runtime.checkpoint import load_checkpoint
from labkit.runtime.handle import RunHandle

BAD_VERBS = [  # (verb, args, the error's words)
    ("set_layer_split", ([5, -1],), "RunConfig.layer_split=(5, -1) is not allowed"),
    ("set_layer_split", ([4, 0],), "RunConfig.layer_split=(4, 0) is not allowed"),
    ("set_layer_split", ([1, 1, 1, 1],), "RunConfig.layer_split=(1, 1, 1, 1) is not allowed"),
    ("set_layer_split", ("3,1",), "split='3,1' is not allowed"),
    ("add_peer", (2,), "stage=2 is not allowed: None or an integer in [0, 2)"),
    ("add_peer", (-1,), "stage=-1 is not allowed"),
    ("add_peer", (True,), "stage=True is not allowed"),
    ("add_peer", ("0",), "stage='0' is not allowed"),
    ("move_peer", ("s0p0", 7), "stage=7 is not allowed"),
    ("move_peer", (3, 1), "peer=3 is not allowed"),
    ("kill_peer", (None,), "peer=None is not allowed"),
    ("kill_peer", ("",), "peer='' is not allowed"),
    ("kill_peer", ("s9p9",), "no live peer named 's9p9'"),
    ("set_peer_delay", ("s0p0", -1), "seconds=-1 is not allowed"),
    ("set_peer_delay", ("s0p0", float("nan")), "seconds=nan is not allowed"),
    ("set_compression", ("int4",), "codec='int4' is not allowed"),
    ("peer_state", (["s0p0"],), "peer=['s0p0'] is not allowed"),
]


def check_verb_inputs(run: RunHandle, tmp_path: Path) -> None:
    """Every bad call raises its one error; the run then still steps, and two checkpoints of one
    path at once both land (the last one written wins, whole)."""
    run.wait_for(step=1, timeout=240)
    for verb, args, words in BAD_VERBS:
        with pytest.raises((ValueError, KeyError)) as caught:
            getattr(run, verb)(*args)
        assert words in str(caught.value), (verb, args, caught.value)
    with pytest.raises(ValueError, match="the path of a file"):
        run.checkpoint(None)
    step = run.state()["step"]
    run.wait_for(step=step + 1, timeout=240)
    path = tmp_path / "same.pt"
    both = [run.checkpoint(path) for _ in range(2)]
    wait(both, timeout=240)
    assert [f.result() for f in both] == [path, path]
    assert load_checkpoint(path, run.config)["step"] >= step
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []
    assert run.state()["status"] == "running"


def test_bad_verb_arguments_are_refused_in_the_handle(small_run: RunConfig, tmp_path: Path) -> None:
    run = labkit.launch(small_run.replace(steps=10_000))
    check_verb_inputs(run, tmp_path)


def check_verbs_at_once(run: RunHandle, tmp_path: Path) -> None:
    """Verbs sent at the same moment from many threads (a panel's clicks and a notebook cell at
    once), a checkpoint among them while a peer is killed: each call returns or raises one error
    that says why (never anything else, never a hang), the checkpoint lands whole, and the run
    steps on with every step summing the global batch at every stage."""
    run.wait_for(step=1, timeout=240)
    stage = run.state()["stages"]
    first, second = (s["peers"][0]["peer"] for s in stage)
    calls = [("kill_peer", (first,)), ("add_peer", (0,)), ("add_peer", (1,)), ("move_peer", (second, 0)),
             ("set_layer_split", ([1, 3],)), ("rebalance", ()), ("set_peer_delay", (second, 0.01)),
             ("set_layer_split", ([3, 1],)), ("kill_peer", (first,)), ("peer_state", (second,))]
    barrier = threading.Barrier(len(calls) + 1)

    def call(verb: str, args: tuple[Any, ...]) -> str:
        barrier.wait()
        try:
            getattr(run, verb)(*args)
            return "done"
        except (ValueError, KeyError, RuntimeError) as exc:  # refused, with its reason
            assert str(exc), (verb, args)
            return f"refused: {exc}"

    def checkpoint() -> Path:
        barrier.wait()
        return run.checkpoint(tmp_path / "at_once.pt").result(timeout=240)

    with ThreadPoolExecutor(len(calls) + 1) as pool:
        saved = pool.submit(checkpoint)
        outcomes = [pool.submit(call, verb, args) for verb, args in calls]
        results = [f.result(timeout=240) for f in outcomes]
        path = saved.result(timeout=240)
    kills = sorted(results[k].split(":")[0] for k in (0, 8))  # the two kills of one peer
    left = [(e["state"], e.get("reason", "")) for e in run.events.history("peer")
            if e["peer"] == first and e["state"] in ("killed", "moved")]
    if len(left) == 1 and (left[0][0] == "moved" or left[0][1].startswith("moved to stage")):
        assert kills == ["refused", "refused"], results  # a move took it first (to a new name, or lost on the way)
    else:  # a peer dies once
        assert kills == ["done", "refused"] and [state for state, _ in left] == ["killed"], (results, left)
    assert load_checkpoint(path, run.config)["step"] >= 1
    step = run.state()["step"]
    try:
        run.wait_for(step=step + 2, timeout=240)
    except TimeoutError as exc:  # what each verb did and what became of every peer, to find why
        story = [{k: e[k] for k in ("t", "type", "peer", "state", "reason", "to") if k in e}
                 for e in run.events.history() if e["type"] in ("peer", "run") and e.get("state") != "alive"]
        raise AssertionError(f"{exc}\nverbs: {list(zip(calls, results))}\npeers and run: {story}") from None
    assert run.state()["status"] == "running"
    steps = run.events.history("step")
    assert all(s["stage_samples"] == [run.config.global_batch] * run.config.stages for s in steps), steps


def test_verbs_sent_at_once_are_each_done_or_refused_and_the_run_stays_exact(small_run: RunConfig,
                                                                            tmp_path: Path) -> None:
    run = labkit.launch(small_run.replace(stages=2, peers=2, steps=10_000))
    try:
        check_verbs_at_once(run, tmp_path)
    finally:
        run.stop()
