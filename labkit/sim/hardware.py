"""Device presets and the per-stage cost model: FLOPs, service seconds, bytes on the wire.

Device figures are dense fp16/bf16 tensor-core peaks with fp32 accumulation (the rate mixed
precision training uses) and memory, from the vendors' spec sheets / architecture whitepapers:

| preset    | fp16 tensor TFLOP/s | memory GB | source                                   |
| --------- | ------------------- | --------- | ---------------------------------------- |
| T4        | 65                  | 16        | NVIDIA T4 datasheet                      |
| V100      | 112                 | 16        | V100 PCIe datasheet (SXM2: 125)          |
| V100-32GB | 112                 | 32        | V100 PCIe 32 GB datasheet (ATOM's V100)  |
| GTX1080Ti | 11.3 (fp32)         | 11        | GeForce GTX 1080 Ti spec (ATOM's medium) |
| A100      | 312                 | 80        | A100 datasheet (SXM, dense)              |
| RTX2080   | 40.3                | 8         | Turing whitepaper, fp32 accumulate       |
| RTX3080   | 59.5                | 10        | Ampere GA102 whitepaper, fp32 accumulate |
| RTX4090   | 165.2               | 24        | Ada whitepaper, fp32 accumulate          |
| H100      | 989                 | 80        | H100 SXM datasheet (dense)               |

Pascal GeForce cards have no tensor cores and run fp16 arithmetic at 1/64 of fp32, so the
GTX1080Ti row holds its fp32 peak: the rate training on it reaches.

FLOP formula: a transformer block costs 6·(12d² + 13d) + 12·T·d training FLOPs per token (the
formula of `ModelConfig.block_flops_per_token`: 6 per parameter for forward+backward plus the
attention scores); activation checkpointing adds one more forward (x 4/3). A device achieves
`efficiency` of its peak, plus a fixed `overhead` seconds per block and pass.
"""

from __future__ import annotations

from dataclasses import dataclass

from labkit.config import MODEL_SIZES, even_split

# name -> (fp16 tensor TFLOP/s, memory GB); see the table above
DEVICES: dict[str, tuple[float, float]] = {
    "T4": (65.0, 16.0),
    "V100": (112.0, 16.0),
    "V100-32GB": (112.0, 32.0),
    "GTX1080Ti": (11.3, 11.0),
    "A100": (312.0, 80.0),
    "RTX2080": (40.3, 8.0),
    "RTX3080": (59.5, 10.0),
    "RTX4090": (165.2, 24.0),
    "H100": (989.0, 80.0),
}

# Appendix F layer shapes of SWARM (Table 1): name -> (d_model, layers); FFN = 4d, heads irrelevant
# to the FLOP count. The GPT-2 family comes from `labkit.config.MODEL_SIZES`.
PAPER_LAYERS: dict[str, tuple[int, int]] = {"base": (768, 12), "xxlarge": (4096, 12), "gpt3": (12288, 12)}
MODELS = tuple(MODEL_SIZES) + tuple(PAPER_LAYERS)


def block_params(d: int) -> int:
    """Parameters of one block: attention 4d²+4d, MLP 8d²+5d, two LayerNorms 4d."""
    return 12 * d * d + 13 * d


def block_flops_per_token(d: int, seq_len: int) -> float:
    """Training FLOPs (forward + backward) of one block per token."""
    return 6.0 * block_params(d) + 12.0 * seq_len * d


def model_shape(model: str) -> tuple[int, int]:
    """(d_model, layers) of a named model: a GPT-2 family size or a SWARM Appendix F layer stack."""
    if model in PAPER_LAYERS:
        return PAPER_LAYERS[model]
    layers, _, d = MODEL_SIZES[model]
    return d, layers


@dataclass(frozen=True)
class StageCosts:
    """Per-stage work of one microbatch: FLOPs and block counts per pass, bytes moved."""

    fwd_flops: tuple[float, ...]  # per stage, forward pass of one microbatch
    bwd_flops: tuple[float, ...]  # per stage, backward pass (with recompute if checkpointing)
    blocks: tuple[int, ...]  # blocks per stage
    activation_bytes: float  # one microbatch's boundary activations (= gradient size) on the wire
    stage_params: tuple[int, ...]  # parameters per stage (all-reduce and migration size)


def stage_costs(*, model: str, stages: int, microbatch: int, seq_len: int, checkpointing: bool,
                wire_bytes: float = 2.0, compression: float = 1.0, split: tuple[int, ...] | None = None) -> StageCosts:
    """Costs of each stage for one microbatch of `microbatch` x `seq_len` tokens.

    Blocks split as `split` says, or as evenly as possible (earlier stages take the remainder); embeddings and the
    head are left out (the paper's Table 1 and Appendix I pipelines have none). Activations travel
    as `wire_bytes` per value (fp16 = 2) divided by `compression`.
    """
    d, layers = model_shape(model)
    split = split or even_split(layers, stages)
    tokens = microbatch * seq_len
    per_block = block_flops_per_token(d, seq_len) * tokens
    fwd = tuple(n * per_block / 3.0 for n in split)
    bwd = tuple(n * per_block * (2.0 / 3.0 + (1.0 / 3.0 if checkpointing else 0.0)) for n in split)
    return StageCosts(fwd_flops=fwd, bwd_flops=bwd, blocks=split,
                      activation_bytes=tokens * d * wire_bytes / compression,
                      stage_params=tuple(n * block_params(d) for n in split))


def service_seconds(costs: StageCosts, device: str, efficiency: float, overhead_ms: float) -> tuple[list[float], list[float]]:
    """(forward, backward) seconds of one microbatch on each stage for a `device` preset reaching
    `efficiency` of its peak, plus `overhead_ms` per block and pass: the simulator's service times
    and what a peer on that virtual device is held to (labkit/runtime/pacing.py)."""
    rate = DEVICES[device][0] * 1e12 * efficiency  # FLOP/s achieved
    overhead = [n * overhead_ms / 1e3 for n in costs.blocks]
    return ([f / rate + o for f, o in zip(costs.fwd_flops, overhead)],
            [f / rate + o for f, o in zip(costs.bwd_flops, overhead)])
