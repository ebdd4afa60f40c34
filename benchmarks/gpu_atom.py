"""ATOM's swap on CUDA inside a run: the in-process executor (`RunConfig(executor="atom")`) with
`atom.device="cuda"`, once through the least budget its partition search allows (it swaps) and
once with a budget that holds the whole model (one sub-model, resident after its first load).

From the run's `swap` events: seconds of host -> device loading, how much of it ran while the same
replica computed another sub-model (overlap), and busy = compute seconds / the replica's window.
tokens/s is the run summary's (steps after the first). The device's `max_memory_allocated`,
reset once the partition is chosen (the profile before it measures every layer alone), is set
against replicas x the budget: the budget counts parameters, gradients and cut tensors in flight,
not a turn's working memory (one microbatch's activations inside a sub-model).

    python -m benchmarks.gpu_atom [--size small] [--seq-len 512] [--steps 6] [--out atom.json]
"""

from __future__ import annotations

import argparse

import torch

import labkit
from benchmarks.gpu_common import without_cuda, write
from labkit import AtomConfig, DataConfig, ModelConfig, RunConfig


def overlap(spans: list[dict]) -> dict[str, float]:
    """Loading, computing, their overlap and busy fraction, summed over replicas' `swap` events."""
    load = compute = overlapped = window = 0.0
    for replica in sorted({e["replica"] for e in spans}):
        mine = [e for e in spans if e["replica"] == replica]
        computes = [(e["compute_start"], e["compute_end"]) for e in mine]
        loads = [(e["load_start"], e["load_end"]) for e in mine if e["load_start"] is not None]
        compute += sum(b - a for a, b in computes)
        load += sum(b - a for a, b in loads)
        overlapped += sum(max(0.0, min(b, d) - max(a, c)) for a, b in loads for c, d in computes)
        window += max(b for _, b in computes) - min([a for a, _ in computes] + [a for a, _ in loads])
    return {"load_s": load, "compute_s": compute, "overlap_of_load": overlapped / load if load else 0.0,
            "busy": compute / window if window else 0.0, "loads": sum(e["load_start"] is not None for e in spans)}


def measure(cfg: RunConfig) -> dict[str, object]:
    """Run `cfg` to its end; its partition, throughput, swap timeline and device memory peak."""
    run = labkit.launch(cfg)
    try:
        partition = run.wait_for(event={"type": "setting", "name": "atom_partition"}, timeout=120)["value"]
        torch.cuda.reset_peak_memory_stats()
        summary = run.wait(timeout=300)
    finally:
        run.stop()
        run.wait(timeout=60)
    peak = torch.cuda.max_memory_allocated()
    budget = partition["budget_bytes"]
    return {"status": summary["status"], "sizes": partition["sizes"], "budget_mb": budget / 1e6,
            "model_mb": partition["model_bytes"] / 1e6, "tokens_per_second": summary.get("tokens_per_second"),
            "max_memory_allocated_mb": peak / 1e6, "peak_over_budgets": peak / (cfg.executor.replicas * budget),
            "loss_first": run.events.history("step")[0]["loss"], "loss_last": run.events.history("step")[-1]["loss"],
            **overlap(run.events.history("swap"))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="small")
    parser.add_argument("--seq-len", type=int, default=512)
    parser.add_argument("--microbatch", type=int, default=8)
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--out", default=None, help="a JSON file for the figures")
    args = parser.parse_args()
    if without_cuda(args.out, "atom"):
        return
    model = ModelConfig(size=args.size, seq_len=args.seq_len)
    whole_mb = 3 * 4 * model.num_params() / 1e6 + 1e3  # parameters, gradients, a copy in flight, 1 GB of activations
    cfg = RunConfig(model=model, data=DataConfig(max_bytes=4_000_000), microbatch=args.microbatch,
                    global_batch=args.microbatch * 4 * args.replicas, steps=args.steps, eval_every=0, executor="atom",
                    threads=4)
    rows = {}
    for name, budget_mb in (("swap", None), ("resident", whole_mb)):
        row = measure(cfg.replace(executor=AtomConfig(replicas=args.replicas, accumulation=4, device="cuda",
                                                  budget_mb=budget_mb)))
        rows[name] = row
        print(f"atom {name}: status={row['status']} sizes={row['sizes']} budget={row['budget_mb']:.1f} MB "
              f"(model {row['model_mb']:.1f} MB) tokens/s={row['tokens_per_second'] or 0:,.0f} "
              f"load_s={row['load_s']:.3f} compute_s={row['compute_s']:.3f} overlap_of_load={row['overlap_of_load']:.2f} "
              f"busy={row['busy']:.2f} loads={row['loads']} max_memory_allocated={row['max_memory_allocated_mb']:.1f} MB "
              f"= {row['peak_over_budgets']:.2f} x {args.replicas} budgets loss {row['loss_first']:.3f} -> "
              f"{row['loss_last']:.3f}", flush=True)
    write(args.out, "atom", {"size": args.size, "seq_len": args.seq_len, "microbatch": args.microbatch,
                             "replicas": args.replicas, "steps": args.steps, "accumulation": 4, "runs": rows})


if __name__ == "__main__":
    main()
