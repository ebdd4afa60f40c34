"""One ATOM replica (the ATOM paper, §III-C): the whole model in host memory, trained through a device
budget smaller than the model by swapping sub-models in and out.

An iteration runs C microbatches forward through sub-models 1..K (keeping each sub-model's
input, the cut tensor, in host memory), then backward K..1, recomputing each sub-model's forward
from its stashed input. While sub-model k computes, k+1 (forward) or k-1 (backward) is loading. Finished sub-models
are dropped, except the locality of Figure 12: the last of forward is the first of backward, the
one before it stays for backward's next turn, and the first stays for the next iteration's
forward. Gradients are added to the host's `.grad`; the optimizer steps on the host.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from labkit.model import Stage
from labkit.executors.atom.device import DeviceBudget, Loaded, Loader, nbytes
from labkit.executors.atom.layers import layer_names, run_submodel, skeleton, submodel_tensors


class Interrupted(RuntimeError):
    """`interrupt()` was called: the iteration stopped between two sub-model turns."""


@dataclass(frozen=True)
class SwapSpan:
    """One sub-model's turn on the device: its load and its compute (seconds of the run's clock)."""

    submodel: int
    phase: str  # "forward" or "backward" (the last sub-model's turn does both)
    load_start: float | None  # None: it was already resident (locality)
    load_end: float | None
    compute_start: float
    compute_end: float


class SwapReplica:
    """The whole `model` (host) cut into sub-models of `sizes` layers, trained through `budget` bytes."""

    def __init__(self, model: Stage, sizes: Sequence[int], device: torch.device | str, budget: int,
                 prefetch: bool = True, clock: Callable[[], float] = time.perf_counter,
                 on_span: Callable[[SwapSpan], None] | None = None) -> None:
        names = layer_names(model)
        if sum(sizes) != len(names) or any(n < 1 for n in sizes):
            raise ValueError(f"sizes={list(sizes)} is not allowed: layers per sub-model, each >= 1, summing to "
                             f"the model's {len(names)} layers ({names[0]}, ..., {names[-1]})")
        self.model, self.device, self.prefetch, self.clock = model, torch.device(device), prefetch, clock
        self.skeleton = skeleton(model)
        self.on_span = on_span or (lambda span: None)
        bounds = [sum(sizes[:k]) for k in range(len(sizes) + 1)]
        self.submodels = [names[a:b] for a, b in zip(bounds, bounds[1:])]
        if self.device.type == "cuda":  # pinned host memory: copies to the device run asynchronously
            for t in [*model.parameters(), *model.buffers()]:
                t.data = t.data.pin_memory()
        self.host = [submodel_tensors(model, layers) for layers in self.submodels]
        self.budget = DeviceBudget(budget)
        self.loader = Loader(self.device, self.budget, clock)
        self._resident: dict[int, Loaded] = {}
        self._pending: dict[int, Future] = {}
        self._interrupted = threading.Event()

    # -- residency -----------------------------------------------------------------------------
    def _start_load(self, k: int) -> None:
        if 0 <= k < len(self.submodels) and k not in self._resident and k not in self._pending:
            self._pending[k] = self.loader.load(k, self.host[k])

    def _acquire(self, k: int) -> tuple[Loaded, float | None, float | None]:
        """Sub-model k on the device, and when its load ran (None if it was resident already)."""
        if k in self._resident:
            return self._resident[k], None, None
        self._start_load(k)
        loaded = self.loader.ready(self._pending.pop(k))
        self._resident[k] = loaded
        return loaded, loaded.start, loaded.end

    def _drop(self, k: int) -> None:
        loaded = self._resident.pop(k, None)
        if loaded is not None:
            self.loader.release(loaded)

    def release_all(self) -> None:
        """Drop every device copy: after an optimizer step they are stale."""
        for k in list(self._pending):
            self._resident[k] = self.loader.ready(self._pending.pop(k))
        for k in list(self._resident):
            self._drop(k)

    def close(self) -> None:
        self.release_all()
        self.loader.close()

    def interrupt(self) -> None:
        """Stop an iteration under way at its next sub-model turn (it raises `Interrupted`); the
        host's gradients are then partial, so the replica's work of this step is void."""
        self._interrupted.set()

    def _turn(self, k: int) -> tuple[Loaded, float | None, float | None]:
        """Start sub-model k's turn: stop here if interrupted, else have it on the device."""
        if self._interrupted.is_set():
            raise Interrupted(f"interrupted before sub-model {k}'s turn")
        return self._acquire(k)

    # -- one iteration -------------------------------------------------------------------------
    def iteration(self, batches: Sequence[tuple[torch.Tensor, torch.Tensor]], scale: float) -> list[float]:
        """Forward then backward of `batches` (C microbatches of (inputs, targets)); gradients are
        added to the host model's `.grad`. Returns each microbatch's loss times `scale`.
        Each sub-model's inputs wait for its backward turn in host memory (the cut tensors)."""
        last = len(self.submodels) - 1
        xs = self._arrive([inputs for inputs, _ in batches], "the microbatches' tokens")
        targets = self._arrive([t for _, t in batches], "the microbatches' targets")
        stash: list[list[torch.Tensor]] = []
        for k in range(last):
            loaded, load_start, load_end = self._turn(k)
            if self.prefetch:
                self._start_load(k + 1)
            stash.append([x.to("cpu") for x in xs])
            start = self.clock()
            with torch.no_grad():
                ys = [run_submodel(self.skeleton, self.submodels[k], loaded.tensors, x) for x in xs]
            xs = self._replace(xs, ys, f"the outputs of sub-model {k}")
            self._span(k, "forward", load_start, load_end, start)
            if k != last - 1:
                self._drop(k)
        grads, losses = self._last_turn(xs, targets, scale)
        self.budget.give(nbytes(targets))
        for k in range(last - 1, -1, -1):
            grads = self._backward_turn(k, stash.pop(), grads)
        return losses

    def _arrive(self, tensors: list[torch.Tensor], what: str) -> list[torch.Tensor]:
        """Host tensors copied to the device, counted against the budget."""
        self.budget.take(nbytes(tensors), what)
        return [t.to(self.device) for t in tensors]

    def _replace(self, old: list[torch.Tensor], new: list[torch.Tensor], what: str) -> list[torch.Tensor]:
        """Count the tensors a turn produced (alongside those it consumed, which are still alive),
        then stop counting the consumed ones."""
        self.budget.take(nbytes(new), what)
        self.budget.give(nbytes(old))
        return new

    def _span(self, k: int, phase: str, load_start: float | None, load_end: float | None, start: float) -> None:
        if self.device.type == "cuda":
            torch.cuda.current_stream(self.device).synchronize()
        self.on_span(SwapSpan(k, phase, load_start, load_end, start, self.clock()))

    def _last_turn(self, xs: list[torch.Tensor], targets: list[torch.Tensor], scale: float) -> tuple[list[torch.Tensor], list[float]]:
        """The last sub-model: forward, loss and backward of every microbatch in one turn."""
        k = len(self.submodels) - 1
        loaded, load_start, load_end = self._turn(k)
        params = self._with_grad(loaded)
        if self.prefetch:
            self._start_load(k - 1)
        start, grads, losses = self.clock(), [], []
        for x, y in zip(xs, targets):
            x = x.detach().requires_grad_(k > 0)
            logits = run_submodel(self.skeleton, self.submodels[k], params, x)  # (B, T, vocab)
            mb_loss = F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="sum") * scale
            mb_loss.backward()
            losses.append(float(mb_loss.detach()))
            if k > 0:
                grads.append(x.grad)
        grads = self._replace(xs, grads, f"the input gradients of sub-model {k}")
        xs.clear()  # the caller holds it (as `xs` and `ys`): uncounted, it would live through every backward turn
        self._collect(params)
        self._span(k, "forward+backward", load_start, load_end, start)
        if k > 0:
            self._drop(k)
        return grads, losses

    def _backward_turn(self, k: int, stashed: list[torch.Tensor], grads: list[torch.Tensor]) -> list[torch.Tensor]:
        """Sub-model k's backward: recompute its forward from its stashed inputs, then backward."""
        loaded, load_start, load_end = self._turn(k)
        params = self._with_grad(loaded)
        if self.prefetch:
            self._start_load(k - 1)
        inputs = self._arrive(stashed, f"the stashed inputs of sub-model {k}")
        start, out = self.clock(), []
        for x, g in zip(inputs, grads):
            x = x.detach().requires_grad_(k > 0)
            run_submodel(self.skeleton, self.submodels[k], params, x).backward(g)
            if k > 0:
                out.append(x.grad)
        self._replace(inputs + grads, out, f"the input gradients of sub-model {k}")
        self._collect(params)
        self._span(k, "backward", load_start, load_end, start)
        if k > 0:
            self._drop(k)
        return out

    def _with_grad(self, loaded: Loaded) -> dict[str, torch.Tensor]:
        """The sub-model's device tensors, parameters made leaves that collect gradients (counted)."""
        host = dict(self.model.named_parameters())
        params = {n: t.requires_grad_() if n in host else t for n, t in loaded.tensors.items()}
        self.budget.take(nbytes(t for n, t in params.items() if n in host), "gradients")
        return params

    def _collect(self, params: dict[str, torch.Tensor]) -> None:
        """Add the sub-model's device gradients into the host's `.grad`, then free them."""
        host = dict(self.model.named_parameters())
        with torch.no_grad():
            for name, t in params.items():
                if name not in host or t.grad is None:
                    continue
                g = t.grad.to(host[name].device)
                host[name].grad = g if host[name].grad is None else host[name].grad.add_(g)
                t.grad = None
                t.requires_grad_(False)
        self.budget.give(nbytes(t for n, t in params.items() if n in host))

