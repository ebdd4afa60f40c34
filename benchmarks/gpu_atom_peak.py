"""Which tensors make ATOM's swap pass its device budget on CUDA: the failing budget test's run
(`small`, seq_len 512, microbatch 8, C = 4, three iterations) under torch's allocator history, then
the blocks alive at the device's peak, grouped by the labkit line that allocated them.

`tests/gpu/test_atom_cuda.py::test_the_swap_on_cuda_stays_within_its_budget` found the peak 25.7 MB
over the budget plus one turn's working memory; this names what the budget does not count.

    python -m benchmarks.gpu_atom_peak [--top 15] [--out peak.json]
"""

from __future__ import annotations

import argparse
from collections import defaultdict

import torch

from benchmarks.gpu_common import without_cuda, write
from labkit import AtomConfig, DataConfig, ModelConfig, RunConfig
from labkit.data import WindowSampler, load_corpus
from labkit.executors.atom.device import nbytes
from labkit.executors.atom.engine import plan_submodels
from labkit.executors.atom.swap import SwapReplica
from labkit.runtime.reference import reference_model


def _site(frames: list[dict]) -> str:
    """The innermost frame in labkit's own code (or the first frame) that asked for a block."""
    for f in frames:
        if "/labkit/" in f["filename"] and "/torch/" not in f["filename"]:
            return f"{f['filename'].split('/labkit/')[-1]}:{f['line']} {f['name']}"
    return f"{frames[0]['filename'].split('/')[-1]}:{frames[0]['line']} {frames[0]['name']}" if frames else "?"


def live_at_peak(trace: list[dict], freed_on: str) -> tuple[int, dict[int, tuple[int, str]]]:
    """Replay the allocator's trace: the most bytes alive at once, and the blocks alive then."""
    live: dict[int, tuple[int, str]] = {}
    used = peak = 0
    at_peak: dict[int, tuple[int, str]] = {}
    for event in trace:
        if event["action"] == "alloc":
            live[event["addr"]] = (event["size"], _site(event.get("frames", [])))
            used += event["size"]
            if used > peak:
                peak, at_peak = used, dict(live)
        elif event["action"] == freed_on and event["addr"] in live:
            used -= live.pop(event["addr"])[0]
    return peak, at_peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    if without_cuda(args.out, "atom_peak"):
        return
    cfg = RunConfig(model=ModelConfig(size="small", seq_len=512), data=DataConfig(max_bytes=1_000_000), microbatch=8,
                    global_batch=32, eval_every=0, executor=AtomConfig(replicas=1, accumulation=4, device="cuda"))
    model = reference_model(cfg)
    plan = plan_submodels(cfg, model.state_dict(), "cuda")
    sampler = WindowSampler(load_corpus(cfg.data).train, cfg.model.seq_len, cfg.seed)
    batches = [sampler.batch(0, i, cfg.microbatch) for i in range(4)]
    torch.cuda.empty_cache()
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    torch.cuda.memory._record_memory_history(stacks="python", max_entries=500_000)
    replica = SwapReplica(model, plan.sizes, "cuda", plan.budget)
    try:
        for _ in range(3):
            replica.iteration(batches, 1.0 / (cfg.model.seq_len * cfg.global_batch))
        torch.cuda.synchronize()
        snapshot = torch.cuda.memory._snapshot()
        peak = torch.cuda.max_memory_allocated() - base
        counted = replica.budget.peak
    finally:
        replica.close()
        torch.cuda.memory._record_memory_history(enabled=None)
    trace = snapshot["device_traces"][0]
    result: dict[str, object] = {"sizes": list(plan.sizes), "budget": plan.budget, "counted_peak": counted,
                                 "max_memory_allocated": peak, "model_bytes": nbytes(model.parameters()),
                                 "cut_tensor_bytes": cfg.microbatch * cfg.model.seq_len * cfg.model.d_model * 4}
    print(f"sizes {plan.sizes} budget {plan.budget:,} B counted peak {counted:,} B max_memory_allocated {peak:,} B "
          f"(over the budget by {peak - plan.budget:,} B); {len(trace)} trace events")
    for freed_on in ("free_requested", "free_completed"):
        replayed, blocks = live_at_peak(trace, freed_on)
        sites: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        for size, site in blocks.values():
            sites[site][0] += size
            sites[site][1] += 1
        ranked = sorted(sites.items(), key=lambda kv: -kv[1][0])[:args.top]
        print(f"-- freed on {freed_on}: replayed peak {replayed:,} B in {len(blocks)} blocks")
        for site, (size, count) in ranked:
            print(f"   {size / 1e6:9.2f} MB {count:5d} blocks  {site}")
        result[freed_on] = {"peak": replayed, "sites": [[s, b, c] for s, (b, c) in ranked]}
    if args.out:
        write(args.out, "atom_peak", result)


if __name__ == "__main__":
    main()
