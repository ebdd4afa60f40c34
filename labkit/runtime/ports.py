"""The seams of the runtime, named: what each part needs of the others, whatever the backend.

- `PeerHandle`: one peer as seen by its callers — the transport endpoint. `call` sends a request
  and returns a future; the in-process `StagePeer` queues it for its own thread, the Dask
  `RemotePeer` sends it to an actor on another worker, and the unit tests' fake answers at once.
- `PeerFactory`: where a backend starts peers (and trainers), and how it watches them; it is
  bound to the run it serves as a `Coordinated` (the run's config, its `Roster` of live peers,
  and the work source and directory its trainers use), not to the coordinator's class.
- `Directory`: announce / discover peers (the coordinator's registry in-process; the hivemind
  DHT on Dask). Trainers route over what a directory discovers.
- `WorkSource`: what a trainer needs from whatever feeds it work (the coordinator in-process; on
  Dask, a client of the coordinator's `WorkServer` over the data plane).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Protocol

from labkit.config import RunConfig
from labkit.events import Event
from labkit.swarm.ledger import Task


class RunEnded(RuntimeError):
    """A verb that needs the run's live peers was called after the run ended."""


class PeerHandle(Protocol):
    """One replica of one stage, wherever it runs."""

    name: str
    stage: int
    delay: float  # extra seconds per data request (a slowed-down peer)

    @property
    def worker(self) -> str:
        """Where the peer runs ("local", or a Dask worker's address)."""

    @property
    def contact(self) -> Any:
        """How the stage's other peers reach this one (`StagePeer.dial` takes it): the peer itself
        in-process, its data plane's address on Dask."""

    @property
    def queue_length(self) -> int:
        """Requests waiting (what Algorithm 2 balances)."""

    @property
    def samples(self) -> int:
        """Samples whose gradient the peer holds, not yet synced."""

    def call(self, method: str, *args: Any) -> Future:
        """Queue request `method(*args)` on the peer; the future resolves to its result."""

    def set_delay(self, seconds: float) -> None:
        """Slow every later data request down by `seconds`."""

    def kill(self) -> None:
        """Crash: drop everything at once (never blocks)."""

    def close(self) -> None:
        """Stop after the requests already queued (a clean shutdown)."""


class TrainerHandle(Protocol):
    """A trainer loop running somewhere: started once, joined at the end."""

    name: str

    def start(self) -> None: ...

    def join(self, timeout: float | None = None) -> None: ...

    def alive(self) -> bool:
        """Whether the loop still works (a join that timed out left it running)."""


class Directory(Protocol):
    """Who serves which stage, as trainers discover it."""

    def registry(self) -> dict[str, tuple[int, int]]:
        """Live peers: name -> (stage, instance); a new instance of a name is a re-announcement."""

    def peer(self, name: str) -> PeerHandle | None:
        """A handle on the peer `name`, or None if it is not (or no longer) announced."""


class WorkSource(Protocol):
    """What a trainer takes its microbatches from and reports to."""

    def next_task(self, trainer: str) -> tuple[Task, str] | None:
        """The next microbatch attempt for `trainer` and the wire codec in force; None once the run is over."""

    def finish(self, trainer: str, task: Task, credits: dict[int, str], loss: float | None) -> None:
        """Record which peer accumulated each stage of `task` (and its loss, if the last did)."""

    def stage_empty(self, stage: int) -> None:
        """No live peer serves `stage`: pause until one is added."""

    def peer_timed_out(self, name: str, may_have_accumulated: bool) -> None:
        """A request to `name` timed out (evict it if it may hold an uncredited gradient)."""

    def peer_failed(self, name: str, exc: BaseException) -> None:
        """`name` raised on a request: evict it."""

    def fail(self, exc: BaseException) -> None:
        """End the run on a bug."""

    def emit(self, event: Event) -> None:
        """Record an event (a hop)."""

    def clock(self) -> float:
        """Seconds since the run started (the timestamp of events)."""


class Roster(Protocol):
    """The live peers of a run, as a backend watching them sees them."""

    peers: dict[str, PeerHandle]

    def evict(self, name: str, reason: str) -> None:
        """Take a failed peer out of the run (its credits are recomputed)."""


class Coordinated(WorkSource, Directory, Protocol):
    """What a factory starts peers and trainers for: the run's config and peers, and the work
    source and directory its trainers use (the coordinator)."""

    cfg: RunConfig
    members: Roster


class PeerFactory(Protocol):
    """How a backend starts and watches the peers and trainers of one coordinator."""

    clock: Callable[[], float]  # seconds since the run started, on a clock every process shares

    def start_peer(self, name: str, stage: int, state: dict[str, Any] | str | None, *, source: PeerHandle | None,
                   delay: float, running: bool, emulates: str | None = None) -> PeerHandle:
        """A peer of `stage` holding `state` (or the checkpoint shard file it names), or downloading
        it from the live `source`; in a world, in the place of peer `emulates` (a moved peer's old
        name; default its own). Before the
        run starts (`running` False) it serves at once; mid-run it holds its state when this
        returns (called without the coordinator's lock: a start takes seconds) and serves
        trainers once `admit`ted."""

    def admit(self, peer: PeerHandle) -> None:
        """A peer started mid-run is now in the run's membership: let trainers find it."""

    def start_trainers(self, count: int) -> list[TrainerHandle]:
        """`count` trainers (not yet started) taking work from the coordinator."""

    def bind(self, coordinator: Coordinated) -> None:
        """The coordinator this factory starts peers for (called once, before the first peer)."""

    def started(self) -> None:
        """The first peers were asked for: wait until they serve, and start watching them."""

    def suspect(self, name: str) -> None:
        """A trainer's request to peer `name` timed out: evict it now if it hangs (without waiting)."""

    def close(self) -> None:
        """The run is over: release what the backend holds (DHT nodes, ...)."""
