"""Write the golden loss curve `losses/nano_50.json` from the single-process reference loop.

Run from the repository root: `PYTHONPATH=$PWD python tests/assets/make_golden.py` (a few seconds).
The config is `tests.golden.golden_config()`; re-run this after changing it or labkit's defaults.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import torch

from labkit.config import RunConfig
from labkit.data import WindowSampler, load_corpus
from labkit.model import build_stages, stage_bounds
from labkit.runtime.evaluate import Evaluator
from labkit.runtime.reference import reference_model, train_reference
from tests.golden import GOLDEN_PATH, REGENERATE, golden_config


def val_loss(cfg: RunConfig, evaluator: Evaluator, state: Mapping[str, torch.Tensor]) -> float:
    """Validation loss of a whole-model state, cut into the run's stages as a SWARM run evaluates it."""
    return evaluator.loss([s.state_dict() for s in build_stages(cfg.model, cfg.layer_split, state)])


def main() -> None:
    """Train the golden config with the reference loop and write the losses next to this script."""
    cfg = golden_config()
    if cfg.threads:
        torch.set_num_threads(cfg.threads)  # as a run does (one thread: also the fastest on a busy machine)
    corpus = load_corpus(cfg.data)
    evaluator = Evaluator(cfg, corpus.val, stage_bounds(cfg.layer_split))
    before = val_loss(cfg, evaluator, reference_model(cfg).state_dict())
    model, losses = train_reference(cfg, WindowSampler(corpus.train, cfg.model.seq_len, cfg.seed))
    golden = {"config": cfg.to_dict(), "losses": losses, "val_loss_before": before,
              "val_loss_after": val_loss(cfg, evaluator, model.state_dict()), "torch": torch.__version__,
              "made_with": REGENERATE}
    GOLDEN_PATH.parent.mkdir(parents=True, exist_ok=True)
    GOLDEN_PATH.write_text(json.dumps(golden, indent=1) + "\n")
    print(f"wrote {GOLDEN_PATH}: loss {losses[0]:.6f} -> {losses[-1]:.6f}, "
          f"validation {before:.6f} -> {golden['val_loss_after']:.6f}")


if __name__ == "__main__":
    main()
