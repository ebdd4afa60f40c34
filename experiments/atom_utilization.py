"""ATOM against GPipe and PipeDream in the simulator: ATOM's Figures 14, 15 and 16 in shape.

    PYTHONPATH=. python experiments/atom_utilization.py [--out docs/figures]

GPT-3 sizes of the ATOM paper's Table III (Small ... 6.7B, 13B trimmed to 18 blocks, 175B trimmed to 2),
one microbatch = 1 x 2048 tokens, fp16 values (2 bytes), analytic profiles
(`labkit.sim.atom_profile_model`) at 40 % of the device peak and 12 GB/s PCIe. Devices:
V100-32GB (the ATOM paper's V100 server) and GTX1080Ti (the ATOM paper's medium server, fp32 peak: no tensor
cores). Links: 400 Mb/s, 800 Mb/s and "localhost", taken as 10 Gb/s (the servers' Ethernet line
rate; loopback is at least that), each with 1 ms per send (a gRPC call).

- Fig. 14/15: per result GPU time (seconds per minibatch per GPU) and GPU utilization. ATOM: one
  device, C = 4 (the ATOM paper's degree of gradient accumulation), sub-models from the partition
  search (`labkit.plan.atom_partition.partition`, two neighbours side by side in what the boundary
  tensors leave of the device; the stash on the host, where labkit's executor keeps it), and the
  compute stream's overheads `OVERHEADS` (below); utilization without them is reported beside.
  Where no partition meets the search's constraints, one layer per sub-model (marked forced).
  GPipe: 4 devices, 4 microbatches per iteration; PipeDream: 4 devices, a stream of 32
  microbatches; stages balanced by compute.
- Fig. 16: seconds per global batch of 256 minibatches on 8 and 12 GPUs (2 and 3 pipelines)
  including the all-reduce (ring, over the same links) and the optimizer step.
- §III-C: ATOM's utilization on 175B (2 blocks) for hand-picked sub-models and C = 1, 2, 4, 8.

The overhead model (`labkit.sim.atom.Overheads`): ATOM's compute stream also swaps finished work out
(the ATOM paper, §IV), and labkit's executor copies on its compute thread: every sub-model's
gradients to the host after its backward pass (the host optimizer needs them), the stash out
before a forward pass and back before the backward one. Copies run at 12 GB/s, the PCIe 3.0 x16
rate the profile already loads at (the ATOM paper's servers have PCIe 3.0 x16; device -> pageable
host measured 14.9 GB/s on an H100 host, above that, so the link binds); each sub-model turn
starts 0.566 ms after the previous one ends or its load lands (the executor's median gap between
turns on an H100, `experiments/atom_turn_gap.py`). No kernel launch gaps: a 175B block's kernels
run for milliseconds, far above a launch (~10 us).

Prints markdown tables and writes docs/figures/atom_utilization.json.
"""

from __future__ import annotations

import argparse
import json
import time

from experiments._runs import parse_with_out
from labkit.plan.atom_partition import NoFeasiblePartition, partition
from labkit.sim.atom import Overheads, analytic_profile, atom_timeline, boundary_bytes, resident_bytes, submodel_bytes
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
# 12 GB/s: PCIe 3.0 x16 (the profile's load rate); 0.566 ms: median turn gap, experiments/atom_turn_gap.py on an H100
OVERHEADS = Overheads(copy_bps=12e9, turn_s=0.566e-3)


def searched_sizes(profile: tuple, budget: float) -> tuple[tuple[int, ...], bool]:
    """ATOM's sub-models: the partition search at C = ACCUMULATION with neighbours side by side in
    what the boundary tensors leave of `budget`, and False; or, where no partition meets the
    constraints, one layer per sub-model and True (forced)."""
    try:
        return partition(profile, budget - boundary_bytes(profile, ACCUMULATION), ACCUMULATION, together=True).sizes, False
    except NoFeasiblePartition:
        return (1,) * len(profile), True


def setup(device: str, model: str) -> tuple[tuple, float, tuple[int, ...], bool, tuple[int, ...]]:
    """(profile, device bytes, ATOM sub-models, whether they are forced, pipeline stages) of `model` on `device`."""
    profile = analytic_profile(model, device, 1, SEQ_LEN, layers=MODELS[model])
    budget = DEVICES[device][1] * 1e9
    return profile, budget, *searched_sizes(profile, budget), balanced_stages(profile, PIPELINE)


def fig14(device: str, model: str) -> list[dict]:
    """Per result GPU time and utilization of the three schedules at every link speed."""
    profile, budget, sizes, forced, stages = setup(device, model)
    atom = atom_timeline(profile, sizes, ACCUMULATION, budget_bytes=budget, overheads=OVERHEADS)
    ideal = 100 * atom_timeline(profile, sizes, ACCUMULATION, budget_bytes=budget).mean_utilization
    rows = []
    for link, bps in LINKS.items():
        gpipe = gpipe_timeline(profile, stages, GPIPE_MICROBATCHES, bps, LATENCY_S)
        pipedream = pipedream_timeline(profile, stages, PIPEDREAM_STREAM, bps, LATENCY_S)
        rows += [{"device": device, "model": model, "blocks": len(profile) - 2, "link": link, "schedule": t.schedule,
                  "gpu_s_per_minibatch": t.gpu_s_per_minibatch, "utilization": 100 * t.mean_utilization,
                  "per_device": [100 * u for u in t.utilization], "submodels": list(sizes), "forced": forced,
                  "stages": list(stages), **({"utilization_no_overheads": ideal} if t is atom else {})}
                 for t in (atom, gpipe, pipedream)]
    return rows


def fig16(device: str, model: str) -> list[dict]:
    """Global-batch time on 8 and 12 GPUs at every link speed."""
    profile, budget, sizes, _, stages = setup(device, model)
    rows = []
    for gpus in FIG16_GPUS:
        for link, bps in LINKS.items():
            times = global_batch_time(profile, atom_sizes=sizes, stages=stages, accumulation=ACCUMULATION,
                                      microbatches=GPIPE_MICROBATCHES, gpus=gpus, bandwidth_bps=bps,
                                      latency_s=LATENCY_S, budget_bytes=budget, atom_overheads=OVERHEADS)
            rows += [{"device": device, "model": model, "gpus": gpus, "link": link, "schedule": name,
                      "compute_s": t.compute_s, "allreduce_s": t.allreduce_s, "optimizer_s": t.optimizer_s,
                      "total_s": t.total_s} for name, t in times.items()]
    return rows


def accumulation_sweep() -> list[dict]:
    """ATOM's utilization on 175B (2 blocks) for hand-picked sub-models and several C, with the
    overheads: the embedding alone in sub-model 1 leaves its successor's load uncovered (§III-C).
    None: the largest sub-model and the boundary tensors of C minibatches exceed the device."""
    rows = []
    for device, choices in (("V100-32GB", ((1, 1, 1, 1), (2, 1, 1), (2, 2), (4,))), ("GTX1080Ti", ((1, 1, 1, 1),))):
        profile, budget, *_ = setup(device, "gpt3-175b")
        for sizes in choices:
            fits = [max(submodel_bytes(profile, sizes)) + resident_bytes(profile, c) <= budget for c in SWEEP_C]
            rows.append({"device": device, "submodels": list(sizes), "accumulation": list(SWEEP_C), "utilization": [
                100 * atom_timeline(profile, sizes, c, budget_bytes=budget, overheads=OVERHEADS).utilization[0]
                if ok else None for c, ok in zip(SWEEP_C, fits)]})
    return rows


def print_tables(f14: list[dict], f16: list[dict], sweep: list[dict]) -> None:
    """The three result sets as markdown tables."""
    by14 = {(r["device"], r["model"], r["link"], r["schedule"]): r for r in f14}
    for device in DEVICE_NAMES:
        print(f"\nFig. 14 / 15 on {device}: per result GPU time (s per minibatch per GPU) / mean GPU utilization (%); "
              "ATOM: (utilization without overheads); sub-models marked * forced (no partition meets the constraints)")
        print("| model | link | ATOM | GPipe | PipeDream | ATOM sub-models | stages |\n|---|---|---|---|---|---|---|")
        for model in MODELS:
            for link in LINKS:
                rows = [by14[device, model, link, s] for s in SCHEDULES]
                cells = [f"{r['gpu_s_per_minibatch']:.3f} / {r['utilization']:.1f}" for r in rows]
                cells[0] += f" ({rows[0]['utilization_no_overheads']:.1f})"
                mark = "*" if rows[0]["forced"] else ""
                print(f"| {model} | {link} | " + " | ".join(cells) + f" | {rows[0]['submodels']}{mark} | {rows[0]['stages']} |")
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
