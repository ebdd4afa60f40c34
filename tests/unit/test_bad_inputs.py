"""Bad inputs through the CLI and the API: one clear line (exit 2) or one named exception, never a
traceback, a hang or a half-written run directory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import labkit
from labkit.cli.main import main
from labkit.config import ModelConfig, RunConfig, SyncConfig
from labkit.runtime.checkpoint import load_checkpoint, save_checkpoint

CFG = RunConfig(model=ModelConfig(size="nano", seq_len=32), global_batch=16, microbatch=4, steps=5, eval_every=0)
TRAIN = ["train", "--seq-len", "32", "--global-batch", "16", "--microbatch", "4", "--steps", "5", "--eval-every", "0",
         "--no-progress"]
GARBAGE = bytes(range(256)) * 8
NON_UTF8 = b'\xff\xfe{"a": 1}'


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
    stages = [{"params": {"w": torch.ones(2)}, "sync": SyncConfig(mode="diloco")} for _ in range(CFG.stages)]
    data = load_checkpoint(save_checkpoint(tmp_path / "c.pt", CFG, 1, stages), CFG)
    assert data["step"] == 1 and data["stages"][0]["sync"].mode == "diloco"
