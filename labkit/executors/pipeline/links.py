"""The emulated links between a synchronous pipeline's stages, in a world or over a links file.

Lane r's peer at stage s sits where the scenario places the r-th peer of stage s (`peer_region`),
and computes on that peer's virtual device in a world (its replacements too). The activations it
hands stage s + 1 cross the scenario's link between their two regions (half its round trip, then
their bytes through that direction's bucket, each byte counting as the world's model's:
`payload_scale`), and the gradients coming back cross it the other way. The driver gives stage 0
its token ids directly and the last stage its targets: the data sits with the stages.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from labkit.config import RunConfig
from labkit.runtime.links import Link, load_links
from labkit.runtime.pacing import payload_scale
from labkit.sim.seats import peer_region
from labkit.sim.links import region_link


def lane_place(stage: int, lane: int) -> str:
    """The name of lane `lane`'s first peer at `stage`: where its replacements sit in a world."""
    return f"s{stage}p{lane}"


class StageLinks:
    """One link per lane between each pair of consecutive stages, as `cfg.world` or `cfg.links` places them."""

    def __init__(self, cfg: RunConfig, lanes: int) -> None:
        scenario = load_links(cfg)
        scale = payload_scale(cfg, scenario)
        region = {(s, lane): peer_region(scenario, lane_place(s, lane)) for s in range(cfg.stages) for lane in range(lanes)}
        self._links = {(s, lane): Link(*region_link(scenario, region[s, lane], region[s + 1, lane]), scale)
                       for s in range(cfg.stages - 1) for lane in range(lanes)}

    def hand(self, source: int, target: int, lane: int, value: Any, deliver: Callable[[], None]) -> float:
        """Carry `value` from `lane`'s peer at stage `source` to its neighbour at stage `target`, then
        call `deliver`; the seconds the link takes."""
        return self._links[min(source, target), lane].send(value, deliver, back=target < source)
