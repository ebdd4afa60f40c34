"""ATOM: whole-model replicas that swap sub-models through a small device budget."""
