"""ATOM's swap executor (the ATOM paper, §III-C) against plain training: the same parameters for several
partitions and accumulation degrees, a device budget smaller than the model that is never
exceeded, and a budget too small refused before it is passed."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from labkit.config import ModelConfig, RunConfig
from labkit.data import WindowSampler, load_corpus
from labkit.executors.atom.device import BudgetExceeded
from labkit.executors.atom.swap import Interrupted, SwapReplica, SwapSpan
from labkit.runtime.optim import apply_step, make_optimizer
from labkit.runtime.reference import reference_model, train_reference

CFG = RunConfig(model=ModelConfig(size="nano", seq_len=32, dtype="float64"), global_batch=8, microbatch=2, steps=3,
                eval_every=0)
SCALE = 1.0 / (CFG.model.seq_len * CFG.global_batch)


@pytest.fixture(scope="module")
def sampler() -> WindowSampler:
    return WindowSampler(load_corpus(CFG.data).train, CFG.model.seq_len, CFG.seed)


@pytest.fixture(scope="module")
def reference(sampler: WindowSampler) -> tuple[torch.nn.Module, list[float]]:
    return train_reference(CFG, sampler)


def _swap_train(sampler: WindowSampler, sizes: tuple[int, ...], accumulation: int, budget: int,
                spans: list[SwapSpan] | None = None, prefetch: bool = True,
                before: Callable[[SwapReplica], None] | None = None) -> tuple[torch.nn.Module, list[float], SwapReplica]:
    """CFG's steps through one swapping replica: C microbatches per iteration, the step on the host."""
    model = reference_model(CFG)
    replica = SwapReplica(model, sizes, "cpu", budget, prefetch=prefetch,
                          on_span=(spans.append if spans is not None else None))
    if before is not None:
        before(replica)
    optimizer = make_optimizer(model.parameters(), CFG)
    losses = []
    try:
        for step in range(CFG.steps):
            indices = range(CFG.microbatches_per_step)
            total = 0.0
            for first in range(0, len(indices), accumulation):
                batches = [sampler.batch(step, i, CFG.microbatch) for i in indices[first:first + accumulation]]
                total += sum(replica.iteration(batches, SCALE))
            apply_step(optimizer, step, CFG)
            optimizer.zero_grad(set_to_none=True)
            replica.release_all()
            losses.append(total)
    finally:
        replica.close()
    return model, losses, replica


def _model_bytes(model: torch.nn.Module) -> int:
    """Parameters and their gradients: what a device holding the whole model for training needs."""
    return 2 * sum(p.numel() * p.element_size() for p in model.parameters())


@pytest.mark.parametrize("sizes, accumulation", [((6,), 4), ((2, 2, 2), 2), ((1,) * 6, 1), ((1, 4, 1), 3), ((3, 3), 4)])
def test_swapping_trains_exactly_as_plain_training(sampler, reference, sizes, accumulation) -> None:
    ref_model, ref_losses = reference
    model, losses, replica = _swap_train(sampler, sizes, accumulation, budget=10**9)
    worst = max(float((a - b).abs().max()) for a, b in zip(model.state_dict().values(), ref_model.state_dict().values()))
    assert worst <= 1e-10, worst
    assert losses == pytest.approx(ref_losses, rel=1e-12, abs=0)
    assert replica.budget.used == 0, "every device byte is given back after the step"


def test_a_budget_smaller_than_the_model_holds_two_sub_models_at_most(sampler, reference) -> None:
    """One block per sub-model in half the model's bytes: the loader never holds more than two
    sub-models at once (counted here, apart from the executor's own budget), and training is exact."""
    whole = _model_bytes(reference_model(CFG))
    spans: list[SwapSpan] = []
    held, most = [0], [0]

    def watch(replica: SwapReplica) -> None:
        load, release = replica.loader.load, replica.loader.release

        def counted_load(*args):
            held[0] += 1
            most[0] = max(most[0], held[0])
            return load(*args)

        def counted_release(loaded):
            held[0] -= 1
            return release(loaded)
        replica.loader.load, replica.loader.release = counted_load, counted_release

    model, _, replica = _swap_train(sampler, (1,) * 6, 2, budget=whole // 2, spans=spans, before=watch)
    assert most[0] == 2, most
    assert held[0] == 0 and replica.budget.used == 0
    assert 0 < replica.budget.peak <= whole // 2
    worst = max(float((a - b).abs().max()) for a, b in zip(model.state_dict().values(), reference[0].state_dict().values()))
    assert worst <= 1e-10
    turns = {(s.submodel, s.phase) for s in spans}
    assert (5, "forward+backward") in turns and (0, "forward") in turns and (0, "backward") in turns
    assert all(s.compute_end >= s.compute_start for s in spans)
    assert all(s.load_end >= s.load_start for s in spans if s.load_start is not None)


def test_without_prefetch_each_sub_model_loads_when_its_turn_comes(sampler, reference) -> None:
    spans: list[SwapSpan] = []
    model, _, _ = _swap_train(sampler, (2, 2, 2), 2, budget=10**9, spans=spans, prefetch=False)
    loaded = [s for s in spans if s.load_start is not None]
    assert loaded and all(s.load_end <= s.compute_start for s in loaded)
    worst = max(float((a - b).abs().max()) for a, b in zip(model.state_dict().values(), reference[0].state_dict().values()))
    assert worst <= 1e-10


def test_an_interrupted_iteration_stops_between_turns_and_gives_its_copies_back(sampler) -> None:
    spans: list[SwapSpan] = []
    replica = SwapReplica(reference_model(CFG), (1,) * 6, "cpu", 10**9,
                          on_span=lambda span: (spans.append(span), replica.interrupt() if len(spans) == 2 else None))
    with pytest.raises(Interrupted, match="before sub-model 2's turn"):
        replica.iteration([sampler.batch(0, 0, CFG.microbatch)], SCALE)
    replica.close()
    assert [s.submodel for s in spans] == [0, 1]


def test_a_budget_too_small_is_refused_before_it_is_passed(sampler) -> None:
    model = reference_model(CFG)
    replica = SwapReplica(model, (1,) * 6, "cpu", budget=50_000)
    try:
        with pytest.raises(BudgetExceeded, match="budget's 50,000 B"):
            replica.iteration([sampler.batch(0, 0, CFG.microbatch)], SCALE)
        assert replica.budget.peak <= 50_000
    finally:
        replica.close()


def test_bad_sizes_are_one_clear_error() -> None:
    with pytest.raises(ValueError, match=r"sizes=\[2, 2\] is not allowed: .* summing to the model's 6 layers"):
        SwapReplica(reference_model(CFG), (2, 2), "cpu", budget=10**9)
