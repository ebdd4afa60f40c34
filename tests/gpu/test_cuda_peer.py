"""A stage peer on a CUDA device: the same numbers as on the CPU, and bf16 training that learns.

The suite's only GPU tests: they need a CUDA device and are skipped (with the reason) without one.
Tolerance: the GPU's float32 kernels (TF32 off) differ from the CPU's in summation order only,
which for a nano stage on one microbatch stays within 1e-4 relative.
"""

from __future__ import annotations

import pytest
import torch

from labkit.config import DataConfig, ModelConfig, RunConfig
from labkit.data import WindowSampler, load_corpus
from labkit.model.assembly import initial_states, stage_module
from labkit.runtime.peer import StagePeer
from labkit.runtime.stage_step import StepPlan

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="needs a CUDA GPU: torch.cuda.is_available() is False on this machine")


def _peer(cfg: RunConfig, device: str) -> StagePeer:
    state = initial_states(cfg)[0]
    peer = StagePeer("s0p0", 0, stage_module(cfg, 0, state["params"]), cfg, device)
    peer.load_state(state)
    return peer


def _batch(cfg: RunConfig) -> tuple[torch.Tensor, torch.Tensor]:
    sampler = WindowSampler(load_corpus(cfg.data).train, cfg.model.seq_len, cfg.seed)
    return sampler.batch(0, 0, cfg.microbatch)


def test_cuda_peer_matches_the_cpu_peer() -> None:
    torch.backends.cuda.matmul.allow_tf32 = False
    cfg = RunConfig(model=ModelConfig(size="nano", seq_len=32), data=DataConfig(max_bytes=1_000_000), stages=1,
                    peers=1, global_batch=4, microbatch=4)
    inputs, targets = _batch(cfg)
    results = {}
    for device in ("cpu", "cuda"):
        peer = _peer(cfg, device)
        loss, _ = peer.call("loss", (0, 0, 1), inputs, targets, 1.0 / (4 * 32), True, 4, "fp32").result()
        results[device] = (loss, [g.cpu() for g in peer.accum], dict(peer.attempts))  # its thread is idle now
        peer.close()
    (cpu_loss, cpu_grads, n), (gpu_loss, gpu_grads, m) = results["cpu"], results["cuda"]
    assert n == m == {(0, 0, 1): 4}  # the attempt its sum holds, with its samples
    assert gpu_loss == pytest.approx(cpu_loss, rel=1e-4)
    for a, b in zip(cpu_grads, gpu_grads):
        assert torch.allclose(a, b, rtol=1e-3, atol=1e-5)


def test_bf16_peer_on_cuda_learns_a_batch() -> None:
    cfg = RunConfig(model=ModelConfig(size="nano", seq_len=32, dtype="bfloat16"), data=DataConfig(max_bytes=1_000_000),
                    stages=1, peers=1, global_batch=8, microbatch=8, lr=3e-3, warmup_steps=1)
    inputs, targets = _batch(cfg)
    peer = _peer(cfg, "cuda")
    assert all(p.dtype == torch.bfloat16 and p.is_cuda for p in peer.params)
    losses = []
    for step in range(20):
        attempt = (step, 0, step + 1)
        loss, _ = peer.call("loss", attempt, inputs, targets, 1.0 / (8 * 32), True, 8, "bf16").result()
        plan = StepPlan(step + 1, step, {attempt: 8}, (None,), 0, local=False, apply=True, timeout=30.0)
        answer = peer.call("prepare", plan).result()  # the step boundary's one round trip (one peer)
        assert answer["held"] == {attempt: 8} and answer["finite"], answer
        losses.append(loss)
    peer.close()
    assert losses[-1] < losses[0] - 0.5, losses
