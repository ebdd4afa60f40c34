"""A layer profile of the real model on the device in use (seed 004 §III-D's augmented graph):
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
from labkit.runtime.atom.layers import layer_names, layer_tensors, run_layer


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


def _to_device(tensors: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    if device.type == "cpu":
        return {n: t.detach().clone() for n, t in tensors.items()}
    return {n: t.detach().to(device, non_blocking=True) for n, t in tensors.items()}


def measure_profile(model: Stage, device: torch.device | str, microbatch: int, repeats: int = 3) -> tuple[LayerCost, ...]:
    """Profile every layer of `model` (the whole model, on the host) for microbatches of
    `microbatch` sequences. `memory` counts what the swap executor places on the device for the
    layer: its parameters and their gradients (activations in flight are counted per run:
    `flow_bytes`)."""
    device = torch.device(device)
    seq_len, vocab = model.cfg.seq_len, model.cfg.vocab_size
    host_params = dict(model.named_parameters())
    x: torch.Tensor = torch.randint(0, vocab, (microbatch, seq_len), device=device)
    rows: list[dict[str, object]] = []
    for layer in layer_names(model):
        host = layer_tensors(model, layer)
        params = {n: t for n, t in host.items() if n in host_params}
        param_bytes = sum(t.numel() * t.element_size() for t in params.values())
        load_s = _timed(lambda: _to_device(host, device), device, repeats)
        tensors = _to_device(host, device)
        with torch.no_grad():
            out = run_layer(model, layer, tensors, x)
        fwd_s = _timed(lambda: run_layer(model, layer, tensors, x), device, repeats)
        grad_out = torch.ones_like(out)

        def forward_backward() -> None:
            leaves = {n: t.detach().requires_grad_(n in params) for n, t in tensors.items()}
            inp = x.detach().requires_grad_(x.is_floating_point())
            run_layer(model, layer, leaves, inp).backward(grad_out)
        bwd_s = max(0.0, _timed(forward_backward, device, repeats) - fwd_s)
        rows.append(dict(name=layer, kind=layer.rstrip("0123456789"), memory=float(2 * param_bytes),
                         param_bytes=float(param_bytes), fwd_s=fwd_s, bwd_s=bwd_s, load_s=load_s,
                         out_bytes=float(out.numel() * out.element_size())))
        x = out
    blocks = [r for r in rows if r["kind"] == "block"]
    for key in ("fwd_s", "bwd_s", "load_s"):
        typical = statistics.median(float(r[key]) for r in blocks)
        for r in blocks:
            r[key] = typical
    return tuple(LayerCost(**r) for r in rows)


def flow_bytes(profile: tuple[LayerCost, ...], accumulation: int) -> float:
    """The most activation bytes a swap replica holds on the device at once: in a backward turn,
    the C stashed inputs, the C gradients arriving and the C gradients leaving (the hidden states
    between layers are the largest tensors that cross a cut; the head's logits never do)."""
    return 3.0 * accumulation * max(layer.out_bytes for layer in profile[:-1]) if len(profile) > 1 else 0.0
