"""ATOM's swap executor (the ATOM paper, §III-C) on the machine at hand: how busy the compute stream is
while sub-models swap through a device budget, with the next sub-model prefetched and without,
and what an iteration costs against the same model held on the device whole.

Three configurations of `SwapReplica` train the same host model on the same microbatches:

* prefetch: the model cut by `partition(..., together=True)` to fit `--budget-fraction` of the
  whole model's parameters and gradients (the budget a run gets from `device_budget`), the next
  sub-model loading while the current one computes;
* no prefetch: the same cut and budget, each sub-model loaded only when its turn comes;
* resident: one sub-model holding every layer, in a budget that holds it all: loaded by the first
  iteration after a step and resident for the rest of the step (no swaps, no recompute).

A measurement is one step's worth of work without the optimizer (the same host-side work in all
three): a cold first iteration (the swapped cases load sub-model 0, the resident case the whole
model), then `--iterations` timed iterations, then `release_all()` as a step does. Repeats
alternate the order of the three (ABC, CBA, ...) to cancel drift on a shared machine; medians,
and the fastest step of each, which other jobs' bursts (seconds long, so they hit one measurement
and spare the next) can only slow down.

busy = the compute spans' seconds / the window from the first load or compute start to the last
compute end, over the timed iterations. atom_vs_resident = resident seconds per iteration /
prefetch seconds per iteration: 1.0 means swapping costs nothing, 0.8 that a swapped iteration
takes 1.25 times as long as a resident one.

On the CPU a "load" is a host -> host copy into a separate buffer (the loader thread's clone), not
a PCIe transfer, so the CPU busy fraction says little about what a GPU would see.

    python benchmarks/atom.py [--size small] [--budget-fraction 0.5] [--repeats 5] [--device cpu]

Last line: `atom_busy=<busy with prefetch> atom_vs_resident=<resident s / prefetch s per iteration>`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from dataclasses import dataclass, replace

import torch

from labkit import AtomConfig, DataConfig, ModelConfig, RunConfig
from labkit.config import MODEL_SIZES
from labkit.data import WindowSampler, load_corpus
from labkit.model import Stage
from labkit.plan.atom_partition import partition
from labkit.executors.atom.profile import measure_profile
from labkit.executors.atom.engine import device_budget
from labkit.executors.atom.swap import SwapReplica, SwapSpan
from labkit.runtime.reference import reference_model

Batches = list[tuple[torch.Tensor, torch.Tensor]]


@dataclass(frozen=True)
class Measurement:
    """One step's worth of iterations of one configuration."""

    cold_s: float  # the first iteration after a step, which loads what the step starts from
    seconds: float  # mean seconds per timed iteration
    busy: float  # compute seconds / window seconds over the timed iterations
    load_s: float  # seconds of loading per timed iteration (overlapped with compute or not)


class Configuration:
    """A named `SwapReplica` of the shared host model and the spans it reports, measured step after step."""

    def __init__(self, name: str, model: Stage, device: str, sizes: tuple[int, ...], budget: int,
                 prefetch: bool) -> None:
        self.name = name
        self.spans: list[SwapSpan] = []
        self.replica = SwapReplica(model, sizes, device, budget, prefetch, on_span=self.spans.append)
        self.runs: list[Measurement] = []

    def measure(self, iterations: list[Batches], scale: float) -> Measurement:
        """Run `iterations` (the first one cold, left out of the timed figures), then drop every
        device copy and the host gradients, as an optimizer step would."""
        device = self.replica.device
        walls: list[float] = []
        timelines: list[tuple[float, float, float]] = []
        for index, batches in enumerate(iterations):
            self.spans.clear()
            _sync(device)
            start = time.perf_counter()
            self.replica.iteration(batches, scale)
            _sync(device)
            walls.append(time.perf_counter() - start)
            if index > 0:
                timelines.append(_timeline(self.spans))
        self.replica.release_all()
        self.replica.model.zero_grad(set_to_none=True)
        compute, window, load = (sum(column) for column in zip(*timelines))
        timed = len(timelines)
        run = Measurement(walls[0], sum(walls[1:]) / timed, compute / window, load / timed)
        self.runs.append(run)
        return run

    def median(self, field: str) -> float:
        return statistics.median(getattr(run, field) for run in self.runs)

    def fastest(self) -> float:
        return min(run.seconds for run in self.runs)


def _timeline(spans: list[SwapSpan]) -> tuple[float, float, float]:
    """One iteration's compute seconds, its window (first load or compute start to last compute
    end) and its loading seconds."""
    loads = [(s.load_start, s.load_end) for s in spans if s.load_start is not None and s.load_end is not None]
    first = min([s.compute_start for s in spans] + [start for start, _ in loads])
    return (sum(s.compute_end - s.compute_start for s in spans), max(s.compute_end for s in spans) - first,
            sum(end - start for start, end in loads))


def _sync(device: torch.device) -> None:
    """Wait for the device's queued work, so wall times cover it."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _mb(nbytes: float) -> str:
    return f"{nbytes / 1e6:,.1f} MB"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="small", choices=sorted(MODEL_SIZES),
                        help="labkit model size (small: 12 layers, d=768, GPT-2-small-sized)")
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--microbatch", type=int, default=2, help="sequences per microbatch")
    parser.add_argument("--accumulation", type=int, default=2, help="C: microbatches run forward before backward")
    parser.add_argument("--budget-fraction", type=float, default=0.5,
                        help="device budget as a fraction of the whole model's parameters and gradients")
    parser.add_argument("--iterations", type=int, default=3, help="timed iterations per step, after one cold one")
    parser.add_argument("--repeats", type=int, default=5, help="steps measured per configuration; medians reported")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads for compute (the loader thread copies beside them)")
    args = parser.parse_args()
    if args.iterations < 1 or args.repeats < 1 or not args.budget_fraction > 0:
        parser.error("--iterations and --repeats must be >= 1 and --budget-fraction > 0")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no CUDA device here")
    return args


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    c = args.accumulation
    cfg = RunConfig(model=ModelConfig(size=args.size, seq_len=args.seq_len), data=DataConfig(max_bytes=8_000_000),
                    microbatch=args.microbatch, global_batch=args.microbatch * c, eval_every=0)
    model = reference_model(cfg)
    print(f"profiling {args.size} ({sum(p.numel() for p in model.parameters()):,} parameters) on {args.device} ...",
          flush=True)
    profile = measure_profile(model, args.device, args.microbatch)
    whole = sum(layer.memory for layer in profile)
    atom = AtomConfig(budget_mb=args.budget_fraction * whole / 1e6, accumulation=c, device=args.device)
    try:
        budget, for_submodels = device_budget(cfg.replace(executor=atom), profile)
    except ValueError as exc:
        least, _ = device_budget(cfg.replace(executor=replace(atom, budget_mb=None)), profile)
        raise SystemExit(f"--budget-fraction {args.budget_fraction} of the model's {_mb(whole)} of parameters and "
                         f"gradients is infeasible: {exc}\nthe least budget, {_mb(least)}, is --budget-fraction "
                         f"{least / whole:.3f}") from exc
    flow = budget - for_submodels
    plan = partition(profile, for_submodels, c, together=True)
    if len(plan.sizes) == 1:
        print("note: the budget holds the whole model, so the swapped cases do not swap")
    all_tensors = sum(t.numel() * t.element_size() for t in [*model.parameters(), *model.buffers()])
    configurations = [
        Configuration("prefetch", model, args.device, plan.sizes, budget, prefetch=True),
        Configuration("no prefetch", model, args.device, plan.sizes, budget, prefetch=False),
        # parameters, buffers and gradients, and the activations in flight
        Configuration("resident", model, args.device, (len(profile),), 2 * all_tensors + int(flow), prefetch=True),
    ]
    sampler = WindowSampler(load_corpus(cfg.data).train, cfg.model.seq_len, cfg.seed)
    iterations = [[sampler.batch(0, i * c + j, args.microbatch) for j in range(c)] for i in range(args.iterations + 1)]
    scale = 1.0 / (cfg.model.seq_len * cfg.global_batch)
    print(f"model {_mb(whole)} (parameters and gradients), budget {_mb(budget)} ({_mb(flow)} for activations in "
          f"flight), sub-model sizes {list(plan.sizes)} of layers {profile[0].name}..{profile[-1].name}", flush=True)
    started = time.perf_counter()
    try:
        for repeat in range(args.repeats):
            for conf in configurations if repeat % 2 == 0 else configurations[::-1]:
                run = conf.measure(iterations, scale)
                print(f"repeat {repeat + 1}/{args.repeats} {conf.name:>11}: {run.seconds:.3f} s/iteration "
                      f"(cold {run.cold_s:.3f} s), busy {run.busy:.3f}", flush=True)
    finally:
        for conf in configurations:
            conf.replica.close()
    prefetch, _, resident = configurations
    print(f"\nmodel={args.size} seq_len={args.seq_len} microbatch={args.microbatch} accumulation={c} "
          f"iterations={args.iterations} repeats={args.repeats} threads={args.threads} device={args.device} "
          f"budget_fraction={args.budget_fraction} ({time.perf_counter() - started:.0f} s measuring, load average "
          f"{os.getloadavg()[0]:.1f})")
    print(f"| {'configuration':<13} | {'sizes':<20} | {'budget':>10} | {'peak':>10} | {'s/iteration':>11} | "
          f"{'cold s':>7} | {'load s/it':>9} | {'busy':>5} | {'resident s / this s':>19} |")
    print(f"| {'-' * 13} | {'-' * 20} | {'-' * 10} | {'-' * 10} | {'-' * 11} | {'-' * 7} | {'-' * 9} | {'-' * 5} | "
          f"{'-' * 19} |")
    for conf in configurations:
        replica = conf.replica
        sizes = ",".join(str(len(layers)) for layers in replica.submodels)
        print(f"| {conf.name:<13} | {sizes:<20} | {_mb(replica.budget.limit):>10} | {_mb(replica.budget.peak):>10} | "
              f"{conf.median('seconds'):>11.3f} | {conf.median('cold_s'):>7.3f} | {conf.median('load_s'):>9.4f} | "
              f"{conf.median('busy'):>5.3f} | {resident.median('seconds') / conf.median('seconds'):>19.3f} |")
    paired = [r.seconds / p.seconds for r, p in zip(resident.runs, prefetch.runs)]
    print(f"paired resident/prefetch per repeat: {', '.join(f'{x:.3f}' for x in paired)}")
    print("fastest step, s/iteration: " + ", ".join(f"{conf.name} {conf.fastest():.3f}" for conf in configurations)
          + f"; resident/prefetch {resident.fastest() / prefetch.fastest():.3f}")
    print(f"atom_busy={prefetch.median('busy'):.3f} "
          f"atom_vs_resident={resident.median('seconds') / prefetch.median('seconds'):.3f}")


if __name__ == "__main__":
    main()
