"""The stage-partitionable transformer: `Stage` modules and the functions that cut the model."""

from labkit.model.gpt import Stage
from labkit.model.partition import (assemble, boundary_spec, build_stage, build_stages, init_full_state, init_run_state,
                                    resolve_split, stage_bounds)

__all__ = ["Stage", "assemble", "boundary_spec", "build_stage", "build_stages", "init_full_state", "init_run_state",
           "resolve_split", "stage_bounds"]
