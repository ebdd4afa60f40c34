"""ATOM against GPipe and PipeDream in the simulator: ATOM's Figures 14, 15 and 16 in shape.

    PYTHONPATH=. python experiments/atom_utilization.py [--out docs/figures]

GPT-3 sizes of the ATOM paper's Table III (Small ... 6.7B, 13B trimmed to 18 blocks, 175B trimmed to 2),
one microbatch = 1 x 2048 tokens, fp16 values (2 bytes), analytic profiles
(`labkit.sim.atom_profile_model`) at 40 % of the device peak and 12 GB/s PCIe. Devices:
V100-32GB (the ATOM paper's V100 server) and GTX1080Ti (the ATOM paper's medium server, fp32 peak: no tensor
cores). Links: 400 Mb/s, 800 Mb/s and "localhost", taken as 10 Gb/s (the servers' Ethernet line
rate; loopback is at least that), each with 1 ms per send (a gRPC call).

- Fig. 14/15: per result GPU time (seconds per minibatch per GPU) and GPU utilization. ATOM: one
  device, C = 4 (the ATOM paper's degree of gradient accumulation), sub-models packed greedily so that
  two neighbours and the stash fit the device (a stand-in for the partition search of
  `labkit.plan.atom_partition`). GPipe: 4 devices, 4 microbatches per iteration; PipeDream: 4
  devices, a stream of 32 microbatches; stages balanced by compute.
- Fig. 16: seconds per global batch of 256 minibatches on 8 and 12 GPUs (2 and 3 pipelines)
  including the all-reduce (ring, over the same links) and the optimizer step.
- §III-C: ATOM's utilization on 175B (2 blocks) for hand-picked sub-models and C = 1, 2, 4, 8.

Prints markdown tables and writes docs/figures/atom_utilization.json.
"""

from __future__ import annotations

import argparse
import json
import time

from experiments._runs import parse_with_out
from labkit.sim.atom import analytic_profile, atom_timeline, stash_bytes, submodel_bytes
from labkit.sim.hardware import DEVICES
from labkit.sim.pipelines import (
    SCHEDULES,
    balanced_stages,
    global_batch_time,
    gpipe_timeline,
    pipedream_timeline,
)

MODELS = {"gpt3-small": None, "gpt3-medium": None, "gpt3-large": None, "gpt3-xl": None, "gpt3-2.7b": None,
          "gpt3-6.7b": None, "gpt3-13b": 18, "gpt3-175b": 2}  # name -> blocks kept (None: all)
LINKS = {"400 Mb/s": 400e6, "800 Mb/s": 800e6, "localhost": 10e9}
LATENCY_S = 1e-3
DEVICE_NAMES = ("V100-32GB", "GTX1080Ti")
ACCUMULATION = 4  # the ATOM paper's C
PIPELINE = 4  # GPUs per pipeline
GPIPE_MICROBATCHES = 4
PIPEDREAM_STREAM = 32
SEQ_LEN = 2048
SWEEP_C = (1, 2, 4, 8)
FIG16_MODELS = ("gpt3-xl", "gpt3-175b")
FIG16_GPUS = (8, 12)  # 2 and 3 pipelines of 4
PAPER_UTILIZATION = {"atom": 91.9, "pipedream": 46.3, "gpipe": 18.3}  # Fig. 15, 175B (2 blocks), localhost


def packed_sizes(profile: tuple, budget: float, accumulation: int) -> tuple[int, ...]:
    """Consecutive layers per sub-model, each sub-model as large as fits half of what the stash
    leaves of the budget (so the current and the next fit together)."""
    cap = (budget - stash_bytes(profile, accumulation)) / 2
    sizes, held = [0], 0.0
    for layer in profile:
        if sizes[-1] and held + layer.memory > cap:
            sizes.append(0)
            held = 0.0
        sizes[-1] += 1
        held += layer.memory
    return tuple(sizes)


def setup(device: str, model: str) -> tuple[tuple, float, tuple[int, ...], tuple[int, ...]]:
    """(profile, device bytes, ATOM sub-models, pipeline stages) of `model` on `device`."""
    profile = analytic_profile(model, device, 1, SEQ_LEN, layers=MODELS[model])
    budget = DEVICES[device][1] * 1e9
    return profile, budget, packed_sizes(profile, budget, ACCUMULATION), balanced_stages(profile, PIPELINE)


def fig14(device: str, model: str) -> list[dict]:
    """Per result GPU time and utilization of the three schedules at every link speed."""
    profile, budget, sizes, stages = setup(device, model)
    atom = atom_timeline(profile, sizes, ACCUMULATION, budget_bytes=budget)
    rows = []
    for link, bps in LINKS.items():
        gpipe = gpipe_timeline(profile, stages, GPIPE_MICROBATCHES, bps, LATENCY_S)
        pipedream = pipedream_timeline(profile, stages, PIPEDREAM_STREAM, bps, LATENCY_S)
        rows += [{"device": device, "model": model, "blocks": len(profile) - 2, "link": link, "schedule": t.schedule,
                  "gpu_s_per_minibatch": t.gpu_s_per_minibatch, "utilization": 100 * t.mean_utilization,
                  "per_device": [100 * u for u in t.utilization], "submodels": list(sizes), "stages": list(stages)}
                 for t in (atom, gpipe, pipedream)]
    return rows


def fig16(device: str, model: str) -> list[dict]:
    """Global-batch time on 8 and 12 GPUs at every link speed."""
    profile, budget, sizes, stages = setup(device, model)
    rows = []
    for gpus in FIG16_GPUS:
        for link, bps in LINKS.items():
            times = global_batch_time(profile, atom_sizes=sizes, stages=stages, accumulation=ACCUMULATION,
                                      microbatches=GPIPE_MICROBATCHES, gpus=gpus, bandwidth_bps=bps,
                                      latency_s=LATENCY_S, budget_bytes=budget)
            rows += [{"device": device, "model": model, "gpus": gpus, "link": link, "schedule": name,
                      "compute_s": t.compute_s, "allreduce_s": t.allreduce_s, "optimizer_s": t.optimizer_s,
                      "total_s": t.total_s} for name, t in times.items()]
    return rows


def accumulation_sweep() -> list[dict]:
    """ATOM's utilization on 175B (2 blocks) for hand-picked sub-models and several C: the
    embedding alone in sub-model 1 leaves its successor's load uncovered (§III-C). None: the
    largest sub-model and the stash of C minibatches exceed the device."""
    rows = []
    for device, choices in (("V100-32GB", ((1, 1, 1, 1), (2, 1, 1), (2, 2))), ("GTX1080Ti", ((1, 1, 1, 1),))):
        profile, budget, _, _ = setup(device, "gpt3-175b")
        for sizes in choices:
            fits = [max(submodel_bytes(profile, sizes)) + stash_bytes(profile, c) <= budget for c in SWEEP_C]
            rows.append({"device": device, "submodels": list(sizes), "accumulation": list(SWEEP_C), "utilization": [
                100 * atom_timeline(profile, sizes, c, budget_bytes=budget).utilization[0] if ok else None
                for c, ok in zip(SWEEP_C, fits)]})
    return rows


def print_tables(f14: list[dict], f16: list[dict], sweep: list[dict]) -> None:
    """The three result sets as markdown tables."""
    by14 = {(r["device"], r["model"], r["link"], r["schedule"]): r for r in f14}
    for device in DEVICE_NAMES:
        print(f"\nFig. 14 / 15 on {device}: per result GPU time (s per minibatch per GPU) / mean GPU utilization (%)")
        print("| model | link | ATOM | GPipe | PipeDream | ATOM sub-models | stages |\n|---|---|---|---|---|---|---|")
        for model in MODELS:
            for link in LINKS:
                rows = [by14[device, model, link, s] for s in SCHEDULES]
                cells = [f"{r['gpu_s_per_minibatch']:.3f} / {r['utilization']:.1f}" for r in rows]
                print(f"| {model} | {link} | " + " | ".join(cells) + f" | {rows[0]['submodels']} | {rows[0]['stages']} |")
    print(f"\nFig. 15 paper (175B, 2 blocks, localhost): {PAPER_UTILIZATION}")
    by16 = {(r["device"], r["model"], r["gpus"], r["link"], r["schedule"]): r for r in f16}
    print("\nFig. 16: seconds per global batch of 256, total (compute + all-reduce + optimizer)")
    print("| device | model | GPUs | link | ATOM | GPipe | PipeDream |\n|---|---|---|---|---|---|---|")
    for device in DEVICE_NAMES:
        for model in FIG16_MODELS:
            for gpus in FIG16_GPUS:
                for link in LINKS:
                    rows = [by16[device, model, gpus, link, s] for s in SCHEDULES]
                    cells = [f"{r['total_s']:.0f} ({r['compute_s']:.0f} + {r['allreduce_s']:.0f} + {r['optimizer_s']:.0f})"
                             for r in rows]
                    print(f"| {device} | {model} | {gpus} | {link} | " + " | ".join(cells) + " |")
    print("\n§III-C: ATOM's utilization (%) for 175B (2 blocks) by sub-models and C")
    print("| device | sub-models | " + " | ".join(f"C = {c}" for c in SWEEP_C) + " |\n|---|---|" + "---|" * len(SWEEP_C))
    for r in sweep:
        print(f"| {r['device']} | {r['submodels']} | "
              + " | ".join("does not fit" if u is None else f"{u:.1f}" for u in r["utilization"]) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args, out = parse_with_out(parser)
    start = time.perf_counter()
    f14 = [row for device in DEVICE_NAMES for model in MODELS for row in fig14(device, model)]
    f16 = [row for device in DEVICE_NAMES for model in FIG16_MODELS for row in fig16(device, model)]
    sweep = accumulation_sweep()
    (out / "atom_utilization.json").write_text(json.dumps({"fig14_15": f14, "fig16": f16, "sweep": sweep}))
    print_tables(f14, f16, sweep)
    print(f"\nwall time {time.perf_counter() - start:.1f} s; results in {out / 'atom_utilization.json'}")


if __name__ == "__main__":
    main()
