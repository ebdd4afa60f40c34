"""Chaos at rate on the Dask backend: real SIGKILLs of random peer and trainer workers, not waiting
for steps, against the same run without faults in the same invocation.

    python benchmarks/chaos.py --minutes 10 --kill-every 10 [--hang-share 0.25] [--hang-seconds 30]
                               [--baseline-minutes 2] [--seed 0] [--run-dir DIR]

Each run has a LocalCluster of its own (a worker per peer and trainer, and one spare; the
coordinator runs in this process, behind the run's handle). A fault comes after an exponential
wait of mean `--kill-every` seconds. Its victim is a worker serving a trainer, or a peer of a stage
that keeps another live peer (a stage left with none pauses the run by design). A share
`--hang-share` of the faults is a hang instead of a kill: the worker is SIGSTOPped (its
sockets stay open, it answers nothing), and SIGKILLed `--hang-seconds` later, as a hung machine is
eventually rebooted. The nanny restarts a killed worker under a new address, and the run gives it
a peer if it is short of one (a hung peer is replaced on a spare once evicted): those are the
joins. Times of faults and of the events that answer them are taken here, as the events arrive
(a trainer's hop events come batched with its microbatch's `finish`: a hop's arrival is late by up
to one microbatch).

Prints per minute: RSS of this process and every process under it (the workers, their DHT
daemons), threads and processes; then samples lost and doubled (each committed step against the
global batch, per stage), the longest gap between steps (the last step to the end of the chaos
too), per fault the seconds to the next step and to the replacement serving a hop (and a hung
worker's seconds to its eviction), the live peers (the share of time at each count, and the step
rate then), training efficiency (tokens/s under chaos over fault-free) and
RSS growth over the second half (medians of 5 minute samples at its start and at its end). Last line (kills counts every fault, hangs too):
chaos minutes=<M> kills=<n> efficiency=<x> lost=<n> doubled=<n> longest_gap_s=<x>
median_recovery_s=<x> rss_growth_last_half=<x>
"""

from __future__ import annotations

import argparse
import os
import queue
import random
import signal
import statistics
import threading
import time
from collections.abc import Collection
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

import psutil
from distributed import Client, LocalCluster

import labkit
from labkit.backends.dask.connect import DETACH, restarting_cluster
from labkit.backends.dask.workers import cluster_workers
from labkit.config import DataConfig, ModelConfig, RunConfig

ASK_SECONDS = 3.0  # a worker that does not answer the harness by then is dying or hung: not a victim this time


@dataclass
class Kill:
    """One SIGKILL: when (monotonic), whose worker, and what answered it."""

    at: float
    role: str  # "peer" or "trainer" (SIGKILL), "hung peer" or "hung trainer" (SIGSTOP, then SIGKILL)
    name: str
    killed: float = float("inf")  # when its process was SIGKILLed (a hung one's: `--hang-seconds` after `at`)
    evicted: float | None = None  # hung: seconds to the run's `killed` event for it (a trainer: `trainer_lost`)
    next_step: float | None = None  # seconds to the first step after it
    serving: float | None = None  # seconds to the replacement's first hop
    replacement: str | None = field(default=None, repr=False)


def config() -> RunConfig:
    """2 stages x 3 peers, 2 trainers: a kill of one peer never empties a stage."""
    return RunConfig(model=ModelConfig(size="nano", seq_len=32), data=DataConfig(max_bytes=2_000_000), stages=2,
                     peers=3, trainers=2, global_batch=16, microbatch=4, steps=10_000_000, eval_every=0,
                     eval_batches=2, rebalance_period=0)


def family() -> list[psutil.Process]:
    me = psutil.Process()
    return [me, *me.children(recursive=True)]


def sample() -> tuple[float, int, int]:
    """(RSS in MB, threads, processes) of this process and every process under it."""
    rss, threads, processes = 0, 0, 0
    for process in family():
        try:
            rss += process.memory_info().rss
            threads += process.num_threads()
            processes += 1
        except psutil.Error:
            continue
    return rss / 1e6, threads, processes


def roles(dask_worker: Any = None) -> tuple[int, list[tuple[str, str, int]]]:
    """On a worker: its pid, and (role, name, stage) of each serving actor of a run it holds."""
    out = []
    for actor in dask_worker.state.actors.values():
        kind = type(actor).__name__
        if kind == "PeerActor" and actor.serving:
            out.append(("peer", actor.peer.name, actor.peer.stage))
        elif kind == "TrainerActor":
            out.append(("trainer", actor.trainer.name, -1))
    return os.getpid(), out


def held_roles(client: Client, workers: list[str]) -> dict[str, tuple[int, list[tuple[str, str, int]]]]:
    """`roles` of each of `workers` that answers within ASK_SECONDS. Asked one by one, in parallel:
    the scheduler's broadcast to a worker that has just died waits out distributed's 30 s connect
    timeout, and the chaos paused with it (every fault in those 30 s came late)."""
    pool = ThreadPoolExecutor(max(1, len(workers)), thread_name_prefix="chaos-ask")
    asked = {w: pool.submit(client.run, roles, workers=[w]) for w in workers}
    wait(asked.values(), timeout=ASK_SECONDS)
    pool.shutdown(wait=False)
    return {w: f.result()[w] for w, f in asked.items() if f.done() and f.exception() is None}


HOP_GAP = 0.2  # seconds without a hop of a trainer after which its next hop is kept (a restart's first)


class Stamps:
    """The events of `run` this benchmark reads, stamped with the monotonic time each arrived here,
    and slimmed: steps (tokens, samples per stage), settings and runs whole, peers joining, leaving
    and moving, and only the hops that can be a replacement's first (a peer's first, and a
    trainer's first after `HOP_GAP` without one). Every event (618,000 in a 30-minute run, half
    of them hops with their timings, 1.5 KB each as Python dicts) would hold about 0.9 GB here,
    which the RSS figure counted as the run's until 2026-11-27."""

    def __init__(self, run: labkit.RunHandle) -> None:
        self.events: list[tuple[float, dict[str, Any]]] = []
        self._queue = run.events.subscribe()
        self._run = run
        self._hopped: dict[str, float] = {}  # peer or trainer -> when its last hop arrived
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        while not (self._run.done and self._queue.empty()):
            try:
                event = self._queue.get(timeout=0.2)
            except queue.Empty:
                continue
            now = time.monotonic()
            if (kept := self._slim(event, now)) is not None:
                self.events.append((now, kept))

    def _slim(self, e: dict[str, Any], now: float) -> dict[str, Any] | None:
        kind = e["type"]
        if kind == "step":
            return {"type": kind, "step": e["step"], "tokens": e["tokens"], "stage_samples": e["stage_samples"]}
        if kind in ("setting", "run") or (kind == "peer" and e["state"] != "alive"):
            return e
        if kind != "hop":
            return None
        trainer = e["trainer"].split("/")[0]
        first = e["peer"] not in self._hopped or now - self._hopped.get(trainer, -HOP_GAP) >= HOP_GAP
        self._hopped[e["peer"]] = self._hopped[trainer] = now
        return {"type": kind, "trainer": trainer, "peer": e["peer"]} if first else None

    def after(self, at: float, match: Any) -> tuple[float, dict[str, Any]] | None:
        return next(((t, e) for t, e in list(self.events) if t >= at and match(e)), None)


def tokens_per_second(stamps: Stamps, start: float, end: float) -> float:
    steps = [(t, e) for t, e in stamps.events if e["type"] == "step" and start <= t <= end]
    if len(steps) < 2:
        return 0.0
    return sum(e["tokens"] for _, e in steps[1:]) / (steps[-1][0] - steps[0][0])


def launch(cluster: LocalCluster, run_dir: str | None = None) -> tuple[labkit.RunHandle, Stamps]:
    run = labkit.launch(config(), backend="dask", scheduler=cluster.scheduler_address, run_dir=run_dir)
    stamps = Stamps(run)
    run.wait_for(step=2, timeout=600)
    return run, stamps


def new_cluster() -> LocalCluster:
    cfg = config()
    return restarting_cluster(sum(cfg.peers_per_stage) + cfg.trainers + 1, dashboard_address=None, preload=[DETACH])


def baseline(minutes: float) -> float:
    """Tokens/s of the run without faults."""
    with new_cluster() as cluster:
        run, stamps = launch(cluster)
        start = time.monotonic()
        time.sleep(minutes * 60)
        rate = tokens_per_second(stamps, start, time.monotonic())
        run.stop()
        run.wait(120)
    return rate


def victim(client: Client, rng: random.Random, hung: Collection[str]) -> tuple[str, int, str, str] | None:
    """(worker address, its pid, role, name) of a worker to kill or hang: a trainer's, or a peer's
    whose stage keeps another that is not `hung`; None when there is none (the next fault comes
    later). Hung workers are not asked: they never answer."""
    held = held_roles(client, [w for w in cluster_workers(client) if w not in hung])
    live = [r for _, rs in held.values() for r in rs]
    per_stage = {s: sum(1 for role, _, st in live if role == "peer" and st == s) for _, _, s in live}
    choices = [(w, pid, role, name) for w, (pid, rs) in held.items() for role, name, stage in rs
               if role == "trainer" or per_stage[stage] >= 2]
    return rng.choice(choices) if choices else None


def chaos(minutes: float, kill_every: float, rng: random.Random, hang_share: float = 0.0, hang_seconds: float = 30.0,
          run_dir: str | None = None) -> tuple[list[Kill], Stamps, float, list, float]:
    """The run under chaos: its faults, events, tokens/s, (minute, rss, threads, processes) samples
    and when the chaos ended (monotonic);
    its events also in `run_dir`/events.jsonl if given (for a post-mortem)."""
    with new_cluster() as cluster, Client(cluster.scheduler_address) as client:
        run, stamps = launch(cluster, run_dir)
        start = time.monotonic()
        end = start + minutes * 60
        samples = [(0, *sample())]
        print(f"minute 0: rss {samples[0][1]:.0f} MB, {samples[0][2]} threads, {samples[0][3]} processes", flush=True)
        kills: list[Kill] = []
        hung: dict[str, tuple[int, Kill]] = {}  # worker -> (its pid, its hang), until it is SIGKILLed
        next_kill = start + rng.expovariate(1 / kill_every)
        while time.monotonic() < end:
            now = time.monotonic()
            for worker, (pid, hang) in [(w, h) for w, h in hung.items() if now >= h[1].at + hang_seconds]:
                os.kill(pid, signal.SIGKILL)
                hang.killed = time.monotonic()
                del hung[worker]
            if now >= next_kill:
                hang = rng.random() < hang_share
                target = victim(client, rng, hung)
                if target is not None:
                    worker, pid, role, name = target
                    try:
                        os.kill(pid, signal.SIGSTOP if hang else signal.SIGKILL)
                        kills.append(Kill(time.monotonic(), f"hung {role}" if hang else role, name))
                        kills[-1].killed = float("inf") if hang else kills[-1].at
                        if hang:
                            hung[worker] = pid, kills[-1]
                    except Exception as exc:  # the worker went meanwhile
                        print(f"{'hang' if hang else 'kill'} of {worker} skipped: {type(exc).__name__}: {exc}", flush=True)
                next_kill = time.monotonic() + rng.expovariate(1 / kill_every)
            minute = int((now - start) // 60)
            if minute > samples[-1][0]:
                samples.append((minute, *sample()))
                m, rss, threads, processes = samples[-1]
                state = run.state()
                print(f"minute {m}: rss {rss:.0f} MB, {threads} threads, {processes} processes, "
                      f"step {state['step']} ({state['status']}), kills {len(kills)}", flush=True)
            time.sleep(min(0.2, max(0.0, min(next_kill, end) - time.monotonic())))
        ended = time.monotonic()
        rate = tokens_per_second(stamps, start, ended)
        for pid, hang in hung.values():  # still hung at the end: its nanny restarts it, the cluster closes
            os.kill(pid, signal.SIGKILL)
            hang.killed = time.monotonic()
        samples.append((minutes, *sample()))
        live = {s["stage"]: len(s["peers"]) for s in run.state()["stages"]}
        print(f"live peers per stage at the end: {live}", flush=True)
        run.stop()
        summary = run.wait(180)
        print(f"run {summary.get('status')} at step {summary.get('steps')} {summary.get('error', '')}", flush=True)
    samples.append((-1, *sample()))  # after the cluster closed
    return kills, stamps, rate, samples, ended


def recoveries(kills: list[Kill], stamps: Stamps) -> None:
    """Fill each fault's seconds to the next step and to its replacement's first hop, and a hung
    worker's seconds to its eviction. A peer lost to a fault is replaced on a restarted worker or a
    spare (a hung one's as soon as it is evicted, before its worker is killed): in fault order, each
    peer's fault takes the first join after it that no earlier one took, and its replacement is that
    join's peer (its seconds to serve count from the fault); a trainer's is itself, restarted under
    its name, and takes no join. (Until 2026-11-27 a hung peer's worker was the one to replace it,
    and joins were matched from the SIGKILL.)"""
    joins = [(t, e["value"].split(" serves ")[-1]) for t, e in stamps.events
             if e["type"] == "setting" and e["name"] == "worker_joined"]
    for kill in sorted(kills, key=lambda k: k.at):
        step = stamps.after(kill.at, lambda e: e["type"] == "step")
        kill.next_step = None if step is None else step[0] - kill.at
        if kill.role.startswith("hung"):
            out = stamps.after(kill.at, lambda e, n=kill.name: (e["type"] == "peer" and e["peer"] == n and e["state"] == "killed")
                               or (e["type"] == "setting" and e["name"] == "trainer_lost" and e["value"].startswith(n + "#")))
            kill.evicted = None if out is None else out[0] - kill.at
        trainer = kill.role.endswith("trainer")
        joined = None if trainer else next((j for j in joins if j[0] >= kill.at), None)
        if joined is not None:
            joins.remove(joined)
        kill.replacement = kill.name if trainer else None if joined is None else joined[1]
        if kill.replacement is not None:
            hop = stamps.after(kill.at, lambda e, r=kill.replacement: e["type"] == "hop"
                               and (e["trainer"] == r if trainer else e["peer"] == r))
            kill.serving = None if hop is None else hop[0] - kill.at


def accounting(stamps: Stamps, ended: float) -> tuple[int, int, float]:
    """(samples lost, samples doubled, longest gap between steps in s) over every committed step;
    the last step to the end of the chaos counts as a gap too (a run that stalls for good)."""
    cfg = config()
    steps = [(t, e) for t, e in stamps.events if e["type"] == "step"]
    lost = sum(max(0, cfg.global_batch - s) for _, e in steps for s in e["stage_samples"])
    doubled = sum(max(0, s - cfg.global_batch) for _, e in steps for s in e["stage_samples"])
    gaps = [b[0] - a[0] for a, b in zip(steps, steps[1:])] + ([ended - steps[-1][0]] if steps else [])
    return lost, doubled, max(gaps, default=float("inf"))


def membership(stamps: Stamps) -> str:
    """How many peers served, and how fast the run stepped with each count: seconds at each count
    of live peers (from the peer events, from the first step on) and steps per second then. On
    one machine's cores a peer more slows the step: a run that grows under churn loses throughput
    that is not the faults'."""
    live: set[str] = set()
    seconds: dict[int, float] = {}
    steps: dict[int, int] = {}
    last = None  # when the previous event came, from the first step on
    for t, e in stamps.events:
        if last is not None:
            seconds[len(live)] = seconds.get(len(live), 0.0) + t - last
        if last is not None or e["type"] == "step":
            last = t
        if e["type"] == "step":
            steps[len(live)] = steps.get(len(live), 0) + 1
        elif e["type"] == "peer" and e["state"] == "joined":  # (`Stamps` keeps no "alive" events)
            live.add(e["peer"])
        elif e["type"] == "peer" and e["state"] in ("killed", "moved"):
            live.discard(e["peer"])
    total = sum(seconds.values()) or float("nan")
    mean = sum(n * s for n, s in seconds.items()) / total
    return (f"live peers: time-weighted mean {mean:.2f}; " + ", ".join(
        f"{n}: {s / total:.0%} of the time at {steps.get(n, 0) / s:.1f} steps/s" for n, s in sorted(seconds.items()) if s > 1))


def rss_growth(samples: list[tuple[float, float, int, int]], minutes: float, window: int = 5) -> float:
    """RSS growth over the second half of the run: the median of the last `window` minute samples
    over the median of the `window` from the half-way minute on. RSS swings by a tenth as workers
    die and restart, so one sample against another measures the swing, not a leak."""
    second_half = [rss for minute, rss, _, _ in samples if minute >= minutes / 2]
    if not second_half:
        return float("nan")
    first, last = second_half[:window], second_half[-window:]
    return statistics.median(last) / statistics.median(first) - 1


def _seconds(values: list[float | None]) -> str:
    known = [v for v in values if v is not None]
    missing = len(values) - len(known)
    text = f"median {statistics.median(known):.2f} s, worst {max(known):.2f} s" if known else "none measured"
    return text + (f" ({missing} never)" if missing else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="minutes of chaos")
    parser.add_argument("--kill-every", type=float, default=10.0, help="mean seconds between faults")
    parser.add_argument("--hang-share", type=float, default=0.25,
                        help="share of the faults that SIGSTOP the worker instead of killing it")
    parser.add_argument("--hang-seconds", type=float, default=30.0, help="seconds a hung worker stays hung")
    parser.add_argument("--baseline-minutes", type=float, default=2.0,
                        help="minutes of the fault-free run (0: none, and efficiency=nan)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--run-dir", default=None, help="keep the chaos run's events here (events.jsonl)")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    print(f"load average at start: {os.getloadavg()}", flush=True)
    fault_free = baseline(args.baseline_minutes) if args.baseline_minutes > 0 else float("nan")
    print(f"fault-free: {fault_free:,.0f} tokens/s over {args.baseline_minutes:g} min", flush=True)
    if not 0 <= args.hang_share <= 1 or args.hang_seconds <= 0:
        parser.error(f"--hang-share must be in [0, 1] and --hang-seconds > 0, not {args.hang_share} and {args.hang_seconds}")
    kills, stamps, rate, samples, ended = chaos(args.minutes, args.kill_every, rng, args.hang_share, args.hang_seconds,
                                         args.run_dir)
    recoveries(kills, stamps)
    lost, doubled, longest = accounting(stamps, ended)
    for kill in kills:
        print(f"fault {kill.role} {kill.name}: next step {kill.next_step}, replacement {kill.replacement} serving "
              f"{kill.serving}" + (f", evicted {kill.evicted}" if kill.role.startswith("hung") else ""))
    settings = [e for _, e in stamps.events if e["type"] == "setting"]
    unused = [e["value"] for e in settings if e["name"] == "worker_unused"]
    print(f"joins {sum(e['name'] == 'worker_joined' for e in settings)}, workers left unused {len(unused)}"
          + "".join(f"\n  unused: {reason[:200]}" for reason in unused[:5]))
    roles = ("peer", "trainer", "hung peer", "hung trainer")
    print(f"faults {len(kills)} (" + ", ".join(f"{sum(k.role == r for k in kills)} {r}" for r in roles)
          + f"); to the next step: {_seconds([k.next_step for k in kills])}; to the replacement serving: "
          f"{_seconds([k.serving for k in kills])}")
    for role in roles[2:]:
        if any(k.role == role for k in kills):
            print(f"{role}s, SIGSTOP to eviction: {_seconds([k.evicted for k in kills if k.role == role])}")
    start, end = samples[0], samples[-2]
    print(membership(stamps))
    print(f"threads {start[2]} -> {end[2]}, processes {start[3]} -> {end[3]} (after the cluster closed: "
          f"{samples[-1][3]} processes)")
    growth = rss_growth(samples[:-1], args.minutes)
    efficiency = rate / fault_free if fault_free else 0.0  # nan without a baseline
    recovery = statistics.median([k.next_step for k in kills if k.next_step is not None] or [float("inf")])
    print(f"chaos: {rate:,.0f} tokens/s; load average at end: {os.getloadavg()}")
    print(f"chaos minutes={args.minutes:g} kills={len(kills)} efficiency={efficiency:.3f} lost={lost} doubled={doubled} "
          f"longest_gap_s={longest:.2f} median_recovery_s={recovery:.2f} rss_growth_last_half={growth:.3f}")


if __name__ == "__main__":
    main()
