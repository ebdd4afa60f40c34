"""Run controls: every steering verb of a `RunHandle` behind a widget, carried out off the kernel.

Verbs run in order on one worker thread per panel, so a click never blocks the notebook (a Dask
verb is a round trip to the cluster); each answers in one status line, its first error line or a
short success line, never a traceback. The peer table is redrawn only when the run's membership
changes; otherwise `refresh` (the Lab's refresher, a few times a second) only updates labels.
The verbs an executor refuses are greyed out (`refused`): an ATOM run's stage verbs, a task-pool
run's all but Kill, slow and Add peer; Stop and Checkpoint work for every run.
"""

from __future__ import annotations

import html
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import ipywidgets

from labkit.config import SYNC_MODES, WIRE_CODECS, SyncConfig
from labkit.lab.peertable import CELL, COLUMNS, HEADERS, PeerRow, button, refused, stage_options
from labkit.runtime.handle import RunHandle

ERROR_COLOR, OK_COLOR = "#b00020", "#1b5e20"


def first_line(exc: BaseException) -> str:
    """An exception's message in one line (a KeyError's without the quotes str() adds)."""
    text = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
    return (str(text) or type(exc).__name__).splitlines()[0]


class RunControls:
    """Buttons and a live peer table that steer `run`; `widget` to display, `status` for answers."""

    def __init__(self, run: RunHandle) -> None:
        self.run = run
        cfg = run.config
        self._stages = cfg.stages
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="labkit-controls")
        self._pending: Future | None = None
        self._closed = False
        self.status = ipywidgets.HTML()
        self.summary = ipywidgets.HTML()
        self.dashboard = ipywidgets.HTML()
        self.dashboard_link: Future = Future()  # the Dask dashboard's address (None without one), once known
        self.rows: dict[str, PeerRow] = {}
        self._header = ipywidgets.HBox([ipywidgets.HTML(f"<b>{HEADERS.get(c, c)}</b>", layout=CELL) for c in COLUMNS])
        self.table = ipywidgets.VBox([self._header])

        self.stop_button = button("Stop", "warning")
        self.stop_button.on_click(lambda _: self._submit("stop", run.stop, lambda _: "stop asked: the run ends "
                                                         "after the microbatches in flight"))
        self.rebalance_button = button("Rebalance now")
        self.rebalance_button.on_click(lambda _: self._submit("rebalance", run.rebalance, lambda new: (
            f"rebalanced: a peer moved, now {new}" if new else "rebalanced: no move needed")))
        self.add_stage = ipywidgets.Dropdown(options=stage_options(cfg.stages), layout={"width": "7em"})
        self.add_button = button("Add peer")
        self.add_button.on_click(lambda _: self._add(self.add_stage.value))

        self.split = [ipywidgets.IntText(value=n, layout={"width": "4em"}) for n in cfg.layer_split]
        self._split_seen = tuple(cfg.layer_split)
        self.split_button = button("Apply split")
        self.split_button.on_click(lambda _: self._set_split([w.value for w in self.split]))

        self._codec_applied, self._sync_applied = cfg.compression.codec, cfg.sync  # what the run has now
        self.codec = ipywidgets.Dropdown(options=WIRE_CODECS, value=cfg.compression.codec, layout={"width": "7em"})
        self.codec.observe(lambda change: self._set_codec(change["new"]), names="value")
        self.staged = cfg.spec.staged  # else every worker holds the whole model: no stage to pick
        if not self.staged:
            self.add_stage.options, self.add_stage.disabled = [(cfg.spec.worker_word, 0)], True

        self.sync_mode = ipywidgets.ToggleButtons(options=SYNC_MODES, value=cfg.sync.mode)
        # a label as wide as its text (the default 80 px label left "H" a box too narrow for "20")
        labelled = {"style": {"description_width": "initial"}, "layout": {"width": "12em"}}
        self.inner_steps = ipywidgets.IntText(value=cfg.sync.inner_steps, description="H", **labelled)
        self.outer_lr = ipywidgets.FloatText(value=cfg.sync.outer_lr, description="outer lr", **labelled)
        self.outer_momentum = ipywidgets.FloatText(value=cfg.sync.outer_momentum, description="momentum", **labelled)
        self.sync_button = button("Apply sync")
        self.sync_button.on_click(lambda _: self._set_sync())

        default_path = run.run_dir / "lab-checkpoint.pt" if run.run_dir else "lab-checkpoint.pt"
        self.checkpoint_path = ipywidgets.Text(value=str(default_path), layout={"width": "24em"})
        self.checkpoint_button = button("Checkpoint")
        self.checkpoint_button.on_click(lambda _: self._checkpoint(self.checkpoint_path.value.strip()))

        line = ipywidgets.HBox
        self.widget = ipywidgets.VBox([
            line([self.stop_button, self.rebalance_button, ipywidgets.Label("add a peer to"), self.add_stage,
                  self.add_button, self.summary]),
            self.table,
            line([ipywidgets.Label("blocks per stage"), *self.split, self.split_button]),
            line([ipywidgets.Label("codec"), self.codec, ipywidgets.Label("sync"), self.sync_mode]),
            line([self.inner_steps, self.outer_lr, self.outer_momentum, self.sync_button]),
            line([self.checkpoint_path, self.checkpoint_button, self.dashboard]),
            self.status,
        ])
        refused(cfg.spec, rebalance=[self.rebalance_button], set_layer_split=[*self.split, self.split_button],
                set_compression=[self.codec], set_sync=[self.sync_mode, self.inner_steps, self.outer_lr,
                                                        self.outer_momentum, self.sync_button])
        if cfg.spec.notice:
            self._say(cfg.spec.notice)
        threading.Thread(target=self._find_dashboard, name="labkit-dashboard-link", daemon=True).start()

    # -- carrying out verbs ---------------------------------------------------------------------
    def _say(self, text: str, ok: bool = True) -> None:
        self.status.style.text_color = OK_COLOR if ok else ERROR_COLOR
        self.status.value = html.escape(text, quote=False)

    def _submit(self, verb: str, call: Callable[[], Any], said: Callable[[Any], str | None],
                undo: Callable[[], None] = lambda: None) -> Future:
        """Run `call` on the verbs' thread; say `said(result)` or the error's first line (and
        `undo`: put the widgets back to what the run has, when it refused)."""
        def task() -> Any:
            try:
                result = call()
            except Exception as exc:
                undo()
                self._say(f"{verb}: {first_line(exc)}", ok=False)
                raise
            text = said(result)
            if text is not None:
                self._say(text)
            return result

        if self._closed:
            undo()
            self._say(f"{verb}: the controls are closed", ok=False)
            failed: Future = Future()
            failed.set_exception(RuntimeError(f"{verb}: the controls are closed"))
            return failed
        self._pending = self._pool.submit(task)
        return self._pending

    def pending(self) -> Future | None:
        """The future of the last verb asked for (a checkpoint's resolves to the saved path)."""
        return self._pending

    def _add(self, stage: int) -> None:
        place = f"the {self.run.config.spec.worker_word}" if not self.staged else f"stage {stage}"
        self._submit("add_peer", lambda: self.run.add_peer(stage), lambda name: f"added {name} to {place}")

    def _kill(self, name: str) -> None:
        self._submit("kill_peer", lambda: self.run.kill_peer(name), lambda _: f"killed {name}")

    def _move(self, name: str, stage: int) -> None:
        self._submit("move_peer", lambda: self.run.move_peer(name, stage), lambda new: f"moved {name} → {new}")

    def _slow(self, name: str, seconds: float) -> None:
        self._submit("set_peer_delay", lambda: self.run.set_peer_delay(name, seconds),
                     lambda _: f"{name} slowed by {seconds:g} s per request" if seconds else f"{name} at full speed")

    def _set_split(self, split: list[int]) -> None:
        self._submit("set_layer_split", lambda: self.run.set_layer_split(split),
                     lambda _: f"layer split → {split} at the next step boundary")

    def _set_codec(self, codec: str) -> None:
        """Ask for `codec`; a refusal puts the dropdown back on the codec the run has."""
        if codec == self._codec_applied:  # the dropdown put back after a refusal: nothing to ask
            return

        def switch() -> None:
            self.run.set_compression(codec)
            self._codec_applied = codec

        self._submit("set_compression", switch, lambda _: f"codec → {codec}",
                     undo=lambda: setattr(self.codec, "value", self._codec_applied))

    def _set_sync(self) -> None:
        values = {"mode": self.sync_mode.value, "inner_steps": self.inner_steps.value,
                  "outer_lr": self.outer_lr.value, "outer_momentum": self.outer_momentum.value}

        def switch() -> SyncConfig:
            sync = replace(self._sync_applied, **values)  # SyncConfig's own checks, in the status line
            self.run.set_sync(sync)
            self._sync_applied = sync
            return sync

        def undo() -> None:
            applied = self._sync_applied
            self.sync_mode.value, self.inner_steps.value = applied.mode, applied.inner_steps
            self.outer_lr.value, self.outer_momentum.value = applied.outer_lr, applied.outer_momentum

        self._submit("set_sync", switch, lambda sync: f"sync → {sync.mode} at the next outer-step boundary", undo)

    def _checkpoint(self, path: str) -> None:
        """Ask for a checkpoint; its future's callback reports the saved path (nothing waits)."""
        saved: Future = Future()

        def done(future: Future) -> None:
            try:
                where = future.result()
            except Exception as exc:
                self._say(f"checkpoint: {first_line(exc)}", ok=False)
                saved.set_exception(exc)
                return
            self._say(f"checkpoint saved: {where}")
            saved.set_result(where)

        def start() -> None:
            self._say(f"checkpoint: saving {path} at the next step boundary")
            self.run.checkpoint(path).add_done_callback(done)

        def not_started(future: Future) -> None:
            if future.cancelled() or future.exception() is not None:
                saved.set_exception(future.exception() if not future.cancelled() else RuntimeError("cancelled"))

        self._submit("checkpoint", start, lambda _: None).add_done_callback(not_started)
        self._pending = saved

    def _find_dashboard(self) -> None:
        """Show the Dask dashboard's link once known (asking may wait for the cluster)."""
        try:
            link = self.run.dashboard()
        except Exception as exc:
            self.dashboard.value = html.escape(f"dashboard: {first_line(exc)}", quote=False)
            self.dashboard_link.set_exception(exc)
            return
        if link:
            self.dashboard.value = f'<a href="{html.escape(link)}" target="_blank">Dask dashboard</a>'
        self.dashboard_link.set_result(link)

    # -- the live table --------------------------------------------------------------------------
    def refresh(self, state: dict[str, Any], totals: dict[str, dict[str, float]]) -> None:
        """Show `state` (run.state()) and per-peer `totals`; rows are added or removed only when
        the live peers change, otherwise only label values are set."""
        live = {p["peer"]: (s["stage"], p) for s in state.get("stages", []) for p in s["peers"]}
        if not self.staged:  # whole-model workers send no hops: what each served is its processed samples
            totals = {name: {"microbatches": p.get("samples", 0) // self.run.config.microbatch, "bytes": 0}
                      for name, (_, p) in live.items()}
        if live.keys() != self.rows.keys():
            for name in self.rows.keys() - live.keys():
                self.rows.pop(name).close()
            for name in live.keys() - self.rows.keys():
                self.rows[name] = self._row(name, *live[name])
            order = sorted(self.rows, key=lambda n: (live[n][0], len(n), n))
            self.table.children = (self._header, *(self.rows[n].widget for n in order))
        status = state.get("status", "?")
        for name, (_, peer) in live.items():
            delay = peer.get("delay", 0.0)
            shown = status if status != "running" else f"slowed {delay:g} s" if delay else "serving"
            self.rows[name].update(shown, peer, totals.get(name, {}))
        split = tuple(len(s["layers"]) for s in state.get("stages", []))
        if len(split) == len(self.split) and split != self._split_seen:
            self._split_seen = split
            for widget, blocks in zip(self.split, split):
                widget.value = blocks
        loss = state.get("loss")
        self.summary.value = html.escape(f"{status} · step {state.get('step', 0)}/{state.get('steps', '?')}"
                                         + (f" · loss {loss:.3f}" if isinstance(loss, float) else ""), quote=False)

    def _row(self, name: str, stage: int, peer: dict[str, Any]) -> PeerRow:
        row = PeerRow(name, stage, self._stages, float(peer.get("delay", 0.0)))
        row.kill.on_click(lambda _: self._kill(name))
        row.slow.on_click(lambda _: self._slow(name, row.delay.value))
        row.move.on_click(lambda _: self._move(name, row.target.value))
        refused(self.run.config.spec, set_peer_delay=[row.delay, row.slow], move_peer=[row.target, row.move])
        return row

    def close(self) -> None:
        """Stop taking verbs; the one in progress finishes, queued ones are dropped."""
        self._closed = True
        self._pool.shutdown(wait=False, cancel_futures=True)
