"""The notebook lab: `Lab()` (launch form, run controls, live charts, what-if), the charts over
the one event schema (real, replayed and simulated runs alike), reports and a chaos monkey.

>>> import labkit
>>> labkit.lab.Lab()            # doctest: +SKIP   (in a notebook cell: the panel)
"""

from __future__ import annotations

from typing import Any

__all__ = ["Chaos", "Lab", "LiveView", "replay", "write_report"]
_WHERE = {"Lab": "labkit.lab.panel", "LiveView": "labkit.lab.live", "replay": "labkit.lab.live",
          "write_report": "labkit.lab.report", "Chaos": "labkit.lab.chaos"}


def __getattr__(name: str) -> Any:
    """Import widgets, altair and the runtime only when a piece of the lab is used."""
    if name in _WHERE:
        import importlib

        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'labkit.lab' has no attribute {name!r}")
