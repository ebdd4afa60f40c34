"""SWARM at internet scale in virtual time: devices, links, churn traces, two granularities.

`simulate(scenario)` runs a `Scenario` either microbatch by microbatch (`mode="events"`) or as a
fluid model over intervals of constant membership (`mode="fluid"`, for 32-hour traces). Both apply
the real routing (IWRR) and rebalancing (Algorithm 2) kernels and emit `labkit.events` dicts.
"""
