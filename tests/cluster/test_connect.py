"""A scheduler address that holds something else gives one clear error, within a bound."""

from __future__ import annotations

import copy
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from labkit.backends.dask import connect as connecting
from labkit.cli.main import main
from labkit.config import RunConfig


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A socket that accepts connections and never answers."""
    server = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []
    threading.Thread(target=lambda: accepted.append(server.accept()[0]), daemon=True).start()
    yield server.getsockname()[1]
    for conn in accepted:
        conn.close()
    server.close()


@pytest.fixture
def http_port() -> Iterator[int]:
    """An HTTP server that answers every request with 404."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()


@pytest.fixture
def chatty_port() -> Iterator[int]:
    """A service that speaks first, as SSH does, and then stays silent."""
    server = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []

    def serve() -> None:
        while True:
            try:
                conn = server.accept()[0]
            except OSError:
                return
            accepted.append(conn)
            conn.sendall(b"SSH-2.0-OpenSSH_9.6\r\n")

    threading.Thread(target=serve, daemon=True).start()
    yield server.getsockname()[1]
    for conn in accepted:
        conn.close()
    server.close()


def test_a_silent_socket_is_named_in_seconds(silent_port: int) -> None:
    start = time.monotonic()
    with pytest.raises(ConnectionError, match="cannot be reached as a Dask scheduler .something accepted "
                                              "the connection but never answered"):
        connecting.connect(f"tcp://127.0.0.1:{silent_port}", RunConfig())
    assert time.monotonic() - start < connecting.HANDSHAKE_FIRST_S + 4  # the probe, then what_answers' 2 s


def test_a_service_that_speaks_first_is_named_within_the_hard_deadline(chatty_port: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(connecting, "CONNECT_TIMEOUT", 1)
    start = time.monotonic()
    with pytest.raises(ConnectionError, match="(did not answer as|cannot be reached as) a Dask scheduler.*a non-Dask "
                                              "service answered b.SSH-2.0"):
        connecting.connect(f"tcp://127.0.0.1:{chatty_port}", RunConfig())
    assert time.monotonic() - start < 15


def test_an_http_server_is_named(http_port: int, capsys: pytest.CaptureFixture[str]) -> None:
    start = time.monotonic()
    with pytest.raises(ConnectionError, match="cannot be reached as a Dask scheduler .an HTTP server answered: "
                                              ".HTTP/1.0 501"):
        connecting.connect(f"tcp://127.0.0.1:{http_port}", RunConfig())
    assert time.monotonic() - start < connecting.HANDSHAKE_FIRST_S + 4
    capsys.readouterr()
    assert main(["train", "--scheduler", f"tcp://127.0.0.1:{http_port}", "--steps", "1", "--no-progress"]) == 1
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("labkit")]
    assert len(err) == 1 and "an HTTP server answered" in err[0], err


def _worker_settings(dask_worker=None) -> tuple[str | None, bool, bool, float, bool]:
    """On a worker: torch's huge-page variable, whether Dask's profiler and its ticks run, how often,
    and whether it was forked from the warm server (its parent: multiprocessing's forkserver)."""
    import os

    import psutil

    return (os.environ.get("THP_MEM_ALLOC_ENABLE"), "profile" in dask_worker.periodic_callbacks,
            "tick" in dask_worker.periodic_callbacks, dask_worker.periodic_callbacks["tick"].callback_time,
            "forkserver" in " ".join(psutil.Process().parent().cmdline()))


def test_an_embedded_cluster_starts_its_workers_fit_for_compute() -> None:
    """The workers of the cluster `connect` embeds put large tensors on huge pages, run neither
    Dask's sampling profiler nor 20 ms ticks, and are forked from the warm server; the driver's own
    config is left as it was."""
    import dask

    workers_own = ("distributed.worker.profile", "distributed.admin")  # what WORKER_CONFIG sets for the workers
    before = [copy.deepcopy(dask.config.get(key)) for key in workers_own]
    client, cluster = connecting.connect(None, RunConfig(stages=1, peers=1, trainers=1))
    try:
        settings = client.run(_worker_settings)
    finally:
        client.close()
        cluster.close()
    assert len(settings) == 3, settings  # 1 peer, 1 trainer and the spare worker
    assert set(settings.values()) == {("1", False, True, 500.0, True)}, settings
    assert [dask.config.get(key) for key in workers_own] == before
