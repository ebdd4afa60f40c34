"""ATOM on a CUDA device: the swap stays inside the device budget its partition chose, and a run
on CUDA trains the same model as plain training on the CPU.

Needs a CUDA device; skipped (with the reason) without one.

The budget (labkit/executors/atom/engine.py) counts what a swap keeps on the device: the resident
sub-models' parameters and gradients and the C microbatches' cut tensors in flight (the ATOM paper
§III-C). It does not count a turn's working memory: the activations autograd saves while ONE
microbatch runs forward and backward through one sub-model (freed before the next microbatch).
So the allowance is that working memory, measured here for every sub-model on the same device,
the largest taken, plus 1 MiB for the caching allocator's rounding of each block to 512 B.
On the H200 the swap once went 25.7 MB past that bound: the last forward turn's outputs lived on,
uncounted, through every backward turn (found with benchmarks/gpu_atom_peak.py).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import labkit
from labkit import AtomConfig, DataConfig, ModelConfig, RunConfig
from labkit.data import WindowSampler, load_corpus
from labkit.model import Stage
from labkit.executors.atom.device import nbytes
from labkit.executors.atom.engine import SubmodelPlan, plan_submodels
from labkit.executors.atom.layers import run_submodel, skeleton, submodel_tensors
from labkit.executors.atom.swap import SwapReplica
from labkit.runtime.reference import reference_model, train_reference

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="needs a CUDA GPU: torch.cuda.is_available() is False on this machine")

ROUNDING = 2**20  # bytes: the allocator rounds every block up to 512 B; a turn holds well under 2,048 blocks


def _working_memory(model: Stage, plan: SubmodelPlan, x: torch.Tensor, y: torch.Tensor) -> int:
    """The most bytes one microbatch's forward and backward through one sub-model takes beyond the
    sub-model's parameters, their gradients, its input and the gradient arriving at its output."""
    bare, names = skeleton(model), list(plan.layers)
    bounds = [sum(plan.sizes[:k]) for k in range(len(plan.sizes) + 1)]
    host = dict(model.named_parameters())
    worst = 0
    for k, (a, b) in enumerate(zip(bounds, bounds[1:])):
        layers = names[a:b]
        tensors = {n: t.detach().to("cuda").requires_grad_(n in host) for n, t in submodel_tensors(model, layers).items()}
        last = k == len(plan.sizes) - 1
        grad_out = None if last else torch.ones_like(run_submodel(bare, layers, tensors, x).detach())
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        inp = x.detach().requires_grad_(x.is_floating_point())
        out = run_submodel(bare, layers, tensors, inp)
        if last:
            F.cross_entropy(out.flatten(0, 1), y.flatten(), reduction="sum").backward()
        else:
            out.backward(grad_out)
        torch.cuda.synchronize()
        grads = nbytes(t for n, t in tensors.items() if n in host)
        worst = max(worst, torch.cuda.max_memory_allocated() - base - grads)
        with torch.no_grad():
            x = run_submodel(bare, layers, tensors, x)
        del tensors, out, inp, grad_out
    return worst


def test_the_swap_on_cuda_stays_within_its_budget() -> None:
    # C x microbatch x seq_len = 16,384 tokens a turn: enough compute (float32) to hide a block's load,
    # without which the partition search keeps the whole model resident (nothing would swap)
    cfg = RunConfig(model=ModelConfig(size="small", seq_len=512), data=DataConfig(max_bytes=1_000_000), microbatch=8,
                    global_batch=32, eval_every=0, executor=AtomConfig(replicas=1, accumulation=4, device="cuda"))
    model = reference_model(cfg)
    plan = plan_submodels(cfg, model.state_dict(), "cuda")
    model_bytes = nbytes(model.parameters())
    assert len(plan.sizes) > 1 and plan.budget < 2 * model_bytes, plan.describe()  # it must swap to fit
    sampler = WindowSampler(load_corpus(cfg.data).train, cfg.model.seq_len, cfg.seed)
    batches = [sampler.batch(0, i, cfg.microbatch) for i in range(4)]
    allowance = _working_memory(model, plan, batches[0][0].to("cuda"), batches[0][1].to("cuda")) + ROUNDING
    torch.cuda.empty_cache()
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    replica = SwapReplica(model, plan.sizes, "cuda", plan.budget)
    try:
        for _ in range(3):
            losses = replica.iteration(batches, 1.0 / (cfg.model.seq_len * cfg.global_batch))
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - base
        counted = replica.budget.peak
    finally:
        replica.close()
    assert counted <= plan.budget
    assert peak <= plan.budget + allowance, (f"peak {peak:,} B > budget {plan.budget:,} B + allowance {allowance:,} B; "
                                             f"sizes {plan.sizes}, counted peak {counted:,} B")
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())
    assert len(losses) == 4 and all(loss > 0 for loss in losses)


def test_an_atom_run_on_cuda_trains_what_plain_training_does(tmp_path) -> None:
    cfg = RunConfig(model=ModelConfig(size="nano", seq_len=32, dtype="float64"), data=DataConfig(max_bytes=1_000_000),
                    global_batch=16, microbatch=2, steps=6, eval_every=0, executor=AtomConfig(replicas=2, accumulation=2, device="cuda"))
    run = labkit.launch(cfg, run_dir=tmp_path)
    summary = run.wait(timeout=300)
    assert summary["status"] == "finished", summary
    assert run.events.history("swap"), "no sub-model was swapped"
    steps = run.events.history("step")
    sampler = WindowSampler(load_corpus(cfg.data).train, cfg.model.seq_len, cfg.seed)
    reference, losses = train_reference(cfg, sampler)
    got = torch.load(tmp_path / "checkpoint.pt", weights_only=False)["stages"][0]["params"]
    # float64: the GPU's kernels differ from the CPU's in summation order only (about 1e-16 a sum);
    # six Adam steps leave that far below 1e-9
    worst = max(float((got[k].cpu() - v).abs().max()) for k, v in reference.state_dict().items())
    assert worst <= 1e-9, worst
    assert [e["loss"] for e in steps] == pytest.approx(losses, rel=1e-9)
    assert summary["val_loss_after"] < summary["val_loss_before"]
