"""Text corpora read as bytes (vocabulary 256), split train/validation by a stable hash.

The default corpus is the Python standard library's own `.py` files: every Python installation
has them, so nothing is downloaded. Any text file or folder works too. A file (or, for a single
file, each 64 KiB chunk) goes to validation when the SHA-1 of its relative path falls below
`val_fraction`, so the split never changes with the order files are found in. When that leaves
either part below its minimum (a small file, a folder of a few files), the text is cut by position
instead: its last `val_fraction` (at least MIN_VAL bytes) is validation.
"""

from __future__ import annotations

import hashlib
import os
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from labkit.config import DataConfig

CHUNK = 64 * 1024  # a single file is split into units of this many bytes
MIN_TRAIN, MIN_VAL = 4096, 1024  # bytes each part needs at least


@dataclass(frozen=True)
class Corpus:
    """Train and validation byte streams, and where they came from."""

    train: np.ndarray  # uint8
    val: np.ndarray  # uint8
    source: str
    files: int

    def describe(self) -> str:
        return f"{self.source}: {self.files} units, {self.train.size:,} train / {self.val.size:,} validation bytes"


def stdlib_root() -> Path:
    """The folder of the running Python's standard library."""
    return Path(sysconfig.get_paths()["stdlib"])


def _is_validation(name: str, val_fraction: float) -> bool:
    digest = hashlib.sha1(name.encode("utf-8", "surrogateescape")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < val_fraction


def _units(path: Path, stdlib: bool) -> list[tuple[str, bytes]]:
    """(stable name, bytes) of every unit of text under `path`, sorted by name."""
    if path.is_file():
        data = path.read_bytes()
        return [(f"{path.name}#{i}", data[o : o + CHUNK]) for i, o in enumerate(range(0, len(data), CHUNK))]
    units = []
    for root, dirs, files in os.walk(path, onerror=lambda _: None):  # a vanished folder is skipped
        dirs[:] = sorted(d for d in dirs if d != "site-packages" and not d.startswith("."))
        for name in sorted(files):
            if name.startswith(".") or (stdlib and not name.endswith(".py")):
                continue
            f = Path(root) / name
            try:
                units.append((f.relative_to(path).as_posix(), f.read_bytes()))
            except OSError:
                continue
    return sorted(units)


def load_corpus(cfg: DataConfig) -> Corpus:
    """Read the corpus `cfg` names, at most `cfg.max_bytes` bytes, and split it."""
    stdlib = cfg.path is None
    path = stdlib_root() if stdlib else Path(cfg.path).expanduser()
    if not path.exists():
        raise FileNotFoundError(f"DataConfig.path={cfg.path!r} does not exist: give a text file or a folder of text files")
    train, val, every, total, count = [], [], [], 0, 0
    for name, data in _units(path, stdlib):
        if total >= cfg.max_bytes:
            break
        data = data[: cfg.max_bytes - total]
        (val if _is_validation(name, cfg.val_fraction) else train).append(data)
        every.append(data)
        total += len(data)
        count += 1
    train_bytes, val_bytes = b"".join(train), b"".join(val)
    if len(train_bytes) < MIN_TRAIN or len(val_bytes) < MIN_VAL:
        text = b"".join(every)
        cut = len(text) - max(MIN_VAL, round(len(text) * cfg.val_fraction))
        train_bytes, val_bytes = text[: max(cut, 0)], text[max(cut, 0) :]
    if len(train_bytes) < MIN_TRAIN or len(val_bytes) < MIN_VAL:
        raise ValueError(
            f"corpus at {path} is too small: its {total:,} bytes give {len(train_bytes):,} train and "
            f"{len(val_bytes):,} validation bytes (val_fraction={cfg.val_fraction}); need at least "
            f"{MIN_TRAIN:,} and {MIN_VAL:,}"
        )
    source = "python-stdlib" if stdlib else str(path)
    return Corpus(np.frombuffer(train_bytes, np.uint8), np.frombuffer(val_bytes, np.uint8), source, count)
