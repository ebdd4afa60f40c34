"""The records the task pool hands around: a unit of work, a handed-out task, a completion.

`Work` is a slice of one microbatch at one stage waiting for a client; `Task` is work a client
holds, with the deadline after which the servers call it unresponsive; `Done` says what a
completion changed. Kinds: "forward"; "backward" (the client that ran the forward still holds the
activations); "recompute" (a leftover backward: fetch the activations from the frontal servers,
run the forward again, then the backward).
"""

from __future__ import annotations

from dataclasses import dataclass

KINDS = ("forward", "backward", "recompute")
FORWARD_RUNS = ("forward", "recompute")  # kinds that run the stage's forward pass


@dataclass(frozen=True)
class Work:
    """Samples [start, end) of `microbatch` that need a pass of `kind` at this stage."""

    kind: str
    microbatch: int
    start: int
    end: int

    @property
    def samples(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class Task:
    """Work held by `client` since `issued`; unresponsive if not done by `deadline`."""

    id: int
    client: str
    work: Work
    issued: float
    deadline: float

    @property
    def kind(self) -> str:
        return self.work.kind

    @property
    def microbatch(self) -> int:
        return self.work.microbatch

    @property
    def start(self) -> int:
        return self.work.start

    @property
    def end(self) -> int:
        return self.work.end


@dataclass(frozen=True)
class Done:
    """What `client_done` changed: the result was credited (False for a task the servers had
    already given up on), and the microbatch's forward or backward at this stage is now complete."""

    credited: bool
    forward_complete: bool = False
    backward_complete: bool = False


@dataclass
class Slice:
    """One node of a backward server's list: `client` produced [start, end); `held` while the
    client still holds what the next step needs (its activations, or its unsent gradients)."""

    client: str
    start: int
    end: int
    held: bool = True
