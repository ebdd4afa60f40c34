"""The task pool paper's parameter-server pipeline with a task pool, run in this process (see `core`)."""
