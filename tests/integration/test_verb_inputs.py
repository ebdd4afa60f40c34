"""A verb's arguments are checked once, in the handle, before anything leaves the process: the same
bad input gives the same one-line error on every backend, and a refused verb never harms the run.
`check_verb_inputs` is shared with the Dask test (tests/cluster/test_dask_faults.py)."""

from __future__ import annotations

from concurrent.futures import wait
from pathlib import Path

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
