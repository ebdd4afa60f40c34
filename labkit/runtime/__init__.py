"""Executors of SWARM training and the run handle that steers them."""
