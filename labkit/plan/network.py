"""A network scenario: devices plus pairwise delay and bandwidth matrices, validated, JSON in/out.

Units: compute speed in FLOP/s, memory in bytes, delay in seconds, bandwidth in **bytes/s**.
Matrices may be asymmetric (upload and download differ); the diagonal is ignored.

>>> s = NetworkScenario.from_dict({"name": "pair", "devices": [
...     {"name": "a", "kind": "V100"}, {"name": "b", "kind": "V100"}],
...     "delay": [[0, 0.01], [0.01, 0]], "bandwidth": [[0, 1e9], [1e9, 0]]})
>>> s.n
2
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from labkit.config import ConfigError
from labkit.jsonfile import read_json

# kind -> (peak FLOP/s used by the planners, memory bytes). Peak fp16 tensor-core throughput;
# the RTX 2080 is V100/1.55, the ratio the task pool paper uses to slow its simulated 2080s.
DEVICE_KINDS: dict[str, tuple[float, float]] = {
    "V100": (125e12, 16 * 2**30),
    "RTX2080": (125e12 / 1.55, 8 * 2**30),
    "RTX3080": (119e12, 10 * 2**30),
    "RTX4090": (165e12, 24 * 2**30),
    "CPU": (1e12, 64 * 2**30),
}

# Devices a planner takes on a laptop: n x n matrices are small, but Kernighan-Lin grows ~n^3
# (512 devices: ~15 s per GA generation on 2 cores, dtfm and cluster about a minute in all).
MAX_DEVICES = 512
# What a link and a device can be, generously: the planners' costs stay finite (no inf from 1e308 s or 1e-308 B/s)
MAX_DELAY = 1e6  # seconds one way: about 12 days
BANDWIDTH_RANGE = (1.0, 1e18)  # bytes/s between distinct devices: 8 bit/s to 8 Ebit/s
FLOPS_RANGE = (1e6, 1e21)  # FLOP/s of a device when given (0 = its kind's)
MEMORY_RANGE = (1e6, 1e18)  # bytes of a device when given (0 = its kind's)


@dataclass(frozen=True, kw_only=True, slots=True)
class Device:
    """One accelerator: its kind sets default speed and memory; `reliable` marks committed devices."""

    name: str  # unique within a scenario
    kind: str = "V100"  # one of DEVICE_KINDS
    flops: float = 0.0  # compute speed in FLOP/s; 0 = the kind's default
    memory: float = 0.0  # bytes; 0 = the kind's default
    reliable: bool = True  # the task pool paper: reliable devices become parameter servers
    region: str = ""  # free label (city, data center, machine) used to colour charts

    def __post_init__(self) -> None:
        o = "Device"
        if not (isinstance(self.name, str) and self.name):
            raise ConfigError(o, "name", self.name, "a non-empty string")
        if not isinstance(self.kind, str) or self.kind not in DEVICE_KINDS:
            raise ConfigError(o, "kind", self.kind, f"one of {sorted(DEVICE_KINDS)}")
        for name, (low, high) in (("flops", FLOPS_RANGE), ("memory", MEMORY_RANGE)):
            value = getattr(self, name)
            if not (finite_number(value) and (value == 0 or low <= value <= high)):
                raise ConfigError(o, name, value, f"0 (the kind's default) or a number from {low:g} to {high:g}")
        if not isinstance(self.reliable, bool):
            raise ConfigError(o, "reliable", self.reliable, "True or False")
        if not isinstance(self.region, str):
            raise ConfigError(o, "region", self.region, "a string (a free label)")
        flops, memory = DEVICE_KINDS[self.kind]
        object.__setattr__(self, "flops", float(self.flops or flops))
        object.__setattr__(self, "memory", float(self.memory or memory))


@dataclass(frozen=True, kw_only=True, eq=False)
class NetworkScenario:
    """Devices and the delay (s) / bandwidth (bytes/s) between every ordered pair (row sends)."""

    name: str
    devices: tuple[Device, ...]
    delay: np.ndarray  # (N, N) seconds, delay[i, j] from device i to device j
    bandwidth: np.ndarray  # (N, N) bytes/s
    notes: str = ""  # where the numbers come from
    extra: dict[str, Any] = field(default_factory=dict)  # generator arguments, for the record

    def __post_init__(self) -> None:
        devices = tuple(self.devices)
        object.__setattr__(self, "devices", devices)
        if not devices:
            raise ConfigError("NetworkScenario", "devices", [], "at least one device")
        names = [d.name for d in devices]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ConfigError("NetworkScenario", "devices", dup, "unique device names")
        n = len(devices)
        for key in ("delay", "bandwidth"):
            object.__setattr__(self, key, _matrix(key, getattr(self, key), n))
        off = ~np.eye(n, dtype=bool)
        low, high = BANDWIDTH_RANGE
        for key, bad, allowed in (
                ("bandwidth", (self.bandwidth < low) & off, f"> 0 bytes/s between distinct devices (every pair must "
                                                            f"be able to talk), at least {low:g}"),
                ("bandwidth", (self.bandwidth > high) & off, f"at most {high:g} bytes/s (8 Ebit/s)"),
                ("delay", (self.delay > MAX_DELAY) & off, f"at most {MAX_DELAY:g} seconds (about 12 days)")):
            where = np.argwhere(bad)
            if len(where):
                i, j = (int(v) for v in where[0])
                raise ConfigError("NetworkScenario", f"{key}[{i}][{j}]", float(getattr(self, key)[i, j]), allowed)

    @property
    def n(self) -> int:
        return len(self.devices)

    def names(self) -> list[str]:
        return [d.name for d in self.devices]

    def check_stages(self, stages: int) -> int:
        """Return N // stages, or raise naming the stage count when N is not a multiple of it."""
        if not (isinstance(stages, int) and not isinstance(stages, bool) and stages >= 1):
            raise ConfigError("plan", "stages", stages, "an integer >= 1")
        if self.n % stages:
            divisors = [k for k in range(1, self.n + 1) if self.n % k == 0]
            raise ConfigError("plan", "stages", stages, f"a divisor of the {self.n} devices: {divisors}")
        return self.n // stages

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able form; bandwidth in bytes/s, delay in seconds."""
        devs = [{"name": d.name, "kind": d.kind, "flops": d.flops, "memory": d.memory,
                 "reliable": d.reliable, "region": d.region} for d in self.devices]
        return {"name": self.name, "notes": self.notes, "extra": self.extra, "devices": devs,
                "delay": self.delay.tolist(), "bandwidth": self.bandwidth.tolist()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NetworkScenario:
        """Inverse of `to_dict`; raises ConfigError on a missing key or a bad value."""
        if not isinstance(data, dict):
            raise ConfigError("NetworkScenario", "json", type(data).__name__, "a JSON object")
        for key in ("name", "devices", "delay", "bandwidth"):
            if key not in data:
                raise ConfigError("NetworkScenario", key, None, "present (keys: name, devices, delay, bandwidth)")
        if not isinstance(data["devices"], list) or not all(isinstance(d, dict) for d in data["devices"]):
            raise ConfigError("NetworkScenario", "devices", data["devices"], "a list of device objects")
        devices = []
        for d in data["devices"]:
            unknown = sorted(set(d) - {"name", "kind", "flops", "memory", "reliable", "region"})
            if unknown:
                raise ConfigError("Device", unknown[0], d[unknown[0]],
                                  "keys name, kind, flops, memory, reliable, region")
            if "name" not in d:
                raise ConfigError("Device", "name", None, "present: every device needs a unique name")
            devices.append(Device(**d))
        for key in ("name", "notes"):
            if not isinstance(data.get(key, ""), str):
                raise ConfigError("NetworkScenario", key, data[key], "a string")
        if not isinstance(data.get("extra", {}), dict):
            raise ConfigError("NetworkScenario", "extra", data["extra"], "an object (generator arguments)")
        return cls(name=data["name"], devices=tuple(devices), delay=data["delay"],
                   bandwidth=data["bandwidth"], notes=data.get("notes", ""), extra=dict(data.get("extra", {})))

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict()))

    @classmethod
    def load(cls, path: str | Path) -> NetworkScenario:
        """Read a scenario JSON file written by `save` (or by hand); a bad file raises one ConfigError."""
        return cls.from_dict(read_json(path, "NetworkScenario", "a network scenario JSON file"))


def finite_number(value: object) -> bool:
    """A finite int or float (not a bool), whatever its size (a huge int is not finite as a float)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _matrix(key: str, value: Any, n: int) -> np.ndarray:
    """Validate one (n, n) matrix: numeric, square, matching the device count, finite, >= 0."""
    try:
        m = np.array(value, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        raise ConfigError("NetworkScenario", key, "ragged or non-numeric", f"an {n}x{n} matrix of numbers") from None
    if m.ndim != 2 or m.shape[0] != m.shape[1]:
        raise ConfigError("NetworkScenario", key, f"shape {m.shape}", f"a square {n}x{n} matrix")
    if m.shape[0] != n:
        raise ConfigError("NetworkScenario", key, f"shape {m.shape}", f"{n}x{n}, one row and column per device")
    bad = np.argwhere(~np.isfinite(m) | (m < 0))
    if len(bad):
        i, j = (int(v) for v in bad[0])
        raise ConfigError("NetworkScenario", f"{key}[{i}][{j}]", float(m[i, j]),
                          "a finite number >= 0 (no NaN, no inf)")
    m.setflags(write=False)
    return m
