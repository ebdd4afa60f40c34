"""The Plan both planners return: plain data (names, ints, floats) a runtime or simulator can read.

Stages are listed in pipeline order. `links[k]` says how stage k's outputs reach stage k+1: a list
of (sender, receiver, share) with shares summing to 1 over the link. DT-FM's links are its
bottleneck matching (one macro-batch per pair, share 1/D_DP); the clustering planner's links are
the task pool paper's even split from backward servers to the next stage's frontal servers.

>>> p = Plan(method="demo", scenario="toy", stages=(PlanStage(devices=("a",), layers=2),
...     PlanStage(devices=("b",), layers=2)), links=((("a", "b", 1.0),),), time=1.0,
...     parts={"dp": 0.0, "pp": 1.0, "compute": 0.5})
>>> Plan.from_json(p.to_json()) == p
True
"""

from __future__ import annotations

import json
import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from labkit.config import ConfigError, RunConfig
from labkit.jsonfile import read_json

ROLES = ("replica", "frontal", "backward", "client")
PARTS = ("dp", "pp", "compute")
KEYS = ("method", "scenario", "time", "parts", "stages", "links")  # what plan.json must hold ("meta" is optional)


def _real(value: object) -> bool:
    """Whether `value` is a real number (bool excluded; NaN and inf are checked where they matter)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _names(value: object) -> bool:
    """Whether `value` is a list or tuple of non-empty strings."""
    return isinstance(value, (list, tuple)) and all(isinstance(v, str) and v for v in value)


def _triple(value: object) -> bool:
    """Whether `value` is one (sender, receiver, share) link entry."""
    return isinstance(value, (list, tuple)) and len(value) == 3 and _names(value[:2]) and _real(value[2])


@dataclass(frozen=True, kw_only=True, slots=True)
class PlanStage:
    """One pipeline stage: its devices, each device's role, and how many blocks it runs."""

    devices: tuple[str, ...]  # device names serving this stage
    layers: int  # transformer blocks of this stage
    roles: tuple[str, ...] = ()  # one of ROLES per device; () = every device a "replica"

    def __post_init__(self) -> None:
        if not _names(self.devices):
            raise ConfigError("PlanStage", "devices", self.devices, "a list of device names (non-empty strings)")
        if not isinstance(self.roles, (list, tuple)):
            raise ConfigError("PlanStage", "roles", self.roles, f"a list holding one of {list(ROLES)} per device")
        object.__setattr__(self, "devices", tuple(self.devices))
        roles = tuple(self.roles) or ("replica",) * len(self.devices)
        object.__setattr__(self, "roles", roles)
        if not self.devices:
            raise ConfigError("PlanStage", "devices", self.devices, "at least one device")
        if len(roles) != len(self.devices) or any(not isinstance(r, str) or r not in ROLES for r in roles):
            raise ConfigError("PlanStage", "roles", roles, f"one of {list(ROLES)} per device")
        if not (isinstance(self.layers, int) and not isinstance(self.layers, bool) and self.layers >= 1):
            raise ConfigError("PlanStage", "layers", self.layers, "an integer >= 1")

    def with_role(self, role: str) -> tuple[str, ...]:
        return tuple(d for d, r in zip(self.devices, self.roles) if r == role)


@dataclass(frozen=True, kw_only=True, slots=True)
class Plan:
    """Stage -> devices in pipeline order, links between adjacent stages, layer split, estimated time.

    `time` is the planner's own objective in seconds: DT-FM's COMM-COST (dp + pp, compute overlapped
    as in its Section 3.5), the clustering planner's pipeline time PT (pp + compute). `parts` always
    holds dp, pp and compute seconds; `meta` keeps the knobs that produced the plan.
    """

    method: str  # "dtfm", "kl", "random" or "cluster"
    scenario: str  # scenario name
    stages: tuple[PlanStage, ...]
    links: tuple[tuple[tuple[str, str, float], ...], ...]  # len(stages) - 1 entries
    time: float
    parts: dict[str, float]
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("method", "scenario"):
            if not isinstance(getattr(self, name), str):
                raise ConfigError("Plan", name, getattr(self, name), "a string")
        if not (isinstance(self.stages, (list, tuple)) and all(isinstance(s, PlanStage) for s in self.stages)):
            raise ConfigError("Plan", "stages", self.stages, "a list of PlanStage")
        if not _real(self.time):
            raise ConfigError("Plan", "time", self.time, "a finite number of seconds >= 0")
        if not (isinstance(self.parts, dict) and all(_real(v) for v in self.parts.values())):
            raise ConfigError("Plan", "parts", self.parts, f"an object of seconds with the keys {list(PARTS)}")
        if not (isinstance(self.links, (list, tuple)) and all(
                isinstance(link, (list, tuple)) and all(_triple(t) for t in link) for link in self.links)):
            raise ConfigError("Plan", "links", self.links,
                              "one list per adjacent pair of stages of [sender, receiver, share] entries")
        if not isinstance(self.meta, dict):
            raise ConfigError("Plan", "meta", self.meta, "an object (the knobs that produced the plan)")
        object.__setattr__(self, "stages", tuple(self.stages))
        object.__setattr__(self, "time", float(self.time))
        object.__setattr__(self, "parts", {k: float(v) for k, v in self.parts.items()})
        object.__setattr__(self, "links", tuple(tuple((str(a), str(b), float(s)) for a, b, s in link)
                                                for link in self.links))
        if not self.stages:
            raise ConfigError("Plan", "stages", self.stages, "at least one stage")
        if len(self.links) != len(self.stages) - 1:
            raise ConfigError("Plan", "links", len(self.links), f"{len(self.stages) - 1} (one per adjacent pair)")
        names = [d for s in self.stages for d in s.devices]
        if len(set(names)) != len(names):
            raise ConfigError("Plan", "stages", sorted({n for n in names if names.count(n) > 1}),
                              "each device in at most one stage")
        if sorted(self.parts) != sorted(PARTS):
            raise ConfigError("Plan", "parts", sorted(self.parts), f"exactly the keys {list(PARTS)}")
        if not math.isfinite(self.time) or self.time < 0:
            raise ConfigError("Plan", "time", self.time, "a finite number of seconds >= 0")

    @property
    def layer_split(self) -> tuple[int, ...]:
        return tuple(s.layers for s in self.stages)

    def run_config(self, base: RunConfig, *, max_peers_per_stage: int | None = None) -> RunConfig:
        """A run that follows this plan: its stage count, one peer per planned device (at most
        `max_peers_per_stage`), and its layer split rescaled to `base.model`'s depth. For an executor
        with servers (its spec's `server_roles`, the task pool's) the plan's roles say it: its clients
        are the peers, and each stage has the plan's servers of each role.

        >>> plan.run_config(RunConfig()).layer_split  # doctest: +SKIP
        (2, 2)
        """
        split = rescale_split(self.layer_split, base.model.n_layer)
        servers = base.spec.server_roles
        if not servers:
            return base.replace(stages=len(self.stages), peers=self._capped([s.devices for s in self.stages],
                                                                             max_peers_per_stage), layer_split=split)
        roles = {role: [s.with_role(role) for s in self.stages] for role in (*servers, "client")}
        for role, per_stage in roles.items():
            empty = [k for k, devices in enumerate(per_stage) if not devices]
            if empty:
                raise ConfigError("Plan", "roles", f"no {role} device in stage {empty[0]}",
                                  f"a plan whose every stage has {', '.join(roles)} devices for executor="
                                  f"{base.spec.name!r} (the clustering planner's: labkit plan --method cluster)")
        executor = replace(base.executor, **{role: tuple(map(len, roles[role])) for role in servers})
        return base.replace(stages=len(self.stages), peers=self._capped(roles["client"], max_peers_per_stage),
                            layer_split=split, executor=executor)

    @staticmethod
    def _capped(devices: Sequence[Sequence[str]], cap: int | None) -> tuple[int, ...]:
        return tuple(len(d) if cap is None else min(len(d), cap) for d in devices)

    def describe(self) -> str:
        """A few human-readable lines: time and parts, then one line per stage."""
        parts = ", ".join(f"{k}={self.parts[k]:.3f}s" for k in PARTS)
        lines = [f"{self.method} plan for {self.scenario}: time={self.time:.3f}s ({parts})"]
        for k, s in enumerate(self.stages):
            who = " ".join(d if r == "replica" else f"{d}[{r[0].upper()}]" for d, r in zip(s.devices, s.roles))
            lines.append(f"  stage {k}: {s.layers} layers on {len(s.devices)} devices: {who}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {"method": self.method, "scenario": self.scenario, "time": self.time, "parts": dict(self.parts),
                "stages": [{"devices": list(s.devices), "layers": s.layers, "roles": list(s.roles)}
                           for s in self.stages],
                "links": [[list(t) for t in link] for link in self.links], "meta": self.meta}

    @classmethod
    def from_dict(cls, data: Any) -> Plan:
        """Inverse of `to_dict`; a missing key or a value of the wrong kind raises one ConfigError."""
        if not isinstance(data, dict):
            raise ConfigError("Plan", "json", type(data).__name__, "an object, as `labkit plan` writes to plan.json")
        missing = [k for k in KEYS if k not in data]
        if missing:
            raise ConfigError("Plan", missing[0], None, f"present: a plan holds the keys {list(KEYS)}")
        stages = data["stages"]
        if not (isinstance(stages, list) and all(isinstance(s, dict) and {"devices", "layers"} <= s.keys()
                                                 for s in stages)):
            raise ConfigError("Plan", "stages", stages, 'a list of {"devices": [names], "layers": N, "roles": [...]}')
        return cls(method=data["method"], scenario=data["scenario"], links=data["links"], time=data["time"],
                   stages=tuple(PlanStage(devices=s["devices"], layers=s["layers"], roles=s.get("roles", ()))
                                for s in stages), parts=data["parts"], meta=data.get("meta", {}))

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1)

    @classmethod
    def from_json(cls, text: str) -> Plan:
        """A plan from JSON text; text that is not JSON raises one ConfigError."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            where = f"{err.msg} at line {err.lineno} column {err.colno}"
            raise ConfigError("Plan", "json", text[:40], f"JSON ({where})") from None
        return cls.from_dict(data)

    @classmethod
    def load(cls, path: str | Path) -> Plan:
        """A plan from a plan.json file; every bad file raises one ConfigError (FileNotFoundError if missing)."""
        return cls.from_dict(read_json(path, "Plan", "a plan.json written by `labkit plan`"))


def rescale_split(split: tuple[int, ...], n_layer: int) -> tuple[int, ...]:
    """Blocks per stage in the same proportions for a model of `n_layer` blocks (largest
    remainder, at least one block per stage)."""
    if len(split) > n_layer:
        raise ConfigError("Plan", "stages", len(split), f"at most the model's {n_layer} layers, a block per stage: "
                                                        "a deeper model (--size small has 12) or a plan of fewer "
                                                        f"stages (labkit plan --stages {n_layer})")
    total = sum(split)
    spare = n_layer - len(split)  # blocks left once every stage has one
    shares = [spare * n / total for n in split]
    out = [1 + int(x) for x in shares]
    order = sorted(range(len(split)), key=lambda i: (-(shares[i] - int(shares[i])), i))
    for i in order[: n_layer - sum(out)]:
        out[i] += 1
    return tuple(out)
