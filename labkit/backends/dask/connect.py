"""Reaching a cluster: an embedded `LocalCluster`, or a scheduler at an address, within a bound.

A scheduler address may hold something else (an HTTP server, a socket that never answers):
Dask's client then hangs in its handshake or fails with an unrelated error. A tcp:// address is
first probed (a scheduler sends its handshake as soon as a connection opens), connecting runs with
a hard deadline, and a failure says what answered at the address.
"""

from __future__ import annotations

import logging
import multiprocessing
import socket
from functools import partial
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from urllib.parse import urlparse

import dask
from distributed import Client, LocalCluster
from distributed.utils import get_mp_context

from labkit.config import RunConfig
from labkit.runtime.background import in_background

CONNECT_TIMEOUT = 10  # seconds to reach a given scheduler
HANDSHAKE_FIRST_S = 3.0  # seconds a tcp:// scheduler has to send its handshake to a bare connection
SPARE_WORKERS = 1  # an embedded cluster's workers beyond what the executor's spec asks for: room for add_peer
DETACH = "labkit.backends.dask.detach"  # workers in process groups of their own: a Ctrl-C is the driver's
_HINT = "give the address `dask scheduler` prints, like tcp://10.0.0.5:8786"
# What a worker imports for its first run, imported once in the server its workers fork from (torch's
# optimizers pull in torch._dynamo and sympy at their first step; the DHT, hivemind and its codecs)
WARM_IMPORTS = ("distributed", "torch", "torch._dynamo", "torch.distributed.nn", "sympy", "hivemind",
                "labkit.backends.dask.peer_actor", "labkit.backends.dask.trainer_actor", "labkit.backends.dask.dht")
# An embedded cluster's workers hold the run's peers and trainers, one torch thread each, on few cores:
# torch puts tensors of 2 MB and more on transparent huge pages (a stage's 103 MB of logits on the
# 50,304-word head fault in 2,000 pages a microbatch instead of 100,000), and Dask's own sampling
# profiler and 20 ms loop ticks stay off the cores the peers compute on (docs/benchmarks.md).
WORKER_ENV = {"THP_MEM_ALLOC_ENABLE": "1"}  # read by torch at its first allocation: set before the worker starts
WORKER_CONFIG = {"distributed": {"worker": {"profile": {"enabled": False}},
                                  "admin": {"tick": {"interval": "500ms"}, "system-monitor": {"interval": "2s"}}}}
# A LocalCluster closes a worker's nanny for good when, `lost-worker-timeout` (15 s) after one of
# that worker's removals, no worker of its name is registered: a worker killed twice 15 s apart
# has its second restart closed at that instant, and the cluster stays a worker short (CI, test
# `test_one_stages_peers_killed_in_succession_without_waiting`: "Only 7/8 workers arrived").
# Read in the driver at each removal, so it is set in the driver's config while clusters live.
NANNIES_KEEP_RESTARTING = {"distributed.deploy.lost-worker-timeout": "3650 days"}


def connect(scheduler: str | None, cfg: RunConfig, host: str = "127.0.0.1") -> tuple[Client, LocalCluster | None]:
    """A client of the cluster at `scheduler`, or of a new embedded `LocalCluster` of worker
    processes: as many as the executor's spec says its actors need (`ExecutorSpec.workers`) and
    `SPARE_WORKERS` more, each in a process group of its own (`DETACH`), so that a Ctrl-C stops the
    run instead of its workers, with `WORKER_ENV` and `WORKER_CONFIG`."""
    if scheduler is None:
        workers = SPARE_WORKERS + cfg.spec.workers(cfg)
        worker_config = dask.config.merge(dask.config.config, WORKER_CONFIG)  # a nanny passes on a whole config
        cluster = restarting_cluster(workers, host, dashboard_address=f"{host}:0", preload=[DETACH], env=WORKER_ENV,
                                     config=worker_config,
                                     silence_logs=logging.CRITICAL)  # its shutdown chatter; faults are the run's events
        return Client(cluster), cluster
    if _not_a_scheduler(scheduler):  # in seconds, where Dask's client would retry past CONNECT_TIMEOUT
        raise ConnectionError(f"scheduler={scheduler!r} cannot be reached as a Dask scheduler "
                              f"({what_answers(scheduler)}); {_HINT}")
    # a daemon thread: a handshake that never ends must not keep the process alive at exit
    attempt = in_background(partial(Client, scheduler, timeout=CONNECT_TIMEOUT), name="labkit-connect")
    try:
        return attempt.result(CONNECT_TIMEOUT + 5), None
    except FutureTimeout:
        attempt.add_done_callback(_close_late_client)
        raise ConnectionError(f"scheduler={scheduler!r} did not answer as a Dask scheduler within "
                              f"{CONNECT_TIMEOUT + 5} s ({what_answers(scheduler)}); {_HINT}") from None
    except Exception as exc:  # OSError, or garbage read as a Dask frame (MemoryError, ValueError...)
        raise ConnectionError(f"scheduler={scheduler!r} cannot be reached as a Dask scheduler "
                              f"({what_answers(scheduler)}: {type(exc).__name__}: {str(exc)[:120]}); {_HINT}") from None


def restarting_cluster(workers: int, host: str = "127.0.0.1", warm: bool = True, **options: object) -> LocalCluster:
    """A `LocalCluster` of `workers` one-thread worker processes whose nannies restart a killed
    worker however often it dies (`NANNIES_KEEP_RESTARTING`), each forked from a warm server
    (`fork_from_a_warm_server`; `warm=False` spawns them, the baseline of
    benchmarks/cluster_start.py); `options` go to `LocalCluster`."""
    dask.config.set(NANNIES_KEEP_RESTARTING)
    if warm:
        fork_from_a_warm_server()
    return LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, host=host, **options)


def fork_from_a_warm_server() -> None:
    """Have this process's nannies fork their workers from multiprocessing's forkserver, which
    imports torch and labkit's actors once (`WARM_IMPORTS`), instead of spawning each worker to
    import them again: on 2 cores, 8 workers spent about 7 s of a cluster's first run on imports,
    and a worker restarted after a kill spent them again. The server ignores a terminal's Ctrl-C;
    where this platform has no forkserver, workers are spawned as before."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return
    dask.config.set({"distributed.worker.multiprocessing-method": "forkserver"})
    get_mp_context()  # distributed's own preload, set once; ours replaces it until the server starts
    multiprocessing.get_context("forkserver").set_forkserver_preload(list(WARM_IMPORTS))


def _close_late_client(attempt: Future) -> None:
    """A client that connected after we gave up on it is closed, not leaked."""
    if attempt.exception() is None:
        attempt.result().close()


def _endpoint(address: str) -> tuple[str, int] | None:
    """(host, port) of a host:port address (any scheme), else None."""
    parsed = urlparse(address if "://" in address else f"tcp://{address}")
    try:
        port = parsed.port
    except ValueError:  # out of range
        return None
    return None if parsed.hostname is None or port is None else (parsed.hostname, port)


def _not_a_scheduler(address: str, timeout: float = HANDSHAKE_FIRST_S) -> bool:
    """Whether the tcp:// `address` surely holds no Dask scheduler: nothing listens there, or what
    accepts sends no handshake within `timeout` s (a scheduler writes its own at once, before it
    reads; a bare connect and close makes it log nothing). Any other answer is left to the client."""
    endpoint = _endpoint(address)
    if endpoint is None or ("://" in address and not address.startswith("tcp://")):  # tls:// waits for a hello
        return False
    try:
        with socket.create_connection(endpoint, timeout=timeout) as probe:
            return not probe.recv(1)
    except (ConnectionRefusedError, TimeoutError):
        return True
    except (OSError, ValueError):  # unreachable, unresolvable: the client's own attempt says how
        return False


def what_answers(address: str, timeout: float = 2.0) -> str:
    """What listens at `address` (tcp://host:port), in words: nothing, an HTTP server, or a
    socket that accepts and stays silent or answers something else."""
    endpoint = _endpoint(address)
    if endpoint is None:
        return "not a tcp://host:port address"
    host, port = endpoint
    try:
        with socket.create_connection(endpoint, timeout=timeout) as probe:
            probe.sendall(b"HEAD / HTTP/1.0\r\n\r\n")
            reply = probe.recv(64)
    except ConnectionRefusedError:
        return f"nothing listens on {host}:{port}"
    except TimeoutError:
        return "something accepted the connection but never answered"
    except OSError as exc:
        return f"{type(exc).__name__}: {exc}"
    if reply.startswith(b"HTTP/"):
        status = reply.splitlines()[0].decode("latin-1")
        return f"an HTTP server answered: {status!r}"
    return f"a non-Dask service answered {reply[:16]!r}" if reply else "something accepted and closed the connection"
