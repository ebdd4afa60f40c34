"""The pure layers (swarm, kernels, plan, sim, model.sizes) import without torch; labkit.model stays whole."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

WALK = """
import importlib, pkgutil, sys
import labkit.kernels, labkit.model.sizes, labkit.plan, labkit.sim, labkit.swarm
for pkg in (labkit.swarm, labkit.kernels, labkit.plan, labkit.sim):
    for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
        importlib.import_module(info.name)
print(sorted(m for m in sys.modules if m == "torch" or m.startswith("torch."))[:3])
"""


def test_pure_packages_import_without_torch() -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", WALK], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=120, check=True).stdout
    assert out.strip() == "[]", out


def test_model_package_names_load_on_first_use() -> None:
    import labkit.model
    from labkit.model import Stage, assemble, build_stage
    from labkit.model.gpt import Stage as GptStage
    from labkit.model.partition import assemble as cut_assemble, build_stage as cut_build_stage

    assert (Stage, assemble, build_stage) == (GptStage, cut_assemble, cut_build_stage)
    assert all(hasattr(labkit.model, name) for name in labkit.model.__all__)
