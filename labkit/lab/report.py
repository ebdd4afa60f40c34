"""`labkit report RUN_DIR`: one self-contained HTML file of a run, readable offline.

Summary, config and the lab's charts of the run's executor (an ATOM run's swap timeline) as static
SVG pictures rendered here by vl-convert (no JavaScript, no CDN: the file opens the same on a
plane, behind a firewall, or attached to an email). Works on a `labkit train` run directory and on
`labkit simulate`'s output directory.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

import vl_convert

from labkit.jsonfile import read_json
from labkit.lab.charts import CHARTS, Spec, with_data
from labkit.lab.peertable import human_bytes
from labkit.lab.rows import rows_of_run
from labkit.runtime.files import SIM_SERIES

REPORT_NAME = "report.html"


def write_report(run_dir: str | Path) -> Path:
    """Write `run_dir/report.html` and return its path."""
    run_dir = Path(run_dir)
    rows = rows_of_run(run_dir)
    data = rows.datasets()
    pictures = [(name, with_data(CHARTS[name]().to_dict(), data)) for name in rows.charts if data[name]]
    series = run_dir / SIM_SERIES
    if series.exists():
        pictures.insert(0, ("simulated throughput", _sim_throughput(_series(series))))
    summary = _read(run_dir / "summary.json", "a summary.json")
    sections = [headline(summary), _table("Summary", summary),
                _table("Config", _read(run_dir / "config.json", "a config.json"))]
    sections += [f'<h2>{html.escape(name)}</h2>\n<div class="chart">{vl_convert.vegalite_to_svg(spec)}</div>'
                 for name, spec in pictures]
    if not pictures:
        sections.append("<p>The run left no events to chart yet.</p>")
    path = run_dir / REPORT_NAME
    path.write_text(_PAGE.format(title=html.escape(f"labkit report: {run_dir.name}"), body="\n".join(sections)),
                    encoding="utf-8")
    return path


def _read(path: Path, what: str) -> dict[str, Any] | None:
    """The JSON object in `path` (None when there is no such file); one ValueError naming the file
    when it is not one."""
    if not path.exists():
        return None
    data = read_json(path, "report", what, finite=False)
    if not isinstance(data, dict):
        raise ValueError(f"{path} is not {what}: a JSON object (it holds a {type(data).__name__})")
    return data


def _series(path: Path) -> list[dict[str, float]]:
    """`labkit simulate`'s throughput series, checked: rows of t, samples_per_s, optimal_samples_per_s."""
    data = read_json(path, "report", "a throughput series of labkit simulate", finite=False)
    keys = ("t", "samples_per_s", "optimal_samples_per_s")
    if not (isinstance(data, list) and all(isinstance(r, dict) and all(isinstance(r.get(k), (int, float, type(None)))
                                                                        for k in keys) for r in data)):
        raise ValueError(f"{path} is not a throughput series of labkit simulate: a list of objects with numbers "
                         f"{', '.join(keys)}")
    return data


def readable(value: Any) -> str:
    """A summary or config value as a reader wants it: text unquoted, 1,234 and 0.1235 rather than
    1234.0000000001, lists and objects as short phrases, a missing value as a dash."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"
    if isinstance(value, list):
        return ", ".join(readable(v) for v in value) or "none"
    if isinstance(value, dict):
        return ", ".join(f"{k} {readable(v)}" for k, v in value.items()) or "none"
    return str(value)


def cell(key: str, value: Any) -> str:
    """A table cell: `readable(value)`, and a byte count (a key naming bytes) as 32.4 MB rather than 32,354,304."""
    numbers = value if isinstance(value, list) else [value]
    if "bytes" in key.split("_") and numbers and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                     for v in numbers):
        return ", ".join(human_bytes(v) for v in numbers)
    return readable(value)


def headline(summary: dict[str, Any] | None) -> str:
    """The run in one line: "finished: validation loss 5.54 → 2.03, 40,900 tokens/s, 40 steps"."""
    if not summary:
        return ""
    s, parts = summary, []
    if isinstance(s.get("val_loss_before"), float) and isinstance(s.get("val_loss_after"), float):
        parts.append(f"validation loss {s['val_loss_before']:.2f} → {s['val_loss_after']:.2f}")
    for key, unit in (("tokens_per_second", "tokens/s"), ("samples_per_s", "samples/s")):
        if isinstance(s.get(key), (int, float)):
            parts.append(f"{readable(float(s[key]))} {unit}")
    if isinstance(s.get("steps"), int):
        parts.append(f"{s['steps']:,} steps")
    status = f"{s['status']}: " if isinstance(s.get("status"), str) else ""
    return f"<p class=\"headline\">{html.escape(status + ', '.join(parts))}</p>" if parts or status else ""


def _table(title: str, values: dict[str, Any] | None) -> str:
    if not values:
        return ""
    cells = "\n".join(f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(cell(str(k), v))}</td></tr>"
                      for k, v in values.items() if k != "stages")
    return f"<h2>{html.escape(title)}</h2>\n<table>\n{cells}\n</table>"


def _sim_throughput(series: list[dict[str, float]]) -> Spec:
    """Achieved vs optimal samples per second over a simulated run."""
    import altair as alt

    melted = [{"t": r["t"], "kind": kind, "samples_per_s": r[kind]}
              for r in series for kind in ("samples_per_s", "optimal_samples_per_s")]
    return alt.Chart(alt.Data(values=melted)).mark_line().encode(
        x=alt.X("t:Q", title="seconds"), y=alt.Y("samples_per_s:Q", title="samples/s"), color="kind:N",
    ).properties(width=640, height=220, title="Throughput, achieved vs optimal").to_dict()


_PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>{title}</title>
<style>body {{ font-family: sans-serif; margin: 2em; }} table {{ border-collapse: collapse; }}
th, td {{ text-align: left; padding: 2px 12px 2px 0; font-size: 13px; }} .chart {{ margin-bottom: 1.5em; }}
.headline {{ font-size: 1.2em; }}</style>
</head><body><h1>{title}</h1>
{body}
</body></html>
"""
