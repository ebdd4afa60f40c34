"""A synchronous pipeline's schedule as pure policy: which lane gets which microbatch, the order a
stage runs its share (1F1B or GPipe), the bubble of a step. The executor
(labkit/executors/pipeline) runs it and the simulator (labkit/sim/lanes.py) prices it."""
