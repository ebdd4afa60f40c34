"""A layer profile of the real model on the device in use (the augmented graph of ATOM's §III-D):
per layer, what it holds on the device, its forward, backward and host -> device load times, and
the tensor it hands on.

Transformer blocks have identical shapes, so every block gets the median of the blocks' timings:
the partition search then sees identical blocks, which is what shrinks it.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch

from labkit.model import Stage
from labkit.plan.atom_profile import LayerCost
from labkit.executors.atom.device import DeviceBudget, Loader, nbytes
from labkit.executors.atom.layers import layer_names, layer_tensors, run_layer, skeleton


def _timed(fn: Callable[[], object], device: torch.device, repeats: int) -> float:
    """Median seconds of `fn` over `repeats` runs, after one warm-up (synchronizing on CUDA)."""
    def once() -> float:
        start = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return time.perf_counter() - start
    once()
    return statistics.median(once() for _ in range(repeats))


def measure_profile(model: Stage, device: torch.device | str, microbatch: int, repeats: int = 3) -> tuple[LayerCost, ...]:
    """Profile every layer of `model` (the whole model, on the host) for microbatches of
    `microbatch` sequences, loading through the swap executor's own `Loader`. `param_bytes` is
    what a swap moves (parameters and buffers); `memory` adds the parameters' gradients: what the
    executor places for the layer (activations in flight are counted per run: `flow_bytes`)."""
    device = torch.device(device)
    host_params = dict(model.named_parameters())
    bare = skeleton(model)
    loader = Loader(device, DeviceBudget(2**62))
    x: torch.Tensor = torch.randint(0, model.cfg.vocab_size, (microbatch, model.cfg.seq_len), device=device)
    rows: list[dict[str, object]] = []
    try:
        for layer in layer_names(model):
            host = layer_tensors(model, layer)
            loads = []
            for _ in range(repeats + 1):  # the first is a warm-up
                loaded = loader.ready(loader.load(0, host))
                loads.append(loaded.end - loaded.start)
                loader.release(loaded)
            tensors = loader.ready(loader.load(0, host)).tensors
            with torch.no_grad():
                out = run_layer(bare, layer, tensors, x)
            fwd_s = _timed(lambda: run_layer(bare, layer, tensors, x), device, repeats)
            grad_out = torch.ones_like(out)

            def forward_backward() -> None:
                leaves = {n: t.detach().requires_grad_(n in host_params) for n, t in tensors.items()}
                inp = x.detach().requires_grad_(x.is_floating_point())
                run_layer(bare, layer, leaves, inp).backward(grad_out)
            bwd_s = max(0.0, _timed(forward_backward, device, repeats) - fwd_s)
            moved = nbytes(host.values())
            rows.append(dict(name=layer, kind=layer.rstrip("0123456789"),
                             memory=float(moved + nbytes(t for n, t in host.items() if n in host_params)),
                             param_bytes=float(moved), fwd_s=fwd_s, bwd_s=bwd_s, load_s=statistics.median(loads[1:]),
                             out_bytes=float(nbytes([out]))))
            x = out
    finally:
        loader.close()
    blocks = [r for r in rows if r["kind"] == "block"]
    for key in ("fwd_s", "bwd_s", "load_s"):
        typical = statistics.median(float(r[key]) for r in blocks)
        for r in blocks:
            r[key] = typical
    return tuple(LayerCost(**r) for r in rows)


def flow_bytes(profile: tuple[LayerCost, ...], accumulation: int, target_bytes: int) -> float:
    """The most activation bytes a swap replica counts on the device at once: in a backward turn,
    the C inputs, the C gradients arriving and the C gradients leaving, each at most the largest
    tensor a layer hands to another (the head's logits stay inside the last turn), plus the C
    microbatches' targets (`target_bytes` each)."""
    return accumulation * (3.0 * max(layer.out_bytes for layer in profile[:-1]) + target_bytes)
