"""Peer discovery and load publication over a hivemind DHT.

Every peer stores one record under its stage's key — subkey its actor's key (unique to this
instance of the peer), value its name, its actor's worker address and key, its throughput EMA,
queue length and accumulated samples — with an expiration,
and refreshes it every `ANNOUNCE_PERIOD` seconds. Trainers read the stage keys to find peers; the
coordinator reads them to see queue lengths (Algorithm 2) and peers that stopped announcing. A
peer that leaves on purpose is overwritten by a newer tombstone, so it vanishes at once instead
of after its expiration. Trainers store a heartbeat the same way, under the run's trainers key:
the coordinator reads it to find a trainer that hangs (SIGSTOP keeps its sockets open).

The node runs `hivemind.DHTNode` on an event-loop thread of this process: `hivemind.DHT` would
start a child process, which Dask's daemonic worker processes may not do. A worker's node listens
on, and announces, the host of that worker's own Dask address: the others already reach the worker
there, so on several machines each node is found at its machine's address (a node on 0.0.0.0
would announce every interface, loopback included, and one host string cannot be every machine's
own address). Outside a worker, and on an embedded loopback cluster, that is 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import importlib
import ipaddress
import logging
import socket
import threading
from typing import Any

from distributed import Worker, get_worker
from distributed.comm import get_address_host
from hivemind.utils.timed_storage import get_dht_time
from hivemind.dht.node import DHTNode
from hivemind.p2p import PeerID

ANNOUNCE_PERIOD = 1.0  # seconds between a peer's refreshes
ANNOUNCE_TTL = 8.0  # a record expires this long after its refresh: a silent peer is gone by then
_TIMEOUT = 30.0  # seconds a DHT operation may take before it is an error
DRIVER_CHECK = 3.0  # seconds between a worker node's pings of the run's driver's node
DRIVER_MISSES = 3  # pings unanswered in a row before a worker node takes the driver for dead
LOOPBACK = "127.0.0.1"


def own_host(worker: str | None = None) -> str:
    """The address this process's node listens on and announces: the host of its Dask worker's
    address (tcp://10.0.0.5:40123 -> 10.0.0.5), loopback outside a worker or in-process.
    worker: that address, where `get_worker()` cannot tell it (outside a task: in `Client.run`,
    in a thread a task started)."""
    try:
        address = worker or get_worker().address
    except ValueError:  # not in a worker
        return LOOPBACK
    return LOOPBACK if address.startswith("inproc://") else get_address_host(address)


def host_toward(address: str) -> str:
    """This process's address on the interface that reaches `address` (a scheduler's
    tcp://host:port): what a node outside any worker (the driver's) listens on so that workers on
    other machines reach it; loopback when `address` is on this machine's loopback."""
    host = get_address_host(address)
    if _ip(host).is_loopback:
        return LOOPBACK
    with socket.socket(socket.AF_INET6 if _ip(host).version == 6 else socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((host, 9))  # no packet is sent: this only picks the route
        return probe.getsockname()[0]


def _ip(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """`host` as an IP address (a host name is resolved)."""
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return ipaddress.ip_address(socket.gethostbyname(host))


class _DetachedChildren(asyncio.SelectorEventLoop):
    """An event loop whose child processes start in a session of their own: the libp2p daemon a
    DHT node starts must not get a terminal's Ctrl-C meant for the run (the daemon would die
    under a run that is stopping cleanly; it calls signal.Notify, so a blocked mask is no help)."""

    async def subprocess_exec(self, protocol_factory: Any, *args: Any, **kwargs: Any) -> Any:
        return await super().subprocess_exec(protocol_factory, *args, start_new_session=True, **kwargs)


class DhtNode:
    """One hivemind DHT node, listening on (and announcing) the address `host`, loopback by default.

    On loopback the libp2p daemon's NAT port mapping and AutoNAT are off: they bind UDP sockets
    on every interface (UPnP / NAT-PMP discovery), which a loopback run must not expose."""

    def __init__(self, initial_peers: list[str], host: str = LOOPBACK) -> None:
        self.closed = threading.Event()  # set when `shutdown` begins
        self._loop = _DetachedChildren()
        self._thread = threading.Thread(target=self._loop.run_forever, name="labkit-dht", daemon=True)
        self._thread.start()
        ip = _ip(host)
        nat = {"nat_port_map": False, "auto_nat": False} if ip.is_loopback else {}
        try:
            self._node: DHTNode = self._run(DHTNode.create(initial_peers=initial_peers, host_maddrs=[f"/ip{ip.version}/{ip}/tcp/0"],
                                                           cache_locally=False, cache_on_store=False, **nat))
        except Exception as e:   # the daemon's first output line varies: name what was asked for
            self._stop_loop()
            raise RuntimeError(f"the DHT node on {host} could not start and join through {initial_peers}: {e}") from e

    def _run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(_TIMEOUT)

    def maddrs(self) -> list[str]:
        """Addresses other nodes join through."""
        return [str(a) for a in self._run(self._node.get_visible_maddrs())]

    def store(self, key: str, subkey: str, value: Any, ttl: float) -> bool:
        return self._run(self._node.store(key, value, get_dht_time() + ttl, subkey=subkey))

    def get_many(self, keys: list[str]) -> dict[str, dict[str, Any]]:
        """For each key, its live subkeys' latest values (a dict value with its expiry, "expires",
        in DHT time)."""
        found = self._run(self._node.get_many(keys, sufficient_expiration_time=float("inf")))
        out: dict[str, dict[str, Any]] = {}
        for key in keys:
            entry = found.get(key)
            records = entry.value if entry is not None and isinstance(entry.value, dict) else {}
            out[key] = {sub: {**v.value, "expires": v.expiration_time} if isinstance(v.value, dict) else v.value
                        for sub, v in records.items()}
        return out

    def answers(self, maddr: str) -> bool:
        """Whether the node at `maddr` (one of its `maddrs()`) answers a ping."""
        peer = PeerID.from_base58(maddr.rsplit("/p2p/", 1)[1])
        return self._run(self._node.protocol.call_ping(peer)) is not None

    def shutdown(self) -> None:
        """Stop the node and its loop, cancelling the node's background tasks first (left
        pending, each would log "Task was destroyed but it is pending" when collected)."""
        self.closed.set()
        try:
            self._run(self._node.shutdown())
            self._run(_cancel_other_tasks())
        finally:
            self._stop_loop()

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)


async def _cancel_other_tasks() -> None:
    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


class StageDirectory:
    """The keys of one run: announce, withdraw and discover peers (a key per stage); trainers'
    heartbeats (one key)."""

    def __init__(self, node: DhtNode, run_id: str, stages: int) -> None:
        self.node, self.run_id, self.stages = node, run_id, stages

    def _key(self, stage: int) -> str:
        return f"labkit/{self.run_id}/stage{stage}"

    def _trainers_key(self) -> str:
        return f"labkit/{self.run_id}/trainers"

    def announce(self, name: str, stage: int, key: str, info: dict[str, Any]) -> bool:
        """Publish (or refresh) peer `name`, served by actor `key`, as live on `stage` for
        `ANNOUNCE_TTL` seconds."""
        return self.node.store(self._key(stage), key, {"name": name, "stage": stage, "key": key, **info}, ANNOUNCE_TTL)

    def withdraw(self, stage: int, key: str) -> bool:
        """Replace actor `key`'s record with a tombstone that outlives it (a peer rebuilt under
        the same name has a new actor key, so the tombstone does not hide it)."""
        return self.node.store(self._key(stage), key, {"gone": True}, ANNOUNCE_TTL * 2)

    def beat(self, life: str) -> bool:
        """Trainer life `life` ("t0#2") is alive for `ANNOUNCE_TTL` seconds more: a trainer's
        heartbeat, as a peer's record is its own (a hung trainer's lapses)."""
        return self.node.store(self._trainers_key(), life, {"life": life}, ANNOUNCE_TTL)

    def heartbeats(self) -> dict[str, float]:
        """Each trainer life whose heartbeat is live: seconds since its last one."""
        records, now = self.node.get_many([self._trainers_key()])[self._trainers_key()], get_dht_time()
        return {info["life"]: _age(info, now) for info in records.values() if isinstance(info, dict) and "life" in info}

    def discover(self) -> dict[str, dict[str, Any]]:
        """Live peers of every stage: name -> their latest record, with its "age": seconds since
        the peer last refreshed it (its heartbeat)."""
        found = self.node.get_many([self._key(s) for s in range(self.stages)])
        now = get_dht_time()
        return {info["name"]: info | {"age": _age(info, now)}
                for records in found.values() for info in records.values() if not info.get("gone")}


def _age(record: dict[str, Any], now: float) -> float:
    """Seconds since `record` was last stored (refreshed): its expiry less its lifetime."""
    return max(0.0, now - (record["expires"] - ANNOUNCE_TTL))


_NODES: dict[str, DhtNode] = {}
_NODES_LOCK = threading.Lock()


def node_for(run_id: str, initial_peers: list[str], worker: str | None = None) -> DhtNode:
    """This process's DHT node for run `run_id`, started on first use on `own_host(worker)`
    (peers, trainers and the coordinator that share a worker process share its node). On a
    worker it lives until the run releases it, or until the run's driver (the node at
    `initial_peers`) has not answered `DRIVER_MISSES` pings in a row: a driver that died releases
    no node, and every worker would keep its node, and its libp2p daemon, for as long as it lives."""
    with _NODES_LOCK:
        if run_id not in _NODES:
            _NODES[run_id] = node = DhtNode(initial_peers, own_host(worker))
            if initial_peers:
                threading.Thread(target=_release_when_driver_gone, args=(run_id, node, initial_peers[0]),
                                 name="labkit-dht-driver", daemon=True).start()
        return _NODES[run_id]


def _release_when_driver_gone(run_id: str, node: DhtNode, driver: str) -> None:
    """Ping the driver's node every `DRIVER_CHECK` s until `node` is shut down; release it after
    `DRIVER_MISSES` pings in a row went unanswered."""
    misses = 0
    while not node.closed.wait(DRIVER_CHECK):
        try:
            misses = 0 if node.answers(driver) else misses + 1
        except Exception:  # the node shut down meanwhile, or the ping failed outright
            misses += 1
        if misses >= DRIVER_MISSES:
            release(run_id)
            return


class _CallerReportsJoin(logging.Filter):
    """Drops the worker's "Run Failed" log (and traceback) of a failed `join`: `Client.run` hands
    the same error to its caller, the fleet, which reports it as a `worker_unused` event (a
    restarted worker joining while the run shuts down printed 30 lines into the notebook)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (str(record.msg).startswith("Run Failed") and record.args and record.args[0] == join.__name__)


def join(run_id: str, initial_peers: list[str], warm: tuple[str, ...] = (), dask_worker: Worker | None = None) -> None:
    """Import the modules `warm` (the run's actors: a worker's first torch import takes seconds,
    better spent before the first actor starts), then start this process's node of run `run_id`
    (`Client.run` calls this on every worker and passes it as `dask_worker`)."""
    worker_log = logging.getLogger("distributed.worker")
    if not any(isinstance(f, _CallerReportsJoin) for f in worker_log.filters):
        worker_log.addFilter(_CallerReportsJoin())
    for module in warm:
        importlib.import_module(module)
    node_for(run_id, initial_peers, None if dask_worker is None else dask_worker.address)


def release(run_id: str) -> None:
    """Shut down this process's node of run `run_id`, if it has one."""
    with _NODES_LOCK:
        node = _NODES.pop(run_id, None)
    if node is not None:
        node.shutdown()
