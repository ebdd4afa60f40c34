"""Executors: one folder each (its config, its core, what it places on each backend, the verbs it
refuses, what the lab shows for it), exported as one `ExecutorSpec` and listed in `registry`."""
