"""Notebook-facing pieces: charts over the event schema (real and simulated runs alike)."""
