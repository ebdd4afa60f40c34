"""Re-forming after a kill, for `benchmarks/allreduce.py`: labkit's ring vs a gloo group.

One trial: n fresh peers (ring linked, gloo group joined) run one all-reduce of the nano stage
together, then the n - 1 survivors start the next while the victim (origin 1) is parked (its
server still takes chunks; it never enters the reduce). After 0.2 s, so that the survivors are
waiting inside it, the driver SIGKILLs the victim. The clock starts at the kill:

- detect: the driver's connection to the victim breaks (its parked request fails);
- survivors out: the last survivor's pending reduce has failed. Ring: the survivors cannot tell
  on their own (only the victim's left neighbour's next send would fail), so the driver, once it
  detects, aborts the ring in every survivor's mailbox. Gloo: its own transport notices the
  closed connections; the driver does not intervene;
- re-form: from the later of those two until the survivors are linked in a new ring (the
  victim's left neighbour opens a link to its new right) / have formed a new gloo group of n - 1
  on a new prefix of the driver's TCPStore (the driver sends these requests at its detection;
  each survivor's waits behind its failed reduce);
- first reduce: the survivors' all-reduce of the nano stage in the new ring / group, checked
  against the exact sum of their gradients;
- total: kill to the end of that reduce.

Reported per (n, method): each phase's median over the trials, the largest total, and the
distinct errors the survivors' pending reduces failed with.
"""

from __future__ import annotations

import os
import re
import signal
import statistics
import time
from collections.abc import Sequence
from concurrent.futures import Future
from concurrent.futures import wait as wait_any

from benchmarks.allreduce_peer import Shapes, peers, wait

VICTIM = 1
SETTLE_S = 0.2  # time the survivors get to enter the reduce before the kill
PHASES = ("detect", "survivors_out", "reform", "first_reduce", "total")
# Per (n, method): each phase's median ms, "max_total" ms, "errors": how the survivors' reduces failed
Cell = dict[str, float | str]


def _stamp(futures: Sequence[Future]) -> list[float]:
    """A list that receives perf_counter() when each of `futures` resolves."""
    stamps: list[float] = []
    for f in futures:
        f.add_done_callback(lambda _: stamps.append(time.perf_counter()))
    return stamps


def _why(failed: Future) -> str:
    """The first line of a failed reduce's error, without source paths and port numbers."""
    text = str(failed.exception()).splitlines()[0]
    return re.sub(r"\[/\S+\] |:\d{2,}", "", text).split(". ")[0][:100]


def trial(method: str, n: int, sizes: Sequence[Shapes], store_port: int,
          trial_no: int) -> tuple[dict[str, float], set[str]]:
    """One kill of peer VICTIM among n and the survivors' re-form: ms per phase (PHASES), and
    how the survivors' pending reduces failed."""
    size, survivors = 0, [m for m in range(n) if m != VICTIM]
    with peers(n, sizes, store_port) as group:
        c = group.clients

        def reduce(members: Sequence[int], round_no: int) -> list[Future]:
            wait([c[m].call("load", size, round_no) for m in members])
            if method == "ring":
                return [c[m].call("ring", size, round_no) for m in members]
            return [c[m].call("gloo", size) for m in members]

        wait(reduce(range(n), 0))
        parked = c[VICTIM].call("park")
        old = reduce(survivors, 1)
        failed = _stamp(old)
        time.sleep(SETTLE_S)
        killed = time.perf_counter()
        os.kill(group.procs[VICTIM].pid, signal.SIGKILL)
        wait_any([parked], timeout=60)
        seen = time.perf_counter()
        assert parked.exception() is not None, "the victim's request did not fail"
        if method == "ring":
            wait([c[m].call("abort", 1, "a peer died") for m in survivors])
            group.link(survivors)
        else:
            wait(group.join(store_port, f"n{n}t{trial_no}", survivors))
        formed = time.perf_counter()
        wait(reduce(survivors, 2))
        done = time.perf_counter()
        assert all(f.exception() is not None for f in old), \
            f"{method}: a reduce with a dead peer succeeded"
        assert all(wait([c[m].call("verify", size, 2, survivors) for m in survivors])), \
            f"{method} re-formed among {n - 1}: a wrong sum"
    ms = [1e3 * (t - killed) for t in (seen, max(failed), formed, done)]
    return ({"detect": ms[0], "survivors_out": ms[1], "reform": ms[2] - max(ms[:2]),
             "first_reduce": ms[3] - ms[2], "total": ms[3]}, {_why(f) for f in old})


def measure(peer_counts: Sequence[int], trials: int, sizes: Sequence[Shapes],
            store_port: int) -> dict[tuple[int, str], Cell]:
    """Per (n, method), ring and gloo trials alternating: the median ms of each phase, the
    largest total, and every distinct error the survivors' reduces failed with."""
    out: dict[tuple[int, str], Cell] = {}
    for n in peer_counts:
        runs: dict[str, list[tuple[dict[str, float], set[str]]]] = {"ring": [], "gloo": []}
        for t in range(trials):
            for method in (("ring", "gloo") if t % 2 == 0 else ("gloo", "ring")):
                runs[method].append(trial(method, n, sizes, store_port, t))
        for method, rows in runs.items():
            cell: Cell = {p: statistics.median(r[p] for r, _ in rows) for p in PHASES}
            cell["max_total"] = max(r["total"] for r, _ in rows)
            cell["errors"] = " | ".join(sorted(set().union(*(why for _, why in rows))))
            out[n, method] = cell
    return out


def table(cells: dict[tuple[int, str], Cell], trials: int) -> list[str]:
    """The re-form table's markdown lines, then the survivors' errors per cell."""
    if not cells:
        return []
    columns = (*PHASES, "max_total")
    lines = [f"Re-form after a SIGKILL (nano stage; medians of {trials} trials, ms from the kill):",
             "| N -> survivors | method | " + " | ".join(columns) + " |",
             "|---|---|" + "---|" * len(columns)]
    for (n, method), cell in cells.items():
        values = " | ".join(f"{cell[c]:.1f}" for c in columns)
        lines.append(f"| {n} -> {n - 1} | {method} | {values} |")
    lines += [f"{n} -> {n - 1}, {method}: the survivors' reduces failed with: {cell['errors']}"
              for (n, method), cell in cells.items()]
    return lines
