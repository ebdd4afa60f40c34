"""Where one step's time goes: nano 2 stages x 1 peer, in-process and on Dask, from the events.

The workload of `benchmarks/pipeline.py` (nano, seq_len 128, global batch 32, microbatch 16, 2
trainers, 1 torch thread per peer) runs in-process and on Dask, alternating, `--repeats` times;
steps 2.. of each run are read from its events (step 1 and start-up are left out):

* per hop (s0 forward, s1 loss = forward + loss + backward, s0 backward), from the hop events'
  `timing`: the trainer's round trip, the peer's queue wait and compute, the transport (the
  round trip less queue and compute), and over Dask the transport's parts: the wait
  for a call thread (dispatch), the request's way to the actor (request: serialization, wire,
  the worker's event loop), the actor's own await and return (actor), the reply's way back
  (reply) and the rest (rest: handing the result to the trainer's thread);
* per step boundary, from the step events' `boundary`: each request sent to the peers (wall
  seconds, and the slowest peer's queue + compute in it), the coordinator's reduction, its work
  between the requests (checks, commit, events: the whole boundary less the parts), the whole
  boundary, the time from the step's last hop to the boundary's start (the trainer's `finish`
  reaching the coordinator) and the step period.

For reference, per hop: Dask's serialization + deserialization of that hop's request and reply
(measured here in one process, on tensors of the same shapes) and a raw TCP round trip of the
same bytes out and back between two processes (`transfer.RawTcp`). Medians over all hops and
boundaries of all repeats; the load average is printed before and after.

    python benchmarks/step_breakdown.py [--steps 20] [--repeats 3] [--trainers 2]

Last line: step_breakdown inprocess_boundary_ms=<x> dask_boundary_ms=<y> dask_hop_transport_ms=<z>
raw_tcp_ms=<w> (hop transport: the median of a Dask hop's seconds beyond its peer's queue and
compute, summed over the three hops; raw TCP: their raw round trips, summed likewise).
"""

from __future__ import annotations

import os
import statistics
from collections import defaultdict

import torch
from overhead import workload_config, workload_parser
from transfer import RawTcp, serialization_ms

import labkit
from labkit.backends.dask.connect import connect
from labkit.config import RunConfig
from labkit.events import Event
from labkit.wire import get_codec

HOPS = ("s0 forward", "s1 loss", "s0 backward")
HOP_PARTS = ("total", "queue", "compute", "transport", "dispatch", "request", "actor", "reply", "rest")
BACKENDS = ("in-process", "dask")


def hop_kind(e: Event) -> str:
    """Which of HOPS the hop event `e` is (2 stages: stage 1's forward is the loss request)."""
    return f"s{e['stage']} " + ("backward" if e["direction"] == "backward" else "loss" if e["stage"] == 1 else "forward")


def hop_parts(e: Event) -> dict[str, float]:
    """A hop's seconds split by its `timing` (parts a transport does not measure are 0)."""
    t = e["timing"]
    parts = {"total": e["seconds"], "queue": t["queue"], "compute": t["compute"]}
    parts |= {k: t.get(k, 0.0) for k in ("dispatch", "request", "reply")}
    parts["actor"] = t["served"] - t["queue"] - t["compute"] if "served" in t else 0.0
    parts["rest"] = e["seconds"] - sum(v for k, v in parts.items() if k != "total")
    parts["transport"] = e["seconds"] - t["queue"] - t["compute"]  # dispatch + request + actor + reply + rest
    return parts


def boundary_parts(steps: list[Event], hops: list[Event]) -> list[dict[str, float]]:
    """Per step from the second on: each boundary request's wall seconds ("gradients", ...) and
    its slowest peer's ("gradients peer", ...), the whole boundary, the last hop -> boundary
    start latency and the step period."""
    out = []
    for before, step in zip(steps, steps[1:]):
        b = step["boundary"]
        start = step["t"] - b["total"]
        last_hop = max(h["t"] for h in hops if before["t"] < h["t"] <= start)
        parts = dict(b["seconds"]) | {f"{k} peer": v for k, v in b["peer_seconds"].items()}
        between = b["total"] - sum(b["seconds"].values())
        out.append(parts | {"between requests": between, "boundary": b["total"], "last hop -> boundary": start - last_hop,
                            "step period": step["t"] - before["t"]})
    return out


def hop_messages(cfg: RunConfig) -> dict[str, tuple[tuple, object]]:
    """Per hop: the actor call's arguments and its reply, as a trainer and a peer send them."""
    m, seq, d = cfg.microbatch, cfg.model.seq_len, cfg.model.d_model
    codec = cfg.compression.codec
    ids = torch.randint(cfg.model.vocab_size, (m, seq))
    acts = get_codec(codec).encode(torch.randn(m, seq, d))
    timing = dict.fromkeys(("queue", "compute", "arrived", "left"), 0.0)
    return {"s0 forward": (("forward", 0, ids, True, codec), (acts, timing)),
            "s1 loss": (("loss", 0, acts, ids, 1.0, True, m, codec), ((1.0, acts), timing)),
            "s0 backward": (("backward", 0, acts, True, m, codec), (None, timing))}


def payload_bytes(obj: object) -> int:
    """Tensor bytes in `obj` (an Encoded's payload, a raw tensor, inside tuples)."""
    if isinstance(obj, tuple):
        return sum(payload_bytes(o) for o in obj)
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    return getattr(obj, "nbytes", 0)


def references(cfg: RunConfig, repeats: int = 50) -> dict[str, dict[str, float]]:
    """Per hop: serialization + deserialization ms of request and reply, raw TCP round trip ms."""
    raw, out = RawTcp(), {}
    try:
        for kind, (request, reply) in hop_messages(cfg).items():
            size, back = payload_bytes(request), payload_bytes(reply)
            raw.round_trips(5, size, back)  # warm-up
            out[kind] = {"serialization": serialization_ms(request, repeats) + serialization_ms((reply,), repeats),
                         "raw TCP": raw.round_trips(repeats, size, back) / repeats * 1e3, "bytes": size + back}
    finally:
        raw.close()
    return out


def row(name: str, values: dict, keys: list) -> str:
    """A markdown table row: `name`, then the median of each `values[key]` in ms."""
    cells = [f"{statistics.median(values[k]) * 1e3:.1f}" if values.get(k) else "" for k in keys]
    return f"| {name} | " + " | ".join(cells) + " |"


def run_events(cfg: RunConfig, **launch: str) -> tuple[list[Event], list[Event]]:
    """The step and hop events of one finished run of `cfg`."""
    run = labkit.launch(cfg, **launch)
    summary = run.wait()
    assert summary["status"] == "finished", summary
    return run.events.history("step"), run.events.history("hop")


def main() -> None:
    parser = workload_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--trainers", type=int, default=2)
    parser.set_defaults(steps=20)
    args = parser.parse_args()
    cfg = workload_config(args, stages=2, peers=1, trainers=args.trainers, threads=1)
    torch.set_num_threads(1)
    loads = [os.getloadavg()]
    hops: dict[tuple[str, str, str], list[float]] = defaultdict(list)  # (hop, backend, part) -> seconds
    bounds: dict[tuple[str, str], list[float]] = defaultdict(list)  # (part, backend) -> seconds
    client, cluster = connect(None, cfg)
    try:
        for _ in range(args.repeats):
            for backend in BACKENDS:
                launch = {"backend": "dask", "scheduler": cluster.scheduler_address} if backend == "dask" else {}
                steps, all_hops = run_events(cfg, **launch)
                for e in all_hops:
                    if e["t"] > steps[0]["t"]:
                        for part, v in hop_parts(e).items():
                            hops[hop_kind(e), backend, part].append(v)
                for parts in boundary_parts(steps, all_hops):
                    for part, v in parts.items():
                        bounds[part, backend].append(v)
    finally:
        client.close()
        cluster.close()
    refs = references(cfg)
    loads.append(os.getloadavg())
    print(f"model={args.size} seq_len={args.seq_len} global_batch={args.global_batch} microbatch={args.microbatch} "
          f"steps={args.steps} stages=2 peers=1 trainers={args.trainers} repeats={args.repeats}; load average "
          f"{loads[0][0]:.1f} -> {loads[1][0]:.1f} (5 min {loads[0][1]:.1f} -> {loads[1][1]:.1f})")
    print("\nPer hop, median ms (in-process | Dask):\n")
    keys = [(kind, backend) for kind in HOPS for backend in BACKENDS]
    print("| part | " + " | ".join(f"{k} {'in-proc' if b == 'in-process' else 'Dask'}" for k, b in keys) + " |")
    print("| --- |" + " --- |" * len(keys))
    for part in HOP_PARTS:
        print(row(part, {(k, b): hops[k, b, part] for k, b in keys}, keys))
    for ref in ("serialization", "raw TCP"):
        print(f"| {ref} (reference) | " + " | ".join(f"{refs[k][ref]:.2f}" if b == "dask" else "" for k, b in keys) + " |")
    print("| bytes out + back | " + " | ".join(f"{refs[k]['bytes']:,}" for k, _ in keys) + " |")
    print("\nPer step boundary (steps 2..), median ms:\n")
    print("| part | in-process | Dask |\n| --- | --- | --- |")
    for part in dict.fromkeys(p for p, _ in bounds):
        print(row(part, {b: bounds[part, b] for b in BACKENDS}, list(BACKENDS)))
    transport = sum(statistics.median(hops[k, "dask", "transport"]) for k in HOPS)
    print(f"\nstep_breakdown inprocess_boundary_ms={statistics.median(bounds['boundary', 'in-process']) * 1e3:.1f} "
          f"dask_boundary_ms={statistics.median(bounds['boundary', 'dask']) * 1e3:.1f} "
          f"dask_hop_transport_ms={transport * 1e3:.1f} raw_tcp_ms={sum(refs[k]['raw TCP'] for k in HOPS):.2f}")


if __name__ == "__main__":
    main()
