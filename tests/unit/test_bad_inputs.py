"""Bad inputs through the CLI and the API: one clear line (exit 2) or one named exception, never a
traceback, a hang or a half-written run directory."""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import labkit
from labkit.cli.main import main
from labkit.config import MAX_THREADS, ConfigError, DataConfig, ModelConfig, RunConfig, SyncConfig
from labkit.data import load_corpus
from labkit.lab import replay
from labkit.lab.rows import rows_of_run
from labkit.model.assembly import initial_states
from labkit.model.memory import check_memory, estimate_memory
from labkit.plan.matrix_file import load_network
from labkit.plan.network import NetworkScenario
from labkit.plan.plan import Plan
from labkit.runtime.checkpoint import load_checkpoint, save_checkpoint
from labkit.sim.events_sim import run_events
from labkit.sim.presets import small_swarm
from labkit.sim.scenario import SimScenario
from labkit.sim.traces import ChurnModel
from tests.waiting import wait_until

CFG = RunConfig(model=ModelConfig(size="nano", seq_len=32), global_batch=16, microbatch=4, steps=5, eval_every=0)
TRAIN = ["train", "--seq-len", "32", "--global-batch", "16", "--microbatch", "4", "--steps", "5", "--eval-every", "0",
         "--no-progress", "--no-report"]
GARBAGE = bytes(range(256)) * 8
NON_UTF8 = b'\xff\xfe{"a": 1}'
PLAN = {"method": "dtfm", "scenario": "t", "time": 1.0, "parts": {"dp": 0.1, "pp": 0.2, "compute": 0.3},
        "stages": [{"devices": ["a", "b"], "layers": 9, "roles": ["replica", "replica"]},
                   {"devices": ["c"], "layers": 3, "roles": ["replica"]}], "links": [[["a", "c", 1.0]]]}
NETWORK = {"name": "n", "devices": [{"name": "a"}, {"name": "b"}], "delay": [[0, 0.01], [0.01, 0]],
           "bandwidth": [[0, 1e9], [1e9, 0]]}
SCENARIO = {"stages": 2, "duration": 30, "peers": [{"device": "T4", "count": 2, "stage": 0},
                                                   {"device": "T4", "count": 2, "stage": 1}]}


def cli_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """Run `labkit argv`; check it exits 2 with one `labkit <cmd>: error:` line on stderr; return that line."""
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert err.count("\n") == 0 and err.startswith(f"labkit {argv[0]}: error: "), err
    return err


def write(path: Path, content: bytes | str | object) -> Path:
    """Write bytes, text, or anything else as JSON, to `path`."""
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


# -- checkpoints: `--resume` and labkit.launch(cfg, resume=...) ------------------------------------

class RunsCode:
    """Unpickling this runs code: a checkpoint must never do that."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (Path.touch, (self.marker,))


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    """A checkpoint of CFG at step 2 with tiny stand-in stage states."""
    stages = [{"params": {"w": torch.zeros(2)}, "optimizer": {}, "param_names": ["w"]} for _ in range(CFG.stages)]
    return save_checkpoint(tmp_path / "good.pt", CFG, 2, stages)


def _doctored(good: Path, path: Path, **changes: object) -> Path:
    """`good` with some top-level entries replaced (None removes the entry)."""
    data = torch.load(good, weights_only=True)
    for key, value in changes.items():
        data.pop(key) if value is None else data.__setitem__(key, value)
    torch.save(data, path)
    return path


BAD_CHECKPOINTS = {
    "empty": lambda good, p: write(p, b""),
    "garbage": lambda good, p: write(p, GARBAGE),
    "truncated": lambda good, p: write(p, good.read_bytes()[:100]),
    "json": lambda good, p: write(p, "{}"),
    "non_utf8": lambda good, p: write(p, NON_UTF8),
    "folder": lambda good, p: (p.mkdir(), p)[1],
    "missing": lambda good, p: p,
    "a_list": lambda good, p: (torch.save([1, 2], p), p)[1],
    "no_config": lambda good, p: _doctored(good, p, config=None),
    "bad_config": lambda good, p: _doctored(good, p, config={**CFG.to_dict(), "lr": "fast"}),
    "step_text": lambda good, p: _doctored(good, p, step="3"),
    "step_negative": lambda good, p: _doctored(good, p, step=-1),
    "one_stage": lambda good, p: _doctored(good, p, stages=[{"params": {}}]),
    "rng_text": lambda good, p: _doctored(good, p, torch_rng="x"),
}


@pytest.mark.parametrize("kind", sorted(BAD_CHECKPOINTS))
def test_a_bad_checkpoint_raises_one_error_naming_the_file(kind: str, checkpoint: Path, tmp_path: Path) -> None:
    path = BAD_CHECKPOINTS[kind](checkpoint, tmp_path / f"{kind}.pt")
    with pytest.raises((ValueError, FileNotFoundError), match=f"{kind}.pt") as err:
        load_checkpoint(path, CFG)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("kind", ["truncated", "garbage", "no_config", "folder"])
def test_resume_from_a_bad_checkpoint_is_one_line_and_leaves_no_run_directory(
        kind: str, checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = BAD_CHECKPOINTS[kind](checkpoint, tmp_path / f"{kind}.pt")
    assert f"{kind}.pt" in cli_error([*TRAIN, "--run-dir", str(tmp_path / "run"), "--resume", str(path)], capsys)
    with pytest.raises(ValueError, match=f"{kind}.pt"):
        labkit.launch(CFG, resume=path, run_dir=tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_a_checkpoint_that_would_run_code_is_refused_unrun(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    torch.save({"format": "labkit-checkpoint-1", "config": RunsCode(marker)}, tmp_path / "evil.pt")
    with pytest.raises(ValueError, match="evil.pt.*refers to code"):
        load_checkpoint(tmp_path / "evil.pt", CFG)
    assert not marker.exists()


def test_good_checkpoints_still_load_with_a_diloco_stage(tmp_path: Path) -> None:
    stages = [{**state, "sync": SyncConfig(mode="diloco")} for state in initial_states(CFG)]
    data = load_checkpoint(save_checkpoint(tmp_path / "c.pt", CFG, 0, stages), CFG)
    assert data["step"] == 0 and data["stages"][0]["sync"].mode == "diloco"


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The checkpoint a real 2-step run of CFG's model left (stages with their AdamW state)."""
    run_dir = tmp_path_factory.mktemp("trained") / "run"
    labkit.launch(CFG.replace(steps=2, data=DataConfig(max_bytes=2_000_000)), run_dir=run_dir).wait(120)
    return run_dir / "checkpoint.pt"


def _first(state: dict) -> str:
    return next(iter(state["params"]))


def _exp_avg(state: dict) -> dict:
    return state["optimizer"]["state"][0]


# each damages stage 0 of a real checkpoint in place; the error must name the entry and the rule
DAMAGED_STAGES = {
    "params_fp16": (lambda s: s.__setitem__("params", {k: v.half() for k, v in s["params"].items()}), "float16"),
    "params_int": (lambda s: s.__setitem__("params", {k: v.long() for k, v in s["params"].items()}), "int64"),
    "params_nan": (lambda s: s["params"][_first(s)].view(-1).__setitem__(0, math.nan), "NaN or infinite"),
    "params_inf": (lambda s: s["params"][_first(s)].view(-1).__setitem__(0, -math.inf), "NaN or infinite"),
    "params_shape": (lambda s: s["params"].__setitem__(_first(s), s["params"][_first(s)][:3].clone()), "shape"),
    "params_missing": (lambda s: s["params"].pop(_first(s)), "missing"),
    "params_unknown": (lambda s: s["params"].__setitem__("zzz", torch.zeros(2)), "unknown"),
    "params_a_list": (lambda s: s["params"].__setitem__(_first(s), [1.0]), "a tensor"),
    "optimizer_none": (lambda s: s.__setitem__("optimizer", None), "restart the optimizer"),
    "optimizer_removed": (lambda s: s.pop("optimizer"), "restart the optimizer"),
    "optimizer_text": (lambda s: s.__setitem__("optimizer", "adamw"), "state dict"),
    "optimizer_emptied": (lambda s: s["optimizer"].__setitem__("state", {}), "lacks the state of"),
    "optimizer_one_gone": (lambda s: s["optimizer"]["state"].pop(3), "lacks the state of 1"),
    "optimizer_nan": (lambda s: _exp_avg(s)["exp_avg"].view(-1).__setitem__(0, math.nan), "NaN or infinite"),
    "optimizer_shape": (lambda s: _exp_avg(s).__setitem__("exp_avg", _exp_avg(s)["exp_avg"][:1].clone()), "shape"),
    "optimizer_fp16": (lambda s: _exp_avg(s).__setitem__("exp_avg_sq", _exp_avg(s)["exp_avg_sq"].half()), "float16"),
    "optimizer_index": (lambda s: s["optimizer"]["state"].__setitem__(999, {}), "parameter numbers"),
}


@pytest.mark.parametrize("kind", sorted(DAMAGED_STAGES))
def test_a_checkpoint_that_loads_but_is_damaged_is_refused(kind: str, trained: Path, tmp_path: Path) -> None:
    damage, needle = DAMAGED_STAGES[kind]
    data = torch.load(trained, weights_only=True)
    damage(data["stages"][0])
    torch.save(data, tmp_path / f"{kind}.pt")
    with pytest.raises(ValueError, match=f"{kind}.pt is damaged: stages\\[0\\]") as err:
        load_checkpoint(tmp_path / f"{kind}.pt", CFG)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_the_real_checkpoint_loads_and_one_of_another_model_is_refused(trained: Path) -> None:
    assert load_checkpoint(trained, CFG)["step"] == 2
    other = CFG.replace(model=ModelConfig(size="tiny", seq_len=32))
    with pytest.raises(ValueError, match="checkpoint.pt holds model .*size='nano'.* the run asks for .*size='tiny'"):
        load_checkpoint(trained, other)


@pytest.mark.parametrize("kind", ["params_fp16", "optimizer_none", "params_nan"])
def test_resume_from_a_damaged_checkpoint_is_one_line(kind: str, trained: Path, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    data = torch.load(trained, weights_only=True)
    DAMAGED_STAGES[kind][0](data["stages"][0])
    torch.save(data, tmp_path / f"{kind}.pt")
    err = cli_error([*TRAIN, "--run-dir", str(tmp_path / "run"), "--resume", str(tmp_path / f"{kind}.pt")], capsys)
    assert f"{kind}.pt is damaged" in err
    assert not (tmp_path / "run").exists()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("special", ["fifo", "/dev/zero"])
def test_a_checkpoint_that_is_not_a_regular_file_is_refused_unopened(special: str, tmp_path: Path) -> None:
    path = Path(special) if special.startswith("/") else _fifo(tmp_path / "ckpt.pt")
    with pytest.raises(ValueError, match=f"{path.name}' is not a regular file"):
        load_checkpoint(path, CFG)


def _fifo(path: Path) -> Path:
    """A real named pipe at `path` (opening it for reading would wait for a writer forever)."""
    os.mkfifo(path)
    return path


# -- plan.json: `train --plan`, `simulate --plan`, Plan.load / from_json ---------------------------

BAD_PLANS = {
    "empty": "", "garbage": GARBAGE, "non_utf8": NON_UTF8, "a_list": [1, 2], "null": None, "no_stages": "-stages",
    "stages_text": {"stages": "ab"}, "stage_a_list": {"stages": [[1], [2]]},
    "no_layers": {"stages": [{"devices": ["a"]}]},
    "devices_text": {"stages": [{"devices": "ab", "layers": 1}, {"devices": ["c"], "layers": 1}]},
    "device_numbers": {"stages": [{"devices": [1], "layers": 1}, {"devices": [2], "layers": 1}]},
    "layers_text": {"stages": [{"devices": ["a"], "layers": "3"}, {"devices": ["c"], "layers": 1}]},
    "link_pairs": {"links": [[["a", "c"]]]}, "share_text": {"links": [[["a", "c", "half"]]]},
    "time_text": {"time": "x"},
    "time_nan": {"time": math.nan}, "parts_list": {"parts": [1]}, "meta_list": {"meta": [1]},
}


def _plan_file(tmp_path: Path, kind: str) -> Path:
    """A plan.json spoiled as BAD_PLANS[kind] says: raw content, a removed key, or changed keys."""
    bad = BAD_PLANS[kind]
    if isinstance(bad, dict):
        bad = {**PLAN, **bad}
    elif isinstance(bad, str) and bad.startswith("-"):
        bad = {k: v for k, v in PLAN.items() if k != bad[1:]}
    return write(tmp_path / f"{kind}.json", bad if isinstance(bad, (bytes, str)) else json.dumps(bad))


@pytest.mark.parametrize("kind", sorted(BAD_PLANS))
def test_a_bad_plan_raises_one_config_error(kind: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="Plan") as err:
        Plan.load(_plan_file(tmp_path, kind))
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("kind", ["empty", "non_utf8", "a_list", "no_stages", "share_text"])
def test_train_and_simulate_reject_a_bad_plan_in_one_line(kind: str, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    path = str(_plan_file(tmp_path, kind))
    assert "Plan." in cli_error([*TRAIN, "--run-dir", str(tmp_path / "run"), "--plan", path], capsys)
    assert "Plan." in cli_error(["simulate", "--plan", path, "--network", "dtfm_regional"], capsys)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("loader", [Plan.load, NetworkScenario.load, SimScenario.load],
                         ids=["plan", "network", "simulation"])
def test_a_folder_or_a_missing_file_is_one_error(loader, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not a folder"):
        loader(tmp_path)
    with pytest.raises(FileNotFoundError, match="nope.json"):
        loader(tmp_path / "nope.json")


def test_plan_files_that_are_not_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ConfigError, match="Plan.json.*JSON"):
        Plan.from_json("{oops")
    assert "nope.json" in cli_error([*TRAIN, "--plan", str(tmp_path / "nope.json")], capsys)


# -- scenario files: `labkit plan SCENARIO` and `labkit simulate SCENARIO` -------------------------

BAD_NETWORKS = {
    "empty": "", "garbage": GARBAGE, "non_utf8": NON_UTF8, "a_list": [], "no_name": {"devices": [{"kind": "V100"}]},
    "kind_list": {"devices": [{"name": "a", "kind": ["V100"]}, {"name": "b"}]}, "extra_list": {"extra": [1]},
    "region_list": {"devices": [{"name": "a", "region": [1]}, {"name": "b"}]}, "name_list": {"name": [1]},
}


@pytest.mark.parametrize("kind", sorted(BAD_NETWORKS))
def test_a_bad_network_scenario_is_one_line(kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = BAD_NETWORKS[kind]
    path = write(tmp_path / f"{kind}.json", {**NETWORK, **bad} if isinstance(bad, dict) else bad)
    with pytest.raises(ConfigError):
        NetworkScenario.load(path)
    cli_error(["plan", str(path), "--method", "random", "--stages", "1", "--out", str(tmp_path / "out")], capsys)
    assert not (tmp_path / "out").exists()


BAD_SCENARIOS = {
    "empty": "", "garbage": GARBAGE, "non_utf8": NON_UTF8, "a_list": [], "null": None,
    "device_list": {"peers": [{"device": ["T4"], "count": 1, "stage": 0}, {"device": "T4", "count": 1, "stage": 1}]},
    "join_device_list": {"join_device": ["T4"]}, "unknown_key": {"zzz": 1}, "peers_object": {"peers": {"device": "T4"}},
}
HUGE_SCENARIOS = {
    "count_huge": {"peers": [{"device": "T4", "count": 10**9, "stage": 0}, {"device": "T4", "count": 1, "stage": 1}]},
    "duration_huge": {"duration": 1e12}, "bins_tiny": {"bin_seconds": 1e-6},
    "rebalance_tiny": {"rebalance_period": 1e-6},
    "trainers_huge": {"trainers": 10**9}, "window_huge": {"window": 10**9}, "trace_huge": {"trace": [[1, 10**9]]},
    "leave_huge": {"trace": [[1, -10**9]]}, "churn_huge": {"churn": {"hours": 1e6, "join_per_hour": 1e6}},
    "seed_huge": {"seed": 2**70},
}


@pytest.mark.parametrize("kind", sorted(BAD_SCENARIOS))
def test_a_bad_simulation_scenario_is_one_line(kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = BAD_SCENARIOS[kind]
    path = write(tmp_path / f"{kind}.json", {**SCENARIO, **bad} if isinstance(bad, dict) else bad)
    with pytest.raises(ConfigError):
        SimScenario.load(path)
    cli_error(["simulate", str(path), "--out", str(tmp_path / "out")], capsys)
    assert not (tmp_path / "out").exists()


def test_scenario_paths_that_are_not_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert "not a folder" in cli_error(["simulate", str(tmp_path)], capsys)


# -- output folders ------------------------------------------------------------------------------

@pytest.mark.parametrize("under", [False, True], ids=["a_file", "under_a_file"])
def test_an_output_folder_that_is_a_file_is_one_line(under: bool, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    file = write(tmp_path / "afile", "keep me")
    out = str(file / "sub" if under else file)
    assert "afile" in cli_error([*TRAIN, "--run-dir", out], capsys)
    assert "afile" in cli_error(["plan", "--preset", "dtfm_regional", "--n", "8", "--out", out], capsys)
    assert "afile" in cli_error(["simulate", "--preset", "small-swarm", "--out", out], capsys)
    assert file.read_text() == "keep me"


# -- size knobs: plan, simulate and train --plan ---------------------------------------------------

@pytest.mark.parametrize(("argv", "needle"), [
    (["plan", "--preset", "dtfm_world", "--n", "100000000"], "argument --n: 100000000 is not allowed"),
    (["plan", "--preset", "dtfm_world", "--n", "520"], "from 1 to 512"),
    (["plan", "--preset", "dtfm_world", "--generations", "1000000000"], "argument --generations"),
    (["plan", "--preset", "dtfm_world", "--layers", "1" + "0" * 400], "argument --layers"),
    (["simulate", "--preset", "small-swarm", "--max-hops", "10000000000"], "argument --max-hops"),
    (["simulate", "--preset", "small-swarm", "--duration", "1e12"], "Scenario.duration"),
    (["simulate", "--preset", "small-swarm", "--seed", "-1"], "argument --seed"),
])
def test_absurd_sizes_are_one_line(argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert needle in cli_error(argv, capsys)


@pytest.mark.parametrize("kind", sorted(HUGE_SCENARIOS))
def test_a_huge_simulation_scenario_is_one_line(kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path / f"{kind}.json", {**SCENARIO, **HUGE_SCENARIOS[kind]})
    with pytest.raises(ConfigError):
        SimScenario.load(path)
    cli_error(["simulate", str(path), "--out", str(tmp_path / "out")], capsys)


def test_a_scenario_file_with_more_devices_than_the_planner_takes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr("labkit.cli.plan.MAX_DEVICES", 1)
    path = write(tmp_path / "two.json", NETWORK)
    assert "at most 1 devices (it has 2)" in cli_error(["plan", str(path), "--out", str(tmp_path / "o")], capsys)


def test_max_peers_is_at_least_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plan = str(write(tmp_path / "p.json", PLAN))
    assert "argument --max-peers" in cli_error([*TRAIN, "--plan", plan, "--max-peers", "0"], capsys)


def test_the_device_limit_is_in_the_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["plan", "--help"])
    assert "At most 512" in " ".join(capsys.readouterr().out.split())


def test_simulator_api_bounds() -> None:
    with pytest.raises(ConfigError, match="max_hops"):
        run_events(small_swarm(), max_hops=10**10)
    with pytest.raises(ConfigError, match="rebalance_period.*events mode"):
        run_events(SimScenario.from_dict({**SCENARIO, "peers": [{"device": "T4", "count": 50_000, "stage": 0},
                                                                {"device": "T4", "count": 50_000, "stage": 1}],
                                          "duration": 6000, "rebalance_period": 60}))
    with pytest.raises(ConfigError, match="ChurnModel.hours"):
        ChurnModel(hours=1e9, join_per_hour=1.0)


# -- divergence bounds of the run configs --------------------------------------------------------

@pytest.mark.parametrize(("owner", "field", "value", "allowed"), [
    (RunConfig, "lr", 1e308, "<= 10"), (RunConfig, "lr", 10.5, "<= 10"), (RunConfig, "lr", math.inf, "<= 10"),
    (RunConfig, "weight_decay", 1e300, "<= 1"), (RunConfig, "peer_timeout", 1e308, "<= 86400"),
    (RunConfig, "rebalance_period", 1e308, "<= 86400"), (SyncConfig, "outer_lr", 100.0, "<= 2"),
    (RunConfig, "seed", 2**70, "< 2"), (ModelConfig, "seq_len", 10**8, "<= 65536"),
])
def test_absurd_numbers_are_refused_with_the_range(owner: type, field: str, value: float, allowed: str) -> None:
    with pytest.raises(ConfigError, match=f"{owner.__name__}.{field}=.* is not allowed: .*{allowed}") as err:
        owner(**{field: value})
    assert err.value.field == field


def test_sane_extremes_are_accepted() -> None:
    RunConfig(lr=10.0, weight_decay=1.0, peer_timeout=86_400.0, rebalance_period=86_400.0)
    SyncConfig(outer_lr=2.0)


@pytest.mark.parametrize(("flag", "value", "needle"), [
    ("--lr", "1e10", "RunConfig.lr=10000000000.0"), ("--outer-lr", "1e10", "SyncConfig.outer_lr"),
    ("--rebalance-period", "1e300", "RunConfig.rebalance_period"), ("--seed", str(2**70), "RunConfig.seed"),
    ("--seq-len", "100000000", "ModelConfig.seq_len"),
])
def test_absurd_training_flags_are_one_line(flag: str, value: str, needle: str,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert needle in cli_error(["train", flag, value], capsys)


# -- data ----------------------------------------------------------------------------------------

def test_a_single_small_text_file_is_split_by_position(tmp_path: Path) -> None:
    book = write(tmp_path / "book.txt", bytes(range(32, 127)) * 1700)  # 161.5 KB: 3 chunks, all hashed to train
    corpus = load_corpus(DataConfig(path=str(book)))
    assert corpus.val.size == round(book.stat().st_size * 0.1) and corpus.train.size + corpus.val.size == 161_500
    assert corpus.val.tobytes() == book.read_bytes()[-corpus.val.size:]


def test_train_on_a_single_small_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    book = write(tmp_path / "book.txt", bytes(range(32, 127)) * 1700)
    assert main([*TRAIN, "--steps", "2", "--data", str(book), "--run-dir", str(tmp_path / "run")]) == 0
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["status"] == "finished"


@pytest.mark.parametrize(("content", "needle"), [(b"", "too small"), (b"x" * 3000, "too small"),
                                                 (b"x" * 6000, "window of --seq-len")])
def test_too_little_data_is_a_bad_flag(content: bytes, needle: str, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    data = write(tmp_path / "small.txt", content)
    seq = ["--seq-len", "2048"] if "window" in needle else []
    err = cli_error([*TRAIN, *seq, "--data", str(data), "--run-dir", str(tmp_path / "run")], capsys)
    assert needle in err and "small.txt" in err
    assert not (tmp_path / "run").exists()


def test_an_empty_folder_is_too_small(tmp_path: Path) -> None:
    os.mkdir(tmp_path / "none")
    with pytest.raises(ValueError, match="none is too small"):
        load_corpus(DataConfig(path=str(tmp_path / "none")))


# -- sizes that cannot fit: the memory estimate, threads -----------------------------------------

def test_a_run_that_cannot_fit_is_refused_with_its_estimate_and_what_fits() -> None:
    big = RunConfig(model=ModelConfig(size="small", seq_len=1024), global_batch=4096, microbatch=1024)
    with pytest.raises(ConfigError, match=r"RunConfig.memory='an estimated .* GiB \(weights .*activations.*"
                                          r"at most the 16.00 GiB this machine has free; microbatch=\d+ .*would fit"):
        check_memory(big, 16 << 30)
    huge = RunConfig(model=ModelConfig(size="large"), peers=8, global_batch=64, microbatch=16)
    with pytest.raises(ConfigError, match="even microbatch=1 does not fit: use fewer peers"):
        check_memory(huge, 8 << 30)
    assert check_memory(CFG, 8 << 30).total < 2 << 30


def test_launch_refuses_an_in_process_run_this_machine_cannot_hold(tmp_path: Path) -> None:
    """Checked against the free memory before anything starts: no thread, no run directory."""
    huge = RunConfig(model=ModelConfig(size="large", seq_len=2048), peers=64, global_batch=64, microbatch=64)
    with pytest.raises(ConfigError, match="RunConfig.memory='an estimated .* GiB"):
        labkit.launch(huge, run_dir=tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_the_estimate_counts_every_replica_and_every_microbatch_in_flight() -> None:
    one, four = estimate_memory(CFG.replace(peers=1)), estimate_memory(CFG.replace(peers=4))
    assert four.weights == 4 * one.weights and four.activations > one.activations
    assert estimate_memory(CFG.replace(inflight=8)).activations > 4 * estimate_memory(CFG).activations / 2
    assert estimate_memory(CFG.replace(activation_checkpointing=True)).activations < estimate_memory(CFG).activations
    sgd = estimate_memory(CFG.replace(optimizer="sgd", momentum=0.0))
    assert sgd.weights == estimate_memory(CFG).weights * 4 // 6  # no AdamW moments: 4 copies, not 6


@pytest.mark.parametrize("threads", [10**5, 10**9])
def test_a_huge_thread_count_is_one_line(threads: int, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ConfigError, match=f"RunConfig.threads={threads} .*to {MAX_THREADS}"):
        RunConfig(threads=threads)
    assert "RunConfig.threads" in cli_error([*TRAIN, "--threads", str(threads)], capsys)


@pytest.mark.timeout(60)
def test_training_data_that_is_a_fifo_or_a_device_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fifo = _fifo(tmp_path / "pipe.txt")
    assert "not a FIFO" in cli_error([*TRAIN, "--data", str(fifo), "--run-dir", str(tmp_path / "run")], capsys)
    with pytest.raises(ConfigError, match="DataConfig.path='/dev/zero' .*not a character device"):
        DataConfig(path="/dev/zero")
    assert not (tmp_path / "run").exists()


# -- malformed run directories: `labkit report` and labkit.lab.replay ----------------------------

HOP = {"type": "hop", "t": 0.1, "trainer": "t0", "stage": 0, "peer": "s0p0", "direction": "forward", "bytes": 10,
       "seconds": 0.01, "microbatch": 1, "timing": {}, "link_seconds": 0.0}
STEP = {"type": "step", "t": 0.2, "step": 1, "loss": 5.0, "samples": 16, "tokens": 512}
EVENTS = json.dumps(HOP) + "\n" + json.dumps(STEP) + "\n"
NESTED = "[" * 100_000 + "]" * 100_000
BAD_RUN_DIRS = {  # files of the directory (None: a folder), and what the error names
    "no_events": ({"summary.json": "{}"}, "holds no events.jsonl"),
    "events_folder": ({"events.jsonl": None}, "events.jsonl' is not allowed: a run's events.jsonl: a file, not a folder"),
    "garbage_line": ({"events.jsonl": "xx\x00garbage\n" + EVENTS}, "events.jsonl:1 is not a JSON event"),
    "a_list_line": ({"events.jsonl": "[1, 2]\n" + EVENTS}, "events.jsonl:1 is not an event"),
    "t_text": ({"events.jsonl": json.dumps({**STEP, "t": "soon"})}, "events.jsonl:1 is not an event"),
    "hop_missing_fields": ({"events.jsonl": json.dumps({"type": "hop", "t": 0})}, "event 1 (type 'hop') does not fit"),
    "step_text_fields": ({"events.jsonl": json.dumps({**STEP, "step": "one"})}, "step='one' is not a number"),
    "nested_event": ({"events.jsonl": '{"type": ' + NESTED + "}\n" + EVENTS}, "nests deeper than 64"),
    "non_utf8": ({"events.jsonl": b"\xff\xfe" + EVENTS.encode()}, "events.jsonl is not UTF-8"),
    "config_garbage": ({"events.jsonl": EVENTS, "config.json": "{oops"}, "config.json' is not allowed"),
    "config_wrong": ({"events.jsonl": EVENTS, "config.json": json.dumps({"lr": "fast"})}, "config.json is not a run's"),
    "config_a_list": ({"events.jsonl": EVENTS, "config.json": "[1]"}, "config.json is not a run's"),
    "config_nested": ({"events.jsonl": EVENTS, "config.json": '{"model": ' + NESTED + "}"}, "nests deeper than 64"),
}
REPORT_ONLY = {  # files only the report reads
    "summary_a_list": ({"events.jsonl": EVENTS, "summary.json": "[1, 2]"}, "summary.json is not a summary.json"),
    "throughput_text": ({"events.jsonl": EVENTS, "throughput.json": json.dumps([{"t": "x"}])}, "throughput.json is not"),
}
HARMLESS_RUN_DIRS = {"empty_events": "", "cut_short": EVENTS + '{"type": "st', "unknown_type": '{"type": "zap", "t": 0}\n' + EVENTS}


def _run_dir(tmp_path: Path, files: dict[str, str | bytes | None]) -> Path:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    for name, content in files.items():
        (run_dir / name).mkdir() if content is None else write(run_dir / name, content)
    return run_dir


@pytest.mark.parametrize("kind", sorted(BAD_RUN_DIRS) + sorted(REPORT_ONLY))
def test_a_malformed_run_directory_is_one_line_naming_the_file(kind: str, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    files, needle = {**BAD_RUN_DIRS, **REPORT_ONLY}[kind]
    run_dir = _run_dir(tmp_path, files)
    assert needle in cli_error(["report", str(run_dir)], capsys)
    if kind in BAD_RUN_DIRS:
        with pytest.raises((ValueError, OSError), match=re.escape(needle)):
            replay(run_dir)
    assert not (run_dir / "report.html").exists()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["missing", "a_file", "fifo_events"])
def test_a_run_directory_that_is_not_one_is_one_line(kind: str, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "run"
    if kind == "a_file":
        write(path, "x")
    elif kind == "fifo_events":
        path.mkdir()
        _fifo(path / "events.jsonl")
    needle = {"missing": "it does not exist", "a_file": "it is not a directory", "fifo_events": "not a FIFO"}[kind]
    assert needle in cli_error(["report", str(path)], capsys)
    with pytest.raises((ValueError, OSError), match=needle):
        replay(path)


@pytest.mark.parametrize("kind", sorted(HARMLESS_RUN_DIRS))
def test_an_empty_cut_short_or_newer_event_log_still_replays(kind: str, tmp_path: Path) -> None:
    run_dir = _run_dir(tmp_path, {"events.jsonl": HARMLESS_RUN_DIRS[kind]})
    rows = rows_of_run(run_dir)  # what replay and the report draw (the report's rendering: test_cli_simulate)
    assert rows.now == (0.0 if kind == "empty_events" else 0.2) and replay(run_dir) is not None


# -- JSON the CLI reads: nesting, non-finite numbers, special files --------------------------------

LOADERS = {"plan": Plan.load, "network": NetworkScenario.load, "scenario": SimScenario.load,
           "matrix": load_network}
NOT_PLAIN_JSON = {"nested": ('{"a": ' + NESTED + "}", "nests deeper than 64 levels"),
                  "nan": ('{"a": NaN}', "it holds NaN"), "infinity": ('{"a": -Infinity}', "it holds -Infinity"),
                  "1e400": ('{"a": 1e400}', "too big for a float"), "huge_int": ('{"a": 1' + "0" * 400 + "}", "401 digits")}


@pytest.mark.parametrize("kind", sorted(NOT_PLAIN_JSON))
@pytest.mark.parametrize("loader", sorted(LOADERS))
def test_json_that_is_not_plain_is_one_config_error(loader: str, kind: str, tmp_path: Path) -> None:
    text, needle = NOT_PLAIN_JSON[kind]
    with pytest.raises(ConfigError, match=f"{kind}.json.* plain JSON \\(.*{needle}") as err:
        LOADERS[loader](write(tmp_path / f"{kind}.json", text))
    assert "\n" not in str(err.value)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("special", ["fifo", "dev_zero", "huge"])
@pytest.mark.parametrize("loader", sorted(LOADERS))
def test_a_special_or_huge_file_is_refused_unread(loader: str, special: str, tmp_path: Path) -> None:
    if special == "fifo":
        path, needle = _fifo(tmp_path / "pipe.json"), "not a FIFO"
    elif special == "dev_zero":
        path, needle = Path("/dev/zero"), "not a character device"
    else:
        path, needle = tmp_path / "huge.json", "at most 256 MiB"
        with open(path, "wb") as f:
            f.truncate(3 << 30)  # 3 GiB of zero bytes, sparse: no disk used
    with pytest.raises(ConfigError, match=needle):
        LOADERS[loader](path)


@pytest.mark.timeout(60)
def test_the_cli_refuses_a_fifo_where_it_reads_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fifo = str(_fifo(tmp_path / "pipe.json"))
    assert "not a FIFO" in cli_error(["simulate", fifo, "--out", str(tmp_path / "o")], capsys)
    assert "not a FIFO" in cli_error([*TRAIN, "--plan", fifo, "--run-dir", str(tmp_path / "r")], capsys)
    assert not (tmp_path / "o").exists() and not (tmp_path / "r").exists()


# -- extreme numbers in --network files and scenario files ---------------------------------------

MATRIX = {"delay_ms": [[0, 5], [5, 0]], "bandwidth_gbps": [[0, 2], [2, 0]]}
EXTREMES = {"1e308": 1e308, "negative": -1.0, "tiny": 1e-308}


NETWORK_FIELDS = [("matrix", "delay_ms"), ("matrix", "bandwidth_gbps"), ("network", "delay"), ("network", "bandwidth"),
                  ("network", "flops"), ("network", "memory")]
HARMLESS = {"delay_ms": "tiny", "delay": "tiny", "rtt_ms": "tiny", "overhead_ms": "tiny"}  # 1e-308 s or ms is zero


@pytest.mark.parametrize(("where", "field", "value"), [(w, f, v) for w, f in NETWORK_FIELDS for v in sorted(EXTREMES)
                                                       if HARMLESS.get(f) != v])
def test_extreme_numbers_in_network_files_are_refused(where: str, field: str, value: str, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    data = json.loads(json.dumps(MATRIX if where == "matrix" else NETWORK))
    if field in ("flops", "memory"):
        data["devices"][0][field] = EXTREMES[value]
    else:
        data[field][0][1] = EXTREMES[value]
    path = str(write(tmp_path / "n.json", data))
    argv = ["plan", *(["--network", path] if where == "matrix" else [path]), "--stages", "1", "--out", str(tmp_path / "o")]
    assert f".{field}" in cli_error(argv, capsys)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(("field", "value"), [(f, v) for f in ("rtt_ms", "bandwidth_mbps", "overhead_ms", "compression",
                                                               "service_cv") for v in sorted(EXTREMES)
                                              if HARMLESS.get(f) != v])
def test_extreme_numbers_in_scenario_files_are_refused(field: str, value: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=f"Scenario.{field}="):
        SimScenario.load(write(tmp_path / "s.json", {**SCENARIO, field: EXTREMES[value]}))


@pytest.mark.parametrize(("field", "value"), [("rtt_ms", "1e308"), ("rtt_ms", "negative"), ("bandwidth_mbps", "1e308"),
                                              ("bandwidth_mbps", "tiny"), ("bandwidth_mbps", "negative")])
def test_extreme_numbers_in_a_scenario_link_are_refused(field: str, value: str) -> None:
    link = {"a": "x", "b": "y", "rtt_ms": 1.0, "bandwidth_mbps": 10.0, field: EXTREMES[value]}
    with pytest.raises(ConfigError, match=f"Link.{field}="):
        SimScenario.from_dict({**SCENARIO, "links": [link]})


# -- work that runs long: Ctrl-C stops it with one line and exit 130 ------------------------------

@pytest.mark.timeout(240)
@pytest.mark.parametrize(("argv", "bar", "line"), [
    # each once its work has begun: numba first compiles the kernels (a minute, cold), and a
    # compiling kernel does not see the Ctrl-C
    (["simulate", "--preset", "global-mix", "--duration", "6000000"],
     rb"global-mix \(events\)[^\r\n]*\| *[1-9][\d.]*/6000000", "labkit simulate: interrupted at "),
    (["plan", "--preset", "dtfm_world", "--n", "128", "--method", "kl", "--generations", "10000"],
     rb"kl GA[^\r\n]*\| *[1-9]\d*/10000", "labkit plan: interrupted while planning with kl"),
], ids=["simulate", "plan"])
def test_ctrl_c_stops_long_work_with_one_line_and_exit_130(argv: list[str], bar: bytes, line: str,
                                                           tmp_path: Path) -> None:
    err = tmp_path / "stderr"
    with open(err, "wb") as sink:
        proc = subprocess.Popen([sys.executable, "-m", "labkit.cli.main", *argv, "--out", str(tmp_path / "out")],
                                stderr=sink, stdout=subprocess.DEVNULL, cwd=Path(__file__).parents[2])
        try:
            wait_until(lambda: re.search(bar, err.read_bytes()) is not None, 180, "the progress bar")
            proc.send_signal(signal.SIGINT)
            assert proc.wait(60) == 130
        finally:
            proc.kill()
            proc.wait()
    text = err.read_text()
    assert line in text and "Traceback" not in text
    assert not (tmp_path / "out").exists()
