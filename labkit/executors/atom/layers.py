"""The whole model as ATOM's layers, in the order they run: the embedding, each block, the head.

A sub-model is a run of consecutive layers. Each layer's forward runs with tensors handed in (the
device copies a swap made) on a `skeleton` of the model, whose own tensors are on the meta device
and never read: the host model stays the one master copy of parameters, gradients and optimizer
state, untouched while layers run (another thread may read it meanwhile).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch.func import functional_call

from labkit.model import Stage

Tensors = dict[str, torch.Tensor]


def layer_names(model: Stage) -> list[str]:
    """"embed", "block0" .. "block{n-1}", "head": the whole model's layers in execution order."""
    if model.cfg.share_layers or not (model.is_first and model.is_last):
        raise ValueError("ATOM swaps a whole model without shared layers: build it with Stage(cfg, 0, n_layer) "
                         "and share_layers=False")
    return ["embed", *(f"block{i}" for i in range(model.count)), "head"]


def skeleton(model: Stage) -> Stage:
    """A storage-free copy of `model`'s modules (on the meta device) to run layers on."""
    with torch.device("meta"):
        return Stage(model.cfg, model.first, model.count)


def _module(model: Stage, layer: str) -> tuple[torch.nn.Module, str]:
    """The host module of `layer` and the prefix of its names in the model's state."""
    if layer.startswith("block"):
        index = layer.removeprefix("block")
        return model.blocks[index], f"blocks.{index}."
    return model, ""


def _owns(layer: str, name: str) -> bool:
    """Whether the model's parameter or buffer `name` belongs to `layer`."""
    if layer == "embed":
        return name.startswith(("tok_emb.", "pos_emb."))
    if layer == "head":
        return name.startswith(("ln_f.", "head."))
    return name.startswith(f"blocks.{layer.removeprefix('block')}.")


def layer_tensors(model: Stage, layer: str) -> Tensors:
    """The host parameters and buffers of `layer`, under the model's names."""
    named = dict(model.named_parameters()) | dict(model.named_buffers())
    return {name: t for name, t in named.items() if _owns(layer, name)}


def submodel_tensors(model: Stage, layers: Sequence[str]) -> Tensors:
    """The host parameters and buffers of a sub-model (a run of layers)."""
    out: Tensors = {}
    for layer in layers:
        out |= layer_tensors(model, layer)
    return out


def run_layer(model: Stage, layer: str, tensors: Mapping[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """`layer`'s forward on `x` with `tensors` (a device copy, parameters and buffers) in place of
    `model`'s own (`model`: a `skeleton`)."""
    module, prefix = _module(model, layer)
    own = {name.removeprefix(prefix): t for name, t in tensors.items() if _owns(layer, name)}
    if layer == "embed":
        t = x.shape[1]
        h = torch.nn.functional.embedding(x, own["tok_emb.weight"])  # (B, T, d)
        if "pos_emb.weight" in own:
            h = h + own["pos_emb.weight"][:t]
        return h
    if layer == "head":
        h = torch.nn.functional.layer_norm(x, (x.shape[-1],), own["ln_f.weight"], own["ln_f.bias"])
        return h @ own["head.weight"].T  # (B, T, vocab)
    return functional_call(module, own, (x,))


def run_submodel(model: Stage, layers: Sequence[str], tensors: Mapping[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """A sub-model's forward: its layers in order."""
    for layer in layers:
        x = run_layer(model, layer, tensors, x)
    return x
