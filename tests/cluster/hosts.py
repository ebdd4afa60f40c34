"""Emulated machines on this one: network namespaces on a bridge, each with an address of its own.

The bridge lives in the root namespace with the subnet's first address, so the test process (the
driver) reaches every "host" directly; each host is a namespace whose veth pair has one end on the
bridge. Processes run in a host through `ip netns exec`, a host dies by SIGKILL of every process
in its namespace, and `Host.shape` limits its link's bandwidth with the kernel's `tbf` (netem
delay is not available here). Creating namespaces needs root: `why_no_hosts` says why a test must
skip. Everything `emulated_hosts` creates is removed when it exits, also when setup fails halfway.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from distributed import Client

from tests.waiting import wait_until

SUBNET = "10.213.{}.{}"  # the third octet is picked free at setup, the fourth is the host's index
PORT = 8786  # the scheduler's default port: each host is a namespace of its own, so it is free
REPO = Path(__file__).resolve().parents[2]


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=30)


def why_no_hosts() -> str | None:
    """Why this machine cannot make emulated hosts (None: it can): not root, no `ip`, or the
    kernel refuses `ip netns add`."""
    if os.geteuid() != 0:
        return "creating network namespaces needs root"
    if shutil.which("ip") is None:
        return "creating network namespaces needs iproute2's `ip`"
    probe = f"lkprobe{uuid.uuid4().hex[:6]}"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"`ip netns add` was refused: {made.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


@dataclass
class Host:
    """One emulated machine: namespace `netns`, address `address` on the bridge, and the two ends
    of its link: `veth` on the bridge (its egress is what the host receives) and `inner` in the
    namespace (what it sends)."""

    netns: str
    address: str
    veth: str
    inner: str
    processes: list[subprocess.Popen] = field(default_factory=list)

    def start(self, argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
        """Run `argv` on this host, its output to `log`."""
        with open(log, "ab") as out:
            process = subprocess.Popen(["ip", "netns", "exec", self.netns, *argv], env=env, stdout=out,
                                       stderr=subprocess.STDOUT, start_new_session=True)
        self.processes.append(process)
        return process

    def pids(self) -> list[int]:
        """Every process running in this host's namespace (the ones started here and their children)."""
        return [int(p) for p in _ip("netns", "pids", self.netns).stdout.split()]

    def kill(self) -> None:
        """The machine dies: SIGKILL every process in its namespace and reap the ones started here."""
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for process in self.processes:
            process.wait(30)
        wait_until(lambda: not self.pids(), 30, f"every process of {self.netns} to exit")

    def shape(self, rate: str | None) -> None:
        """Limit the host's link to `rate` (a tc rate like "20mbit") each way with a token bucket
        (`tbf`, a 32 KB bucket, at most 100 ms queued); None: no limit."""
        for tc, dev in ((["tc"], self.veth), (["tc", "-n", self.netns], self.inner)):
            if rate is None:
                subprocess.run([*tc, "qdisc", "del", "dev", dev, "root"], capture_output=True, timeout=30)
            else:
                subprocess.run([*tc, "qdisc", "replace", "dev", dev, "root", "tbf", "rate", rate, "burst", "32kb",
                                "latency", "100ms"], check=True, capture_output=True, timeout=30)


def _free_octet() -> int:
    """A third octet whose 10.213.X.0/24 no route of the root namespace uses yet."""
    routes = _ip("-4", "route").stdout
    free = [x for x in range(1, 255) if SUBNET.format(x, "") not in routes]
    return random.choice(free)


@contextlib.contextmanager
def emulated_hosts(count: int) -> Iterator[list[Host]]:
    """`count` hosts on one new bridge; on exit every process in them is killed and every
    namespace, veth and the bridge are deleted, whatever happened."""
    tag = uuid.uuid4().hex[:4]
    octet = _free_octet()
    bridge = f"lk{tag}br"
    with contextlib.ExitStack() as undo:
        _ip("link", "add", bridge, "type", "bridge")
        undo.callback(_ip, "link", "del", bridge, check=False)
        _ip("addr", "add", f"{SUBNET.format(octet, 1)}/24", "dev", bridge)
        _ip("link", "set", bridge, "up")
        hosts = []
        for i in range(count):
            host = Host(f"lk{tag}-{i}", SUBNET.format(octet, i + 2), f"lk{tag}v{i}", f"lk{tag}n{i}")
            _ip("netns", "add", host.netns)
            undo.callback(_ip, "netns", "del", host.netns, check=False)
            undo.callback(host.kill)  # runs before the namespace goes
            _ip("link", "add", host.veth, "type", "veth", "peer", "name", host.inner)
            undo.callback(_ip, "link", "del", host.veth, check=False)  # deletes its pair too
            _ip("link", "set", host.inner, "netns", host.netns)
            _ip("link", "set", host.veth, "master", bridge, "up")
            _ip("-n", host.netns, "addr", "add", f"{host.address}/24", "dev", host.inner)
            _ip("-n", host.netns, "link", "set", host.inner, "up")
            _ip("-n", host.netns, "link", "set", "lo", "up")
            hosts.append(host)
        yield hosts
    assert tag not in _ip("link").stdout + _ip("netns", "list").stdout, f"emulated hosts lk{tag}* left behind"


def start_dask(head: Host, workers: list[tuple[Host, int]], logs: Path) -> str:
    """The README's multi-machine recipe: `dask scheduler` on `head`, `dask worker
    tcp://HEAD:8786 --nthreads 1` on each (host, count) of `workers` (`--nworkers count`, no --host: a
    worker's address is the one it reaches the scheduler from), this checkout's labkit on their
    path; returns the scheduler's address once every worker has joined."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    address = f"tcp://{head.address}:{PORT}"
    head.start([sys.executable, "-m", "dask", "scheduler", "--port", str(PORT), "--no-dashboard"], env,
               logs / "scheduler.log")
    for host, count in workers:
        host.start([sys.executable, "-m", "dask", "worker", address, "--nthreads", "1", "--nworkers", str(count),
                    "--no-dashboard", "--local-directory", str(logs / host.netns)], env, logs / f"{host.netns}.log")
    with Client(address, timeout=60) as client:
        client.wait_for_workers(sum(count for _, count in workers), timeout=180)
    return address
