"""Save an altair chart as PNG (vl-convert) next to its JSON spec, for docs/reproductions.md."""

from __future__ import annotations

from pathlib import Path

import altair as alt


def save(chart: alt.Chart, path: Path) -> Path:
    """Write `path` (.png when vl-convert is importable, else .html) and return it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        import vl_convert as vlc
    except ImportError:
        out = path.with_suffix(".html")
        chart.save(out)
        return out
    out = path.with_suffix(".png")
    out.write_bytes(vlc.vegalite_to_png(chart.to_json(), scale=1.5))
    return out
