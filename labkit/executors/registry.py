"""The one registry of executors: adding an executor is its folder and one line here."""

from __future__ import annotations

from labkit.executors import atom, pipeline, swarm, taskpool
from labkit.executors.spec import ExecutorSpec

SPECS: dict[str, ExecutorSpec] = {s.name: s for s in (swarm.SPEC, atom.SPEC, taskpool.SPEC, pipeline.SPEC)}
NAMES = tuple(SPECS)
DEFAULT = "swarm"


def spec_of(name: str) -> ExecutorSpec:
    """The spec of executor `name`; one ValueError naming the executors there are otherwise."""
    if name not in SPECS:
        raise ValueError(f"executor={name!r} is not allowed: one of {list(SPECS)}")
    return SPECS[name]
