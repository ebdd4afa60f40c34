"""An actor that never starts (its worker hung or gone) is named in the error, with its worker:
a launch next to a SIGSTOPped worker once failed with Dask's bare "timed out after 120 s."."""

from __future__ import annotations

import pytest

from labkit.backends.dask.remote import START_TIMEOUT, started_actor


class NeverStarts:
    """A Dask future whose actor never starts: `result` times out as distributed's does."""

    def result(self, timeout: float) -> None:
        assert timeout == START_TIMEOUT
        raise TimeoutError(f"timed out after {timeout:.0f} s.")


class Fails:
    def result(self, timeout: float) -> None:
        raise RuntimeError("the actor's __init__ raised")


def test_an_actor_that_never_starts_is_named_with_its_worker() -> None:
    with pytest.raises(TimeoutError, match=r"^s0p0: its actor did not start on the Dask worker tcp://10.0.0.5:4 "
                                           r"within 120 s \(is that worker hung or gone\?\)$"):
        started_actor(NeverStarts(), "s0p0", "tcp://10.0.0.5:4")


def test_what_stopped_an_actor_from_starting_is_raised_as_it_is() -> None:
    with pytest.raises(RuntimeError, match="the actor's __init__ raised"):
        started_actor(Fails(), "s0p0", "tcp://10.0.0.5:4")
