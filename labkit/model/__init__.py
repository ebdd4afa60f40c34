"""The stage-partitionable transformer: `Stage` modules and the functions that cut the model."""

from labkit.model.gpt import Stage
from labkit.model.partition import assemble, build_stage, build_stages, init_full_state, resolve_split, stage_bounds

__all__ = ["Stage", "assemble", "build_stage", "build_stages", "init_full_state", "resolve_split", "stage_bounds"]
