"""The in-process backend: every peer and trainer a thread of this process."""

from labkit.backends.inprocess.backend import ThreadPeers

__all__ = ["ThreadPeers"]
