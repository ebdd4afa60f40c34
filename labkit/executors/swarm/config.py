"""SWARM's config: its knobs are the run-wide ones (stages, peers, trainers, router, rebalancing,
sync, compression), which `RunConfig` holds because the other executors read some of them too."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar


@dataclass(frozen=True, kw_only=True, slots=True)
class SwarmConfig:
    """SWARM parallelism: stages of peers, trainers routing each microbatch through them."""

    name: ClassVar[str] = "swarm"

    def check_run(self, run: Any) -> None:
        """SWARM can run every run-wide setting: nothing to refuse."""
