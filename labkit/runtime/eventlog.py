"""A run's live event stream: thread-safe history, subscriber queues and a JSONL file."""

from __future__ import annotations

import json
import queue
import threading
from collections import deque
from collections.abc import Callable
from itertools import islice
from pathlib import Path

from labkit.config_checks import is_number
from labkit.events import Event
from labkit.jsonfile import JSONValueError, parse_json, regular_file


class EventLog:
    """Fan-out of events to a bounded history, to subscribers and (optionally) to a JSONL file.

    >>> log = EventLog(); q = log.subscribe(); log.emit({"type": "run", "t": 0.0})
    >>> q.get_nowait()["type"]
    'run'
    """

    def __init__(self, path: Path | None = None, keep: int = 200_000) -> None:
        self._lock = threading.Lock()
        self._history: deque[Event] = deque(maxlen=keep)
        self._count = 0  # events emitted so far: the index the next one gets
        self._latest: dict[str, Event] = {}  # the last event of each type
        self._subscribers: list[queue.Queue[Event]] = []
        self.listeners: list[Callable[[Event], None]] = []  # called with every event, in order
        self._file = open(path, "a", encoding="utf-8") if path else None

    def emit(self, event: Event) -> None:
        """Record one event and hand it to every subscriber."""
        with self._lock:
            self._history.append(event)
            self._latest[event["type"]] = event
            self._count += 1
            for listener in self.listeners:
                listener(event)
            for q in self._subscribers:
                q.put(event)
            if self._file:
                self._file.write(json.dumps(event) + "\n")

    def subscribe(self) -> queue.Queue[Event]:
        """A queue that receives every event emitted from now on."""
        q: queue.Queue[Event] = queue.Queue()
        with self._lock:
            self._subscribers.append(q)
        return q

    def unsubscribe(self, q: queue.Queue[Event]) -> None:
        with self._lock:
            if q in self._subscribers:
                self._subscribers.remove(q)

    def history(self, kind: str | None = None) -> list[Event]:
        """Events so far (the last `keep`), optionally only of one type."""
        with self._lock:
            return [e for e in self._history if kind is None or e["type"] == kind]

    def latest(self, kind: str) -> Event | None:
        """The last event of type `kind` emitted so far (None if none was)."""
        with self._lock:
            return self._latest.get(kind)

    def since(self, index: int) -> tuple[list[Event], int]:
        """Events numbered `index` onward that are still in the history, and the next index
        (a reader that polls with the returned index sees every event once)."""
        with self._lock:
            new = min(max(0, self._count - index), len(self._history))
            return list(islice(reversed(self._history), new))[::-1], self._count

    def close(self) -> None:
        with self._lock:
            if self._file:
                self._file.close()
                self._file = None


def read_events(path: Path) -> list[Event]:
    """The events of a run's `events.jsonl` (a line cut short by a crash ends the list; any
    other bad line is one ValueError naming the file and line; a file that is not a regular file
    of at most MAX_BYTES, or not UTF-8, is one ConfigError naming it)."""
    out: list[Event] = []
    raw = regular_file(path, "report", "a run's events.jsonl").read_bytes()
    try:
        lines = raw.decode("utf-8").split("\n")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path} is not UTF-8 text (byte {exc.start}); events.jsonl holds one JSON object per line") from None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            event = parse_json(line, finite=False)
        except json.JSONDecodeError as exc:
            if number >= len(lines) - 1:  # the last line, written when the process died
                break
            raise ValueError(f"{path}:{number} is not a JSON event ({exc.msg}); events.jsonl holds one JSON object per line") from None
        except JSONValueError as exc:
            raise ValueError(f"{path}:{number} is not a JSON event ({exc}); events.jsonl holds one JSON object per line") from None
        if not (isinstance(event, dict) and isinstance(event.get("type"), str) and is_number(event.get("t"))):
            raise ValueError(f"{path}:{number} is not an event: a JSON object with a 'type' name and a 't' number")
        out.append(event)
    return out
