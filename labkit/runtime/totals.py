"""Running totals of a run, folded from its events as they are emitted.

The event history is bounded; the summary must not be. Totals keep what the summary needs:
first and last validation loss (and the step of the last), tokens and training time, bytes per
stage, kills, divergence, and the requests a virtual device could not keep up with.
"""

from __future__ import annotations

from typing import Any

from labkit.events import Event


class RunTotals:
    """Folds events into the figures of a run's summary."""

    def __init__(self, num_stages: int) -> None:
        self.val_first: float | None = None
        self.val_last: float | None = None
        self.val_step: int | None = None  # the step of the last validation loss
        self.loss_last: float | None = None
        self.tokens = 0
        self.tokens_after_first = 0  # tokens of every step but the first (its time starts the clock)
        self.t_first_step: float | None = None
        self.t_last_step: float | None = None
        self.pipeline = [0] * num_stages
        self.dp = [0] * num_stages
        self.killed = 0
        self.paced = 0  # requests served on a virtual device
        self.overruns = 0  # of them, those whose real compute overran the device's time
        self.overrun_max = 0.0  # the largest such overrun, seconds
        self.diverged: str | None = None  # the reason of the run's first `diverged` event

    def add(self, e: Event) -> None:
        """Fold one event in."""
        kind = e["type"]
        if kind == "hop":
            self.pipeline[e["stage"]] += e["bytes"]
            if "emulated" in e.get("timing", {}):
                self.paced += 1
                if e["timing"]["overrun"] > 0:
                    self.overruns += 1
                    self.overrun_max = max(self.overrun_max, e["timing"]["overrun"])
        elif kind == "sync":
            self.dp[e["stage"]] += e["bytes"]
        elif kind == "step":
            self.tokens += e["tokens"]
            if self.t_first_step is None:
                self.t_first_step = e["t"]
            else:
                self.tokens_after_first += e["tokens"]
            self.t_last_step, self.loss_last = e["t"], e["loss"]
        elif kind == "eval":
            self.val_first = e["val_loss"] if self.val_first is None else self.val_first
            self.val_last, self.val_step = e["val_loss"], e["step"]
        elif kind == "peer" and e["state"] == "killed":
            self.killed += 1
        elif kind == "run" and e["state"] == "diverged" and self.diverged is None:
            self.diverged = e["reason"]

    def summary(self, ended_at: int | None) -> dict[str, Any]:
        """The summary figures of a run that ended at step `ended_at` (None: it failed): losses,
        tokens and throughput, bytes per stage and in total. The validation loss after is the one
        measured at `ended_at` (None if none was), never an earlier one."""
        span = (self.t_last_step or 0.0) - (self.t_first_step or 0.0)
        measured = ended_at is not None and self.val_step == ended_at
        return {
            "val_loss_before": self.val_first,
            "val_loss_after": self.val_last if measured else None,
            "train_loss_last": self.loss_last,
            "tokens": self.tokens,
            "tokens_per_second": self.tokens_after_first / span if span > 0 else None,
            "peers_killed": self.killed,
            "pipeline_bytes": list(self.pipeline),
            "dp_bytes": list(self.dp),
            "pipeline_bytes_total": sum(self.pipeline),
            "dp_bytes_total": sum(self.dp),
        } | ({"device_requests": self.paced, "device_overruns": self.overruns,
              "device_overrun_seconds_max": self.overrun_max} if self.paced else {})
