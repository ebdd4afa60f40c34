"""Heterogeneous planners: scenarios, DT-FM's scheduler, the clustering planner, and the Plan they return."""
