"""Emulated worlds at scale on one machine: how many virtual peers train here, and what bounds them.

Each preset world (labkit/sim/presets.py: SWARM's xxlarge priced on T4, V100, RTX3080 and A100
in three regions, trainers in eu) runs on the real runtime with every peer on its virtual device
and behind its links (`RunConfig(world=...)`), training the nano stand-in: `world-64` (4 stages x
16 peers, 16 trainers) in-process and `world-16` (2 x 8, 4 trainers) on Dask (an embedded
cluster: one worker process per peer and trainer). Measured per run: peers, steps, stand-in
tokens/s and the world's microbatches/s (from the step events, the first step excluded), the
CPU the run's processes used while it trained (cores: CPU seconds of this process and its
children from the run's start to its end, over those wall seconds), their peak resident memory
meanwhile (summed, sampled every 0.5 s), the data requests served on
virtual devices and how many overran them. What bounds a run: the virtual devices and links
when no request overran and the CPU is far from the machine's cores; the host otherwise.

    python benchmarks/worlds.py [--steps 4] [--worlds world-64:inprocess,world-16:dask]

Last line: worlds <name>_<backend>_peers=<n> <name>_<backend>_tokens_per_s=<x> <name>_<backend>_overruns=<n> ...
"""

from __future__ import annotations

import argparse
import os
import threading
import time

import psutil

import labkit
from labkit.config import RunConfig
from labkit.runtime.world import world_config


class Usage:
    """CPU seconds and peak summed RSS of this process and its children while it runs."""

    def __init__(self) -> None:
        self.me = psutil.Process(os.getpid())
        self.peak = 0
        self._stop = threading.Event()
        self._cpu0 = self._cpu()
        self._t0 = time.monotonic()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _procs(self) -> list[psutil.Process]:
        return [self.me, *self.me.children(recursive=True)]

    def _cpu(self) -> float:
        total = 0.0
        for p in self._procs():
            try:
                t = p.cpu_times()
                total += t.user + t.system
            except psutil.Error:
                pass
        return total + sum(self.me.cpu_times()[2:4])  # reaped children's times

    def _sample(self) -> None:
        while not self._stop.wait(0.5):
            rss = 0
            for p in self._procs():
                try:
                    rss += p.memory_info().rss
                except psutil.Error:
                    pass
            self.peak = max(self.peak, rss)

    def stop(self) -> tuple[float, float]:
        """(cores used, peak GB)."""
        cpu = self._cpu() - self._cpu0
        wall = time.monotonic() - self._t0
        self._stop.set()
        self._thread.join()
        return cpu / wall, self.peak / 1e9


def run_world(name: str, backend: str, steps: int) -> dict[str, float]:
    cfg = world_config(name, RunConfig(steps=steps, eval_every=0, eval_batches=1))
    started = time.monotonic()
    run = labkit.launch(cfg, backend=backend)
    run.wait_for(event={"type": "run", "state": "started"}, timeout=600)
    usage = Usage()  # from the start of training: a Dask cluster's start-up is not what bounds a run
    summary = run.wait()
    cores, peak = usage.stop()
    if summary["status"] != "finished":
        raise RuntimeError(f"{name} on {backend}: {summary}")
    step_events = run.events.history("step")
    span = step_events[-1]["t"] - step_events[0]["t"]
    return {"peers": sum(cfg.peers_per_stage), "trainers": cfg.trainers, "steps": steps,
            "wall_s": time.monotonic() - started, "tokens_per_s": summary["tokens_per_second"],
            "microbatches_per_s": (len(step_events) - 1) * cfg.microbatches_per_step / span,
            "cores": cores, "peak_gb": peak, "requests": summary["device_requests"],
            "overruns": summary["device_overruns"], "overrun_max_s": summary["device_overrun_seconds_max"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--worlds", default="world-64:inprocess,world-16:dask")
    args = parser.parse_args()
    parts = []
    print("| world | backend | peers | trainers | steps | wall s | stand-in tokens/s | world microbatches/s | CPU cores "
          "| peak GB | requests | overruns (max s) |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for item in args.worlds.split(","):
        name, backend = item.split(":")
        r = run_world(name, backend, args.steps)
        print(f"| {name} | {backend} | {r['peers']} | {r['trainers']} | {r['steps']} | {r['wall_s']:.1f} | "
              f"{r['tokens_per_s']:,.0f} | {r['microbatches_per_s']:.2f} | {r['cores']:.2f} | {r['peak_gb']:.2f} | "
              f"{r['requests']} | {r['overruns']} ({r['overrun_max_s']:.3f}) |", flush=True)
        key = f"{name.replace('-', '')}_{backend}"
        parts += [f"{key}_peers={r['peers']}", f"{key}_tokens_per_s={r['tokens_per_s']:.0f}", f"{key}_overruns={r['overruns']}"]
    print("worlds " + " ".join(parts))


if __name__ == "__main__":
    main()
