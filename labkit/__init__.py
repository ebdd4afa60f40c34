"""labkit: a lab for decentralized training of large models on unreliable machines."""

__version__ = "0.1.0"
