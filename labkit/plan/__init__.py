"""Heterogeneous planners: which devices serve which stage, in what order, with how many layers.

Modules: `network` (devices + delay/bandwidth matrices, JSON), `presets` (the papers' network
cases), `workload` (bytes and FLOPs of a model and batch), `dtfm` (DT-FM's cost model and hybrid
genetic search, with `local_search`), `cluster` (the task pool paper's clustering planner), `plan` (the Plan
both return), `atom_profile` and `atom_partition` (ATOM's per-layer costs and its partition
search). Pure logic: numpy, numba kernels from `labkit.kernels`, no torch, threads or sockets.
"""
