"""A peer's pacing: its delay, and the hold of a virtual device (issue 26), on real threads."""

from __future__ import annotations

import threading
import time

import pytest

from labkit.runtime.pacing import Pacing


class Died(RuntimeError):
    pass


def test_a_virtual_device_holds_a_fast_request_and_reports_a_slow_one() -> None:
    pacing = Pacing(threading.Event(), Died, table=([0.05, 0.02], [0.1, 0.04]))
    started = time.perf_counter()
    with pacing.request("forward", 0):
        pass  # real compute: nothing
    assert time.perf_counter() - started >= 0.05
    assert pacing.last == {"emulated": 0.05, "overrun": 0.0} and pacing.overruns == 0
    with pacing.request("loss", 1):
        time.sleep(0.08)  # slower than the device's 0.02 + 0.04
    assert pacing.last["emulated"] == pytest.approx(0.06) and pacing.last["overrun"] >= 0.02
    assert pacing.overruns == 1


def test_a_kill_ends_a_held_request_at_once_and_real_speed_holds_nothing() -> None:
    killed = threading.Event()
    pacing = Pacing(killed, Died, table=([60.0], [60.0]))
    threading.Timer(0.05, killed.set).start()
    started = time.perf_counter()
    with pytest.raises(Died):
        with pacing.request("backward", 0):
            pass
    assert time.perf_counter() - started < 30
    free = Pacing(threading.Event(), Died)
    with free.request("forward", 0):
        pass
    assert free.last == {} and free.overruns == 0
