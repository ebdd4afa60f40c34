"""Data-plane bandwidth of the Dask backend against a raw TCP socket, on loopback.

A 4x512x768 float32 tensor (6,291,456 bytes, a GPT-2 small boundary activation) makes round
trips trainer -> peer -> trainer: (a) through labkit's data plane, `RemotePeer.call("echo", x)`
with `x` the fp32 `Encoded` of the tensor, from a caller actor on worker A to a `PeerActor` on
worker B of a 2-process `LocalCluster` (a Dask actor call worker to worker, queued on the peer's
thread, as a trainer's forward request travels); (b) a raw TCP socket between two spawned
processes, the same bytes after a 16-byte header (size, reply size), received fully and sent back.
MB/s = 2 * 6,291,456 bytes * round trips / seconds (both directions count). Warm-up rounds
first; then repeats interleave (labkit, raw) and medians are reported, since the machine is
shared and noisy. To show where labkit's time goes, it also prints what Dask's serialization
and deserialization of that `Encoded` (as an actor call's argument) cost in one process.

    python benchmarks/transfer.py [--round-trips 20] [--repeats 7] [--warmup 3]

Last line: transfer_ratio=<labkit MB/s / raw TCP MB/s> labkit_mbps=<x> raw_mbps=<y>.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import socket
import statistics
import time
import uuid
from multiprocessing.connection import Connection
from typing import Any

import torch
from distributed import Client, LocalCluster
from distributed.protocol import dumps, loads, to_serialize

from labkit.backends.dask.dht import release
from labkit.backends.dask.peer_actor import PeerActor, peer_actor
from labkit.backends.dask.remote import START_TIMEOUT, RemotePeer
from labkit.backends.dask.workers import cluster_workers
from labkit.config import ModelConfig, RunConfig
from labkit.model.assembly import initial_states
from labkit.wire import get_codec

SHAPE = (4, 512, 768)
NBYTES = 4 * 512 * 768 * 4  # 6,291,456
HOST = "127.0.0.1"


class Caller:
    """A Dask actor on worker A: a trainer's handle on the peer actor, and the encoded tensor."""

    def __init__(self, address: str, key: str) -> None:
        self.peer = RemotePeer("s0p0", 0, key, address, peer_actor(address, key))
        self.encoded = get_codec("fp32").encode(torch.randn(SHAPE, generator=torch.Generator().manual_seed(0)))

    def echo_matches(self) -> bool:
        """One round trip; whether the tensor came back bit-identical."""
        back = self.peer.call("echo", self.encoded).result()
        return torch.equal(back.payload[0], self.encoded.payload[0])

    def round_trips(self, n: int) -> float:
        """Wall seconds of `n` sequential echo round trips."""
        start = time.perf_counter()
        for _ in range(n):
            self.peer.call("echo", self.encoded).result()
        return time.perf_counter() - start


def _recv_exactly(sock: socket.socket, view: memoryview) -> bool:
    """Fill `view` from `sock`; False if the other side closed first."""
    while view:
        got = sock.recv_into(view)
        if not got:
            return False
        view = view[got:]
    return True


def raw_echo(conn: Connection) -> None:
    """Child process: accept one connection; for every message (a 16-byte header: its size and
    the reply's size, then its bytes) send back the reply's size and that many of its bytes."""
    with socket.create_server((HOST, 0)) as server:
        conn.send(server.getsockname()[1])
        sock, _ = server.accept()
    with sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        header, payload = bytearray(16), bytearray()
        while _recv_exactly(sock, memoryview(header)):
            size, reply = int.from_bytes(header[:8], "little"), int.from_bytes(header[8:], "little")
            if len(payload) < max(size, reply):
                payload = bytearray(max(size, reply))
            if not _recv_exactly(sock, memoryview(payload)[:size]):
                return
            sock.sendall(header[8:])
            sock.sendall(memoryview(payload)[:reply])


def raw_sender(port: int, conn: Connection) -> None:
    """Child process: for each (n, size, reply) received on `conn`, time `n` round trips of
    `size` bytes out and `reply` bytes back and answer (seconds, whether the last reply matched
    what was sent); stop on None."""
    with socket.create_connection((HOST, port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while (asked := conn.recv()) is not None:
            n, size, reply = asked
            data, header = os.urandom(size), size.to_bytes(8, "little") + reply.to_bytes(8, "little")
            back, back_header = bytearray(reply), bytearray(8)
            start = time.perf_counter()
            for _ in range(n):
                sock.sendall(header)
                sock.sendall(data)
                _recv_exactly(sock, memoryview(back_header))
                _recv_exactly(sock, memoryview(back))
            common = min(size, reply)
            conn.send((time.perf_counter() - start, back[:common] == data[:common]))


class RawTcp:
    """Two spawned processes on a loopback socket: `round_trips` times messages between them."""

    def __init__(self) -> None:
        ctx = mp.get_context("spawn")
        echo_end, echo_conn = ctx.Pipe()
        self._sender_end, sender_conn = ctx.Pipe()
        self._processes = [ctx.Process(target=raw_echo, args=(echo_conn,), daemon=True)]
        self._processes[0].start()
        self._processes.append(ctx.Process(target=raw_sender, args=(echo_end.recv(), sender_conn), daemon=True))
        self._processes[1].start()

    def round_trips(self, n: int, size: int = NBYTES, reply: int = NBYTES) -> float:
        """Wall seconds of `n` round trips of `size` bytes out and `reply` bytes back."""
        self._sender_end.send((n, size, reply))
        seconds, matched = self._sender_end.recv()
        assert matched, "the raw TCP echo changed the bytes"
        return seconds

    def close(self) -> None:
        self._sender_end.send(None)
        for process in reversed(self._processes):
            process.join(10)
            if process.is_alive():
                process.terminate()
                process.join()


def start_labkit(client: Client) -> tuple[str, Any, Any]:
    """A `PeerActor` (stage 0 of a 1-stage nano model) on worker B, made as `DaskPeers.start_peer`
    makes one, with its own one-node DHT (its announcements go nowhere else: nobody discovers it,
    the caller is given its address); and a `Caller` on worker A. Returns the run id and their futures."""
    a, b = sorted(cluster_workers(client))
    cfg = RunConfig(model=ModelConfig(size="nano"), stages=1, peers=1)
    state = initial_states(cfg)[0]
    run_id = uuid.uuid4().hex[:12]
    key = f"labkit-peer-{run_id}-s0p0"
    peer = client.submit(PeerActor, run_id, key, "s0p0", 0, cfg, state, 0.0, [], None, key=key, actor=True,
                         workers=[b], allow_other_workers=False)
    actor = peer.result(START_TIMEOUT)
    caller = client.submit(Caller, actor._address, actor.key, actor=True, workers=[a], allow_other_workers=False)
    return run_id, peer, caller


def serialization_ms(args: tuple, repeats: int) -> float:
    """Median ms to serialize and deserialize `args` as a Dask actor call's arguments (what each
    direction of a labkit round trip pays besides the socket), in this process."""
    message = {"op": "actor_execute", "args": [to_serialize(a) for a in args]}
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        loads(dumps(message))
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def mbps(round_trips: int, seconds: float) -> float:
    return 2 * NBYTES * round_trips / seconds / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--round-trips", type=int, default=20, help="round trips per timed repeat")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--warmup", type=int, default=3, help="untimed rounds of --round-trips on each side first")
    args = parser.parse_args()
    n = args.round_trips
    raw = None
    results: dict[str, list[float]] = {"labkit": [], "raw TCP": []}
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host=HOST, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        try:
            raw = RawTcp()
            run_id, peer, caller_future = start_labkit(client)
            caller = caller_future.result(START_TIMEOUT)
            assert caller.echo_matches().result(), "the labkit echo changed the tensor"
            for r in range(args.warmup + args.repeats):
                labkit_seconds = caller.round_trips(n).result()
                raw_seconds = raw.round_trips(n)
                if r >= args.warmup:
                    results["labkit"].append(mbps(n, labkit_seconds))
                    results["raw TCP"].append(mbps(n, raw_seconds))
            peer.result().stop(False).result(30)
            client.run(release, run_id)
        finally:
            if raw is not None:
                raw.close()
    load = os.getloadavg()[0]
    torch.set_num_threads(1)  # as the workers' peers run
    codec_ms = serialization_ms((get_codec("fp32").encode(torch.randn(SHAPE)),), args.repeats)
    print(f"tensor {SHAPE} float32 ({NBYTES:,} bytes), {n} round trips per repeat, {args.warmup} warm-up, "
          f"{args.repeats} repeats interleaved; load average {load:.1f}")
    medians = {name: statistics.median(values) for name, values in results.items()}
    for name, values in results.items():
        ms = 2 * NBYTES / medians[name] / 1e3
        print(f"{name:>8}: median {medians[name]:,.0f} MB/s ({ms:.1f} ms per round trip)  "
              f"(runs: {', '.join(f'{v:,.0f}' for v in values)})")
    labkit_ms = 2 * NBYTES / medians["labkit"] / 1e3
    print(f"Dask serialize + deserialize of the Encoded in one process: {codec_ms:.1f} ms per direction, "
          f"{2 * codec_ms:.1f} ms per round trip ({2 * codec_ms / labkit_ms:.0%} of labkit's median round trip)")
    paired = [a / b for a, b in zip(results["labkit"], results["raw TCP"])]
    print(f"paired labkit/raw ratios per repeat: {', '.join(f'{r:.3f}' for r in paired)} (median {statistics.median(paired):.3f})")
    print(f"transfer_ratio={medians['labkit'] / medians['raw TCP']:.3f} labkit_mbps={medians['labkit']:.0f} "
          f"raw_mbps={medians['raw TCP']:.0f}")


if __name__ == "__main__":
    main()
