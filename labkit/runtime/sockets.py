"""A direct TCP transport: requests and replies as frames on a connection the caller keeps open.

The Dask backend's data plane. A Dask actor call goes caller thread -> call pool -> worker
event loop -> actor -> and back, about 5 ms even for an empty message; here a request is one
frame each way, read by one thread per connection on each side (docs/benchmarks.md has both).

`SocketServer` answers each request with `serve(method, args)`, a future (the server's own queue
orders the work), and writes the reply when it resolves. `SocketClient.call` returns a future
with the same `timing` a Dask call reports. A closed connection fails every waiting request at
once: the kernel closes a killed process's sockets, so its callers learn of the death at once.
"""

from __future__ import annotations

import contextlib
import pickle
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from functools import partial
from typing import Any

from labkit.runtime.background import settle
from labkit.runtime.request_queue import timing
from labkit.wire.frames import read_frame, write_frame

CONNECT_TIMEOUT = 10.0  # seconds to open a connection to a server


def _nodelay(sock: socket.socket) -> socket.socket:
    """No Nagle delay: a request is one frame, sent as soon as it is written."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


class SocketServer:
    """Listens on `host` (port chosen by the system, in `address` as "host:port") and answers
    every request with `serve(method, args)`."""

    def __init__(self, serve: Callable[[str, tuple], Future], host: str, name: str) -> None:
        self._serve, self._name = serve, name
        self._listener = socket.create_server((host, 0))
        self.address = f"{host}:{self._listener.getsockname()[1]}"
        self._connections: set[socket.socket] = set()
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, name=f"{name}-accept", daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self._listener.accept()
            except OSError:  # closed
                return
            with self._lock:
                self._connections.add(_nodelay(connection))
            threading.Thread(target=self._read, args=(connection,), name=f"{self._name}-read", daemon=True).start()

    def _read(self, connection: socket.socket) -> None:
        """Serve one caller's requests in the order they come, until it hangs up."""
        write = threading.Lock()
        try:
            while True:
                request_id, method, args = read_frame(connection)
                arrived = time.time()
                future = self._serve(method, args)
                future.add_done_callback(partial(self._reply, connection, write, request_id, arrived))
        except (OSError, EOFError):
            pass
        finally:
            with self._lock:
                self._connections.discard(connection)
            connection.close()

    @staticmethod
    def _reply(connection: socket.socket, write: threading.Lock, request_id: int, arrived: float,
               future: Future) -> None:
        """Send `future`'s result (with where its time went) or its error back to the caller."""
        if future.cancelled():
            return
        exc = future.exception()
        served = {**timing(future), "arrived": arrived}
        try:
            with write:
                try:
                    write_frame(connection, (request_id, exc is None, future.result() if exc is None else exc,
                                             served | {"left": time.time()}))
                except (pickle.PicklingError, TypeError, AttributeError, ValueError) as unpicklable:  # an answer pickle cannot carry
                    write_frame(connection, (request_id, False, RuntimeError(f"{type(unpicklable).__name__}: "
                                                                             f"{unpicklable}"), served))
        except OSError:  # the caller hung up: nobody waits for this answer
            pass

    def close(self) -> None:
        """Stop listening and hang up on every caller (their waiting requests fail at once).
        The listener is shut down before it is closed: closing alone leaves a thread blocked in
        accept() listening, so a new caller would connect and wait forever."""
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        with self._lock:
            connections, self._connections = list(self._connections), set()
        for connection in connections:
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            connection.close()


class SocketClient:
    """One connection to the server at `address` ("host:port"), opened at the first call.
    Once it breaks, every waiting and later request fails with `died()`."""

    def __init__(self, address: str, died: Callable[[], Exception]) -> None:
        host, port = address.rsplit(":", 1)
        self._target, self._died = (host, int(port)), died
        self._lock = threading.Lock()  # guards the table of waiting requests
        self._write = threading.Lock()  # one frame at a time on the socket
        self._socket: socket.socket | None = None
        self._waiting: dict[int, tuple[Future, float]] = {}  # request id -> (future, wall time sent)
        self._next_id = 0
        self._broken = False

    def call(self, method: str, *args: Any) -> Future:
        """Send `method(*args)`; the future resolves to the server's answer."""
        out: Future = Future()
        try:
            with self._write:
                sock = self._connected()
                with self._lock:
                    request_id, self._next_id = self._next_id, self._next_id + 1
                    self._waiting[request_id] = (out, time.time())
                write_frame(sock, (request_id, method, args))
        except OSError:
            self.close()
            settle(out, exc=self._died())
        return out

    def _connected(self) -> socket.socket:
        """The open connection (opened now if this is the first call); OSError once broken."""
        if self._broken:
            raise ConnectionError("closed")
        sock = self._socket  # a local: a concurrent close() sets the attribute to None
        if sock is None:
            sock = self._socket = _nodelay(socket.create_connection(self._target, timeout=CONNECT_TIMEOUT))
            sock.settimeout(None)
            threading.Thread(target=self._read, args=(sock,), name="labkit-socket-read", daemon=True).start()
        return sock

    def _read(self, sock: socket.socket) -> None:
        try:
            while True:
                request_id, ok, value, served = read_frame(sock)
                received = time.time()
                with self._lock:
                    out, sent = self._waiting.pop(request_id, (None, 0.0))
                if out is None:
                    continue
                arrived, left = served.pop("arrived"), served.pop("left", received)
                out.timing = {**served, "dispatch": 0.0, "request": arrived - sent, "served": left - arrived,
                              "reply": received - left}
                if ok:
                    settle(out, result=value)
                else:
                    settle(out, exc=value)
        except (OSError, EOFError):
            self.close()

    def close(self) -> None:
        """Hang up: every waiting and later request fails with `died()`."""
        with self._lock:
            self._broken = True
            sock, self._socket = self._socket, None
            waiting, self._waiting = list(self._waiting.values()), {}
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
        for out, _ in waiting:
            settle(out, exc=self._died())
