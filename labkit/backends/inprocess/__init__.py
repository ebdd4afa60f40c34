"""The in-process backend: every peer and trainer a thread of this process."""

from labkit.backends.inprocess.backend import ThreadPeers, launch

__all__ = ["ThreadPeers", "launch"]
