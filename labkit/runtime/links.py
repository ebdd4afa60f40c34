"""Emulated internet links between a trainer and the peers it calls, and between the peers of a
stage (their ring), on either backend.

`RunConfig.links` names a `labkit simulate` scenario file; its regions and links are the network
(labkit/sim/links.py reads it for the simulator too). Trainers sit in the scenario's
`trainer_region`; peer `s{s}p{k}` in the region of the k-th initial peer of stage s (groups in
file order), and peers added mid-run where the simulator's joiners sit. Each (trainer, peer) pair
is one link with a token bucket per direction: a request leaves after half the round trip plus
its bytes through the up bucket, and its reply arrives half a round trip plus its bytes through
the down bucket after the peer answers. The trainer's hop events carry those seconds
(`link_seconds`). Links are not shared between trainers, as in the simulator. A peer's link to
its ring neighbour is the scenario's link between their two regions.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import torch

from labkit.config import ConfigError, RunConfig
from labkit.runtime.ports import PeerHandle
from labkit.runtime.request_queue import timing
from labkit.sim.links import TokenBucket, region_link, stage_regions
from labkit.sim.presets import WORLD_PRESETS
from labkit.sim.scenario import SimScenario
from labkit.sim.seats import peer_region
from labkit.wire import Encoded
from labkit.runtime.background import settle


def payload_bytes(value: Any) -> int:
    """Bytes of tensor data `value` puts on the wire: a codec's exact payload, a raw tensor's data
    (token ids), summed however nested (a request's arguments, a reply's parts, a state dict, a
    dataclass's fields); 0 for anything else."""
    if isinstance(value, Encoded):
        return value.nbytes
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, dict):
        value = list(value.values())
    elif hasattr(value, "__dataclass_fields__"):
        value = [getattr(value, name) for name in value.__dataclass_fields__]
    return sum(map(payload_bytes, value)) if isinstance(value, (list, tuple)) else 0


def read_scenario(field: str, path: str) -> SimScenario:
    """The scenario a `links` or `world` value names: a world preset's name (WORLD_PRESETS) or a
    scenario file's path; one ConfigError naming `field` and what is wrong otherwise."""
    if path in WORLD_PRESETS:
        return WORLD_PRESETS[path]()
    try:
        return SimScenario.load(path)
    except FileNotFoundError:
        raise ConfigError("RunConfig", field, path, f"the path of an existing scenario file or a preset world, "
                          f"one of {list(WORLD_PRESETS)}") from None
    except ConfigError as exc:
        raise ConfigError("RunConfig", field, path, f"a valid scenario file ({exc})") from None


def load_links(cfg: RunConfig) -> SimScenario | None:
    """The scenario `cfg.links` or `cfg.world` names, checked against the run's shape (None
    without one); a missing, malformed or mismatched file raises one ConfigError naming the field
    and what is wrong."""
    name, path = ("world", cfg.world) if cfg.world is not None else ("links", cfg.links)
    if path is None:
        return None
    s = read_scenario(name, path)
    counts = tuple(len(r) for r in stage_regions(s))
    if s.stages != cfg.stages or counts != cfg.peers_per_stage:
        raise ConfigError("RunConfig", name, path,
                          f"a scenario with the run's {cfg.stages} stages of {list(cfg.peers_per_stage)} peers "
                          f"(it places {s.stages} stages of {list(counts)} peers)")
    return s


class _Timers:
    """One thread that runs callbacks at given `time.monotonic()` instants (no thread per delay)."""

    def __init__(self) -> None:
        self._due: list[tuple[float, int, Callable[[], None]]] = []
        self._order = itertools.count()
        self._wake = threading.Condition()
        threading.Thread(target=self._loop, name="labkit-links", daemon=True).start()

    def at(self, when: float, fn: Callable[[], None]) -> None:
        with self._wake:
            heapq.heappush(self._due, (when, next(self._order), fn))
            self._wake.notify()

    def _loop(self) -> None:
        while True:
            with self._wake:
                while not self._due or self._due[0][0] > time.monotonic():
                    self._wake.wait(None if not self._due else self._due[0][0] - time.monotonic())
                _, _, fn = heapq.heappop(self._due)
            fn()


_TIMERS: _Timers | None = None
_TIMERS_LOCK = threading.Lock()


def _timers() -> _Timers:
    global _TIMERS
    with _TIMERS_LOCK:
        if _TIMERS is None:
            _TIMERS = _Timers()
        return _TIMERS


class LinkedFuture(Future):
    """A request's future over an emulated link; `link_seconds` is what the link added to it
    (latency and queueing in the token buckets, both ways) and `timing` the peer's own (queue,
    compute), final once the future is done."""

    link_seconds = 0.0


class Link:
    """One trainer-peer link: `rtt` seconds round trip, `rate` bytes/s each way, one bucket per
    direction; each payload counts `scale` times its bytes (a world's model's, for its stand-in's)."""

    def __init__(self, rtt: float, rate: float, scale: float = 1.0) -> None:
        self.latency, self.scale = rtt / 2, scale
        self.up, self.down = TokenBucket(rate=rate), TokenBucket(rate=rate)
        self._lock = threading.Lock()

    def _delay(self, bucket: TokenBucket, nbytes: int) -> float:
        with self._lock:
            return self.latency + bucket.send(nbytes * self.scale, time.monotonic())

    def send(self, value: Any, deliver: Callable[[], None], back: bool = False) -> float:
        """Carry one message holding `value` one way (up, or down with `back`) and call `deliver`
        once it arrived: half the round trip plus its bytes through that direction's bucket. The
        seconds it takes."""
        seconds = self._delay(self.down if back else self.up, payload_bytes(value))
        _timers().at(time.monotonic() + seconds, deliver)
        return seconds

    def call(self, peer: PeerHandle, method: str, *args: Any) -> LinkedFuture:
        """Send `method(*args)` to `peer` once it has crossed the link; the reply crosses back."""
        out = LinkedFuture()
        up = self._delay(self.up, payload_bytes(args))
        out.link_seconds = up

        def reply(answer: Future) -> None:
            exc = answer.exception()
            result = None if exc is not None else answer.result()
            down = self._delay(self.down, 0 if exc is not None else payload_bytes(result))
            out.link_seconds, out.timing = up + down, timing(answer)  # the peer's own seconds, as without a link
            _timers().at(time.monotonic() + down, lambda: settle(out, result=result, exc=exc))

        def send() -> None:
            if not out.cancelled():  # the trainer gave up on it meanwhile
                peer.call(method, *args).add_done_callback(reply)

        _timers().at(time.monotonic() + up, send)
        return out


class Links:
    """The links from `origin` (a region of `scenario`) to every peer, as `scenario` places them:
    a trainer's (from the scenario's trainer region) or a peer's to its stage's other peers."""

    def __init__(self, scenario: SimScenario, origin: str, scale: float = 1.0) -> None:
        self.scenario, self.origin, self.scale = scenario, origin, scale
        self._links: dict[str, Link] = {}
        self._lock = threading.Lock()  # a trainer's lanes share its links

    def link(self, peer: str) -> Link:
        """The link to `peer` (made on first use)."""
        with self._lock:
            if peer not in self._links:
                self._links[peer] = Link(*region_link(self.scenario, self.origin, peer_region(self.scenario, peer)), self.scale)
            return self._links[peer]


class LinkedHandle:
    """A peer reached over an emulated link (what a stage's ring sends its chunks through)."""

    def __init__(self, link: Link, handle: Any) -> None:
        self._link, self._handle = link, handle

    def call(self, method: str, *args: Any) -> Future:
        return self._link.call(self._handle, method, *args)
