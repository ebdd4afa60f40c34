"""What an executor tells the rest of labkit about itself: one `ExecutorSpec` per executor.

An executor (SWARM's stages, ATOM's swapping replicas, the task pool, a synchronous pipeline, ...)
lives in one folder under `labkit/executors/` and exports one spec, registered in
`labkit/executors/registry.py`. The CLI, the lab and the backends ask the spec (its verbs refused,
its charts, its form fields, how to start it on a backend) and never compare executor names.
A spec is data plus a few pure functions of a run's config: importing one pulls in no torch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol



def world_on_dask(run: Any, backend: str) -> str | None:
    """Why a world cannot run on Dask for an executor that emulates its world's devices and links in
    the run's process (ATOM's, the task pool's); None when it is not one."""
    if backend == "dask" and run.world is not None:
        return (f"world={run.world!r} is not allowed with executor={run.spec.name!r} and backend='dask': None "
                f"(its world's virtual devices and links run in-process: backend='inprocess')")
    return None


@dataclass(frozen=True)
class FormField:
    """One field of an executor's config as the lab's form shows it: `kind` says how its text
    parses ("int", "float", "optional_float": blank is None, "ints": one integer or a comma list,
    "choice": one of `choices`)."""

    name: str
    kind: str
    choices: tuple[Any, ...] = ()


class ExecutorConfig(Protocol):
    """An executor's own config (a frozen dataclass); `name` is its tag in `RunConfig.executor`."""

    name: ClassVar[str]

    def check_run(self, run: Any) -> None:
        """Raise `ConfigError` for a run-wide field this executor's design leaves no room for."""


@dataclass(frozen=True, kw_only=True)
class ExecutorSpec:
    """One executor, as the CLI, the lab and the backends see it."""

    name: str  # the tag: `RunConfig(executor=name)` and `labkit train --executor name`
    title: str  # what it is, in one line (the CLI's help, the panel's status line)
    config: type  # its config class (an `ExecutorConfig`), the `RunConfig.executor` it reads
    launch: Mapping[str, str]  # backend -> "module:function" starting a run of it there (see runtime/launch.py)
    refused: Mapping[str, str] = field(default_factory=dict)  # steering verb -> why it means nothing here
    charts: tuple[str, ...] = ()  # the lab charts a run of it draws, by name (labkit/lab/charts.py draws them)
    form: tuple[FormField, ...] = ()  # its config's fields, in the order the lab's form lists them
    run_fields: tuple[str, ...] = ()  # the RunConfig fields it reads, as the lab's form names them ("stages", "sync.mode")
    staged: bool = True  # whether its workers serve stages (else each holds the whole model: no stage verbs)
    worker_word: str = "peers"  # what its workers are called in messages ("clients", "replicas")
    notice: str = ""  # what the lab's status line says first about a run of it (the verbs it greys out)
    server_roles: tuple[str, ...] = ()  # plan roles its config counts per stage (its fields); a plan's clients are its peers
    whatif: bool = False  # whether the lab's what-if (scaling up the measured peers in the simulator) applies
    shape: Callable[[Any], str] = lambda run: ""  # a run's shape in a phrase ("2 stages x [2, 2] peers")
    workers: Callable[[Any], int] = lambda run: 0  # Dask workers its actors need (an embedded cluster starts these)
    held: Callable[[Any], list[tuple[int, int]]] = lambda run: []  # (parameters, copies) per stage held in memory
    in_flight: Callable[[Any], int] = lambda run: 1  # microbatches whose activations are held at once
    backend_refusal: Callable[[Any, str], str | None] = lambda run, backend: None  # why a backend cannot run it
    record: Callable[[Any], Any] = lambda run: run  # the run config its checkpoints and evaluations are shaped by
    from_world: Callable[[Any], Any] = lambda run: run  # a world's run (`world_config`) made this executor's

    def refusal(self, verb: str) -> str | None:
        """Why `verb` is not available with this executor, as one sentence; None when it is."""
        why = self.refused.get(verb)
        return None if why is None else f"{verb} is not available with executor={self.name!r}: {why}"
