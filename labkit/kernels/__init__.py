"""numba kernels shared by the policy layer and the simulator, each with a plain-Python twin.

Only numpy and numba are imported here; `labkit.swarm` and `labkit.sim` build on these.
"""
