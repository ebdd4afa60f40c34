"""Reading a finished run's directory (or `labkit simulate`'s output) for replay and reports, with
one error naming the file for every way it can be malformed: not a directory, no or unreadable
events.jsonl, a config.json that is no RunConfig, an event whose fields are not the schema's
(labkit.events). Events of a type this version does not know are kept (the folds skip them).
"""

from __future__ import annotations

import math
from pathlib import Path

from labkit.config import RunConfig
from labkit.events import Event
from labkit.jsonfile import read_json
from labkit.runtime.eventlog import read_events

# the number fields of each event type (labkit.events) the charts read; a loss may be null or NaN
NUMBERS = {"hop": ("stage", "bytes", "seconds"), "step": ("step", "loss", "samples", "tokens"),
           "eval": ("step", "val_loss"), "peer": ("stage", "queue"), "load": ("stage", "queue"),
           "sync": ("step", "stage", "peers", "bytes"), "swap": ("submodel", "compute_start", "compute_end")}
MAYBE_NAN = ("loss", "val_loss")


def read_run(run_dir: str | Path) -> tuple[RunConfig | None, list[Event]]:
    """The run's config (None where it left no config.json: a simulation) and its events, each
    checked against the schema; FileNotFoundError or one ValueError naming the file otherwise."""
    run_dir = Path(run_dir)
    if not (run_dir / "events.jsonl").exists():
        what = ("" if run_dir.is_dir() else
                " it is not a directory;" if run_dir.exists() else " it does not exist;")
        raise FileNotFoundError(f"{run_dir} holds no events.jsonl:{what} give a run directory of `labkit train` "
                                "or an output directory of `labkit simulate`")
    config = None
    if (run_dir / "config.json").exists():
        data = read_json(run_dir / "config.json", "report", "a run's config.json", finite=False)
        try:
            config = RunConfig.from_dict(data)
        except (ValueError, TypeError, AttributeError) as exc:  # a ConfigError is a ValueError
            raise ValueError(f"{run_dir / 'config.json'} is not a run's config: a JSON object of RunConfig "
                             f"fields ({exc})") from None
    events = read_events(run_dir / "events.jsonl")
    for number, event in enumerate(events, 1):
        bad = [k for k in NUMBERS.get(event["type"], ()) if not _number(event.get(k), k in MAYBE_NAN)]
        if bad:
            raise event_error(run_dir, number, event, f"{bad[0]}={event.get(bad[0])!r} is not a number")
    return config, events


def event_error(run_dir: str | Path, number: int, event: Event, why: str) -> ValueError:
    """The error for the `number`th event of the run in `run_dir`, which does not fit the schema."""
    return ValueError(f"{Path(run_dir) / 'events.jsonl'}: event {number} (type {event['type']!r}) does not fit "
                      f"the event schema of labkit.events ({why})")


def _number(value: object, maybe_nan: bool) -> bool:
    """An int or float (not a bool); finite unless `maybe_nan` (then None too)."""
    if maybe_nan and value is None:
        return True
    return isinstance(value, (int, float)) and not isinstance(value, bool) and (maybe_nan or math.isfinite(value))
