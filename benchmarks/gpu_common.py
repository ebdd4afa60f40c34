"""What the parts of `benchmarks/gpu_check.sh` share: the device's name and peaks, and one JSON
file of figures per part (beside the plain lines each part prints)."""

from __future__ import annotations

import json
import platform
import time
from pathlib import Path
from typing import Any

import torch

# Dense (no sparsity) tensor-core bf16 and plain (non-tensor-core) fp32 peaks of the SXM cards, from
# NVIDIA's H100/H200 data sheets: both chips have the same compute, H200 only more and faster memory.
PEAKS = {"H100": (989e12, 67e12), "H200": (989e12, 67e12)}


def device_name() -> str:
    """The CUDA device's name, or 'no CUDA' where torch sees none."""
    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no CUDA"


def peaks() -> tuple[float, float] | None:
    """(bf16 dense, fp32) peak FLOP/s of the device in use, or None for a device not in PEAKS."""
    name = device_name()
    return next((p for chip, p in PEAKS.items() if chip in name), None)


def write(out: str | None, part: str, figures: dict[str, Any]) -> None:
    """Write `figures` (with the device, torch and time) to the JSON file `out`, if given."""
    if out is None:
        return
    record = {"part": part, "device": device_name(), "torch": torch.__version__, "python": platform.python_version(),
              "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **figures}
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(record, indent=1, default=str))


def without_cuda(out: str | None, part: str) -> bool:
    """Whether there is no CUDA device; if so, say that `part` is skipped and record it in `out`."""
    if torch.cuda.is_available():
        return False
    print(f"{part} skipped: no CUDA (torch.cuda.is_available() is False)")
    write(out, part, {"skipped": "no CUDA"})
    return True
