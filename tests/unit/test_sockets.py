"""The direct TCP data plane (labkit/runtime/sockets.py, labkit/wire/frames.py) over real sockets:
tensors arrive bit for bit, answers and errors reach their callers with the timing a Dask call
reports, and a server that hangs up or is SIGKILLed fails its waiting requests at once."""

from __future__ import annotations

import multiprocessing
import os
import signal
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout

import pytest
import torch

from labkit.runtime.peer import PeerDied
from labkit.runtime.request_queue import RequestQueue
from labkit.runtime.sockets import SocketClient, SocketServer
from labkit.wire import get_codec


class Echo(RequestQueue):
    """A server thread answering in order: `echo` sends its argument back, `boom` raises,
    `hold` never answers, `lambda_` answers with something pickle cannot carry."""

    def __init__(self) -> None:
        super().__init__("echo", lambda: PeerDied("echo"))
        self.held: list[Future] = []

    def serve(self, method: str, args: tuple) -> Future:
        if method == "hold":
            self.held.append(Future())
            return self.held[-1]
        return self.call(method, *args)

    def echo(self, value: object) -> object:
        return value

    def boom(self) -> None:
        raise ValueError("the peer's own error")

    def lambda_(self) -> object:
        return lambda: None


@pytest.fixture
def echo() -> tuple[Echo, SocketServer, SocketClient]:
    server = Echo()
    plane = SocketServer(server.serve, "127.0.0.1", "test")
    client = SocketClient(plane.address, lambda: PeerDied("echo"))
    yield server, plane, client
    client.close()
    plane.close()
    server.kill()


def test_tensors_and_codec_payloads_arrive_bit_for_bit_with_timing(echo) -> None:
    _, _, client = echo
    message = {"f32": torch.randn(16, 64), "bf16": torch.randn(8).bfloat16(), "empty": torch.empty(0, 3),
               "scalar": torch.tensor(2.5, dtype=torch.float64), "strided": torch.randn(6, 4).t(),
               "ids": torch.randint(0, 256, (4, 128)), "int8": get_codec("int8").encode(torch.randn(32, 64)),
               "plain": [1, "two", 3.0]}
    future = client.call("echo", message)
    answer = future.result(timeout=10)
    for key in ("f32", "bf16", "empty", "scalar", "strided", "ids"):
        assert answer[key].dtype == message[key].dtype and torch.equal(answer[key], message[key]), key
    assert all(torch.equal(a, b) for a, b in zip(answer["int8"].payload, message["int8"].payload))
    assert answer["plain"] == message["plain"]
    assert {"queue", "compute", "request", "served", "reply", "dispatch"} <= set(future.timing)
    assert all(value >= -0.01 for value in future.timing.values()), future.timing  # one host: one clock


def test_answers_come_back_to_their_own_callers_in_order(echo) -> None:
    _, _, client = echo
    futures = [client.call("echo", torch.full((1000,), float(i))) for i in range(50)]
    assert [int(f.result(timeout=10)[0]) for f in futures] == list(range(50))


def test_the_servers_errors_reach_the_caller_as_raised(echo) -> None:
    _, _, client = echo
    with pytest.raises(ValueError, match="the peer's own error"):
        client.call("boom").result(timeout=10)
    with pytest.raises(RuntimeError, match="pickle|lambda|local object"):
        client.call("lambda_").result(timeout=10)
    assert client.call("echo", 7).result(timeout=10) == 7  # the connection survives both


def test_a_server_hanging_up_fails_waiting_and_later_requests_at_once(echo) -> None:
    server, plane, client = echo
    waiting = client.call("hold")
    with pytest.raises(FutureTimeout):
        waiting.result(timeout=0.2)
    plane.close()
    with pytest.raises(PeerDied):
        waiting.result(timeout=5)
    with pytest.raises(PeerDied):
        client.call("echo", 1).result(timeout=5)


def test_nothing_listening_fails_the_call_with_the_death_error() -> None:
    plane = SocketServer(lambda method, args: Future(), "127.0.0.1", "gone")
    address = plane.address
    plane.close()
    with pytest.raises(PeerDied):
        SocketClient(address, lambda: PeerDied("gone")).call("echo", 1).result(timeout=5)


def _hold_forever(ready: multiprocessing.Queue) -> None:
    """A server process that never answers: every request waits until the process dies."""
    ready.put(SocketServer(lambda method, args: Future(), "127.0.0.1", "holder").address)
    signal.pause()


def test_a_sigkilled_server_process_fails_its_waiting_request_at_once() -> None:
    context = multiprocessing.get_context("spawn")
    ready = context.Queue()
    process = context.Process(target=_hold_forever, args=(ready,), daemon=True)
    process.start()
    try:
        client = SocketClient(ready.get(timeout=60), lambda: PeerDied("holder"))
        waiting = client.call("anything", torch.zeros(10))
        with pytest.raises(FutureTimeout):
            waiting.result(timeout=0.2)
        os.kill(process.pid, signal.SIGKILL)
        with pytest.raises(PeerDied):
            waiting.result(timeout=5)  # the kernel closed the dead process's socket
    finally:
        process.kill()
        process.join(10)
