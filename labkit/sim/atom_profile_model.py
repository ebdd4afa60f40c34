"""An analytic ATOM profile (the ATOM paper, §III-B): one `LayerCost` row per layer of a GPT-3 model on a
device preset, for the swap simulator (`labkit.sim.atom`) and the partition search, when no
measured profile (`labkit.executors.atom.profile`) is at hand.

Layers, in the order they run: the embedding (token vocab x d plus positions seq_len x d), the
transformer blocks, and the head (final LayerNorm and an untied vocab x d projection with the
softmax cross-entropy, as minGPT, which the ATOM paper profiles). Per layer and one microbatch:

- compute: training FLOPs / (device peak x `efficiency`). A block takes
  `block_flops_per_token` (one third forward, two thirds backward); with `checkpointing` the
  backward repeats the forward (x 4/3 in all). The head's projection is 2·tokens·d·vocab FLOPs
  forward and twice that backward. The embedding is a gather and an add (2·tokens·d FLOPs each
  way): next to nothing, while its load is as large as the head's (the ATOM paper's Fig. 7 and 11).
- load: parameter bytes / PCIe bandwidth (`pcie_gbps` in GB/s, 12 = PCIe 3.0 x16 effective).
- memory (device bytes while the layer runs): its parameters and their gradients
  (`bytes_per_value` each) plus the activations of one microbatch. Optimizer state stays on the
  host (ATOM runs Adam on the CPU), so it is not counted. Block activations follow Korthikanti et
  al. 2022 (no recompute, 16-bit): seq·mb·d·(34 + 5·heads·seq/d) bytes, scaled by
  bytes_per_value / 2; the head's are the logits and their gradient. What the microbatches in
  flight keep for the backward is charged by the simulator (`resident_bytes`: on the host by
  default, as labkit's executor keeps it).
- out_bytes: the tensor a cut after the layer moves, mb·seq·d values (the ATOM paper's Table II at
  bytes_per_value = 4); the head hands nothing on.

The device's rate is the preset's peak whatever `bytes_per_value` says (fp16 tensor peak, or the
fp32 peak for cards without tensor cores). Pure: no torch.
"""

from __future__ import annotations

import math

from labkit.config import ConfigError
from labkit.plan.atom_profile import LayerCost
from labkit.sim.hardware import DEVICES, block_flops_per_token, block_params, model_shape

VOCAB = 50257  # GPT-2/3 BPE vocabulary
# name -> (d_model, layers, heads): GPT-3 (Brown et al. 2020, Table 2.1) as the ATOM paper's Table II lists them
GPT3: dict[str, tuple[int, int, int]] = {
    "gpt3-small": (768, 12, 12),
    "gpt3-medium": (1024, 24, 16),
    "gpt3-large": (1536, 24, 16),
    "gpt3-xl": (2048, 24, 24),
    "gpt3-2.7b": (2560, 32, 32),
    "gpt3-6.7b": (4096, 32, 32),
    "gpt3-13b": (5120, 40, 40),
    "gpt3-175b": (12288, 96, 96),
}
HEAD_DIM = 64  # heads = d / 64 for a model named outside GPT3 (only the attention-score memory needs heads)


def model_dims(model: str) -> tuple[int, int, int]:
    """(d_model, layers, heads) of a GPT-3 size, or of a `labkit.sim.hardware` model (heads = d/64)."""
    if model in GPT3:
        return GPT3[model]
    try:
        d, layers = model_shape(model)
    except KeyError:
        raise ConfigError("analytic_profile", "model", model, f"one of {sorted(GPT3)} or a labkit.sim.hardware model") from None
    return d, layers, max(1, d // HEAD_DIM)


def block_activation_bytes(d: int, heads: int, microbatch: int, seq_len: int, bytes_per_value: int) -> float:
    """Activations one block keeps for its backward, one microbatch (Korthikanti et al. 2022)."""
    return seq_len * microbatch * d * (34.0 + 5.0 * heads * seq_len / d) * bytes_per_value / 2.0


def analytic_profile(model: str, device: str, microbatch: int, seq_len: int, pcie_gbps: float = 12.0,
                     efficiency: float = 0.4, bytes_per_value: int = 2, *, layers: int | None = None,
                     vocab: int = VOCAB, checkpointing: bool = True) -> tuple[LayerCost, ...]:
    """Embedding, `layers` blocks (default: the model's own count; the ATOM paper trims 175B to 2, 13B
    to 18) and head of `model` on `device`, one microbatch of `microbatch` x `seq_len` tokens."""
    if device not in DEVICES:
        raise ConfigError("analytic_profile", "device", device, f"one of {sorted(DEVICES)}")
    d, full_layers, heads = model_dims(model)
    n_blocks = full_layers if layers is None else layers
    for name, value in (("microbatch", microbatch), ("seq_len", seq_len), ("layers", n_blocks),
                        ("bytes_per_value", bytes_per_value), ("vocab", vocab)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError("analytic_profile", name, value, "an integer >= 1")
    for name, number in (("pcie_gbps", pcie_gbps), ("efficiency", efficiency)):
        if isinstance(number, bool) or not isinstance(number, (int, float)) or not (math.isfinite(number) and number > 0):
            raise ConfigError("analytic_profile", name, number, "a finite number > 0")
    rate = DEVICES[device][0] * 1e12 * efficiency  # FLOP/s reached
    pcie = pcie_gbps * 1e9  # bytes/s host -> device
    tokens = microbatch * seq_len
    out = tokens * d * bytes_per_value
    bwd_factor = 3.0 if checkpointing else 2.0  # backward = 2 x forward, + 1 forward recomputed

    def row(name: str, kind: str, params: float, fwd_flops: float, bwd_flops: float, activations: float,
            out_bytes: float) -> LayerCost:
        p = params * bytes_per_value
        return LayerCost(name=name, kind=kind, memory=2.0 * p + activations, param_bytes=p, fwd_s=fwd_flops / rate,
                         bwd_s=bwd_flops / rate, load_s=p / pcie, out_bytes=out_bytes)

    embed_flops = 2.0 * tokens * d
    embed = row("embed", "embed", (vocab + seq_len) * d, embed_flops, embed_flops, 2.0 * out, out)
    block_fwd = block_flops_per_token(d, seq_len) * tokens / 3.0
    block = [row(f"block{i}", "block", block_params(d), block_fwd, bwd_factor * block_fwd,
                 block_activation_bytes(d, heads, microbatch, seq_len, bytes_per_value), out) for i in range(n_blocks)]
    head_fwd = 2.0 * tokens * d * vocab
    head = row("head", "head", vocab * d + 2 * d, head_fwd, bwd_factor * head_fwd,
               2.0 * tokens * vocab * bytes_per_value, 0.0)
    return (embed, *block, head)
