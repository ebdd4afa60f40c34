"""A notebook launch form over the typed run configs: every change re-validates by building them.

Values are typed into text widgets and parsed here, so nothing is clamped or coerced silently: a
value the configs refuse shows the config's own one-line error (`ConfigError`) beside its field, a
value that does not parse shows one of the same style, and Launch stays disabled until none shows.
Labels' tooltips are the `# ...` comments after each field in labkit/config.py. The executor
choice greys out the fields only other executors read (they are still checked: the config holds them).
"""

from __future__ import annotations

import html
import inspect
import io
import re
import textwrap
import tokenize
from collections.abc import Callable
from dataclasses import fields, replace
from typing import Any

import ipywidgets

from labkit import config as config_module
from labkit.config import (ATOM_DEVICES, BOUNDARIES, EXECUTORS, MODEL_SIZES, SYNC_MODES, WIRE_CODECS, AtomConfig,
                           CompressionConfig, ConfigError, ModelConfig, RunConfig, SyncConfig, TaskPoolConfig,
                           even_split)
from labkit.runtime.launch import backend_refusal

BACKENDS = (("in-process", "inprocess"), ("embedded Dask cluster", "dask"), ("scheduler address", "scheduler"))
SECTIONS = {"model": ModelConfig, "compression": CompressionConfig, "sync": SyncConfig,
            "atom": AtomConfig, "taskpool": TaskPoolConfig}  # nested configs by path
# how each typed field parses: name -> (parser, what is allowed when it does not parse)
INT = (int, "an integer")
FLOAT = (float, "a number")
KINDS: dict[str, tuple[Callable[[str], Any], str]] = {
    "stages": INT, "trainers": INT, "global_batch": INT, "microbatch": INT, "steps": INT, "lr": FLOAT,
    "compression.factor": INT, "sync.inner_steps": INT, "sync.outer_lr": FLOAT, "sync.outer_momentum": FLOAT,
    "rebalance_period": FLOAT, "atom.replicas": INT, "atom.accumulation": INT, "taskpool.frontal": INT,
    "taskpool.backward": INT, "taskpool.slack": FLOAT, "taskpool.grace": FLOAT,
    "atom.budget_mb": (lambda s: float(s) if s else None, "blank (the least budget that fits) or a number of MB"),
    "peers": (lambda s: int(s) if "," not in s else tuple(int(p) for p in s.split(",")),
              "an integer, or a comma list of integers (one per stage)"),
    "layer_split": (lambda s: tuple(int(p) for p in s.split(",")) if s else None,
                    "blank (as even as possible) or a comma list of integers (blocks per stage)"),
}
CHOICES = {"executor": EXECUTORS, "model.size": tuple(MODEL_SIZES), "compression.codec": WIRE_CODECS,
           "compression.boundary": BOUNDARIES, "sync.mode": SYNC_MODES, "atom.device": ATOM_DEVICES,
           "atom.prefetch": (True, False)}
ORDER = ("executor", "model.size", "stages", "peers", "layer_split", "trainers", "global_batch", "microbatch", "steps",
         "lr", "compression.codec", "compression.boundary", "compression.factor", "sync.mode", "sync.inner_steps",
         "sync.outer_lr", "sync.outer_momentum", "rebalance_period", "atom.replicas", "atom.budget_mb",
         "atom.accumulation", "atom.device", "atom.prefetch", "taskpool.frontal", "taskpool.backward", "taskpool.slack",
         "taskpool.grace")  # the config fields, as the form lists them
# the fields only some executors read (by those executors): the form greys them out while another is chosen
ONLY = {("swarm", "taskpool"): ("stages", "peers", "layer_split"),
        ("swarm",): ("trainers", "compression.codec", "compression.boundary", "compression.factor", "sync.mode",
                     "sync.inner_steps", "sync.outer_lr", "sync.outer_momentum", "rebalance_period"),
        ("atom",): tuple(key for key in ORDER if key.startswith("atom.")),
        ("taskpool",): tuple(key for key in ORDER if key.startswith("taskpool."))}
# errors a config reports on a field the form does not show: the field they belong beside
ALIASES = {"compression": "compression.factor", "delayed_updates": "sync.mode"}


def field_comments(cls: type) -> dict[str, str]:
    """The `# ...` comment after each dataclass field of `cls`, read from its source: the one
    place a field's meaning is written, so labels never drift from the configs."""
    names = {f.name for f in fields(cls)}
    source = textwrap.dedent(inspect.getsource(cls))
    comments: dict[str, str] = {}
    line: list[tokenize.TokenInfo] = []
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.NEWLINE:
            first, colon, last = (line[0], line[1], line[-1]) if len(line) > 2 else (None, None, None)
            if first and first.string in names and colon.string == ":" and last.type == tokenize.COMMENT:
                comments.setdefault(first.string, last.string.lstrip("#").strip())
            line = []
        elif tok.type == tokenize.NL and all(t.type == tokenize.COMMENT for t in line):
            line = []  # a comment on a line of its own belongs to no field
        elif tok.type not in (tokenize.NL, tokenize.INDENT, tokenize.DEDENT):
            line.append(tok)
    return comments


def _with_bounds(comment: str) -> str:
    """A comment with the config's named bounds spelled out ("in (0, MAX_LR]" -> "in (0, MAX_LR = 10]")."""
    def spelled(m: re.Match) -> str:
        value = getattr(config_module, m[0], None)
        return f"{m[0]} = {value:g}" if isinstance(value, (int, float)) else m[0]

    return re.sub(r"\bMAX_[A-Z_]+\b", spelled, comment)


def _owner(key: str) -> str:
    """The config class that owns form field `key` ("sync.outer_lr" -> "SyncConfig")."""
    return SECTIONS[key.split(".")[0]].__name__ if "." in key else RunConfig.__name__


def _error_key(exc: ConfigError) -> str:
    """The form field a config's error belongs beside ("" if the form does not show it)."""
    owner = str(exc).split(".", 1)[0]
    prefix = next((f"{path}." for path, cls in SECTIONS.items() if cls.__name__ == owner), "")
    key = ALIASES.get(prefix + exc.field, prefix + exc.field)
    return key if key in KINDS or key in CHOICES else ""


def _text(value: Any) -> str:
    """A config value as the form shows it (tuples as comma lists, None as blank)."""
    if value is None:
        return ""
    return ",".join(str(v) for v in value) if isinstance(value, tuple) else str(value)


class LaunchForm:
    """The launch form: `widget` to display, `fields`/`errors` by config path, `launch_button`.

    >>> form = LaunchForm(lambda cfg, options: labkit.launch(cfg, **options))   # doctest: +SKIP
    """

    def __init__(self, on_launch: Callable[[RunConfig, dict[str, Any]], None],
                 defaults: RunConfig | None = None) -> None:
        self._on_launch = on_launch
        self._defaults = defaults if defaults is not None else RunConfig()
        comments = {**field_comments(RunConfig), **{f"{path}.{name}": text for path, cls in SECTIONS.items()
                                                    for name, text in field_comments(cls).items()}}
        self.fields: dict[str, ipywidgets.Widget] = {}
        for key in ORDER:
            value = self._default(key)
            if key in CHOICES:
                widget = ipywidgets.Dropdown(options=CHOICES[key], value=value)
            else:
                widget = ipywidgets.Text(value=_text(value))
            widget.tooltip = _with_bounds(comments.get(key, ""))
            self.fields[key] = widget
        self.fields["backend"] = ipywidgets.Dropdown(options=BACKENDS, value="inprocess", tooltip=(
            "where peers run: threads of this kernel, a Dask cluster started here, or the scheduler below"))
        self.fields["scheduler"] = ipywidgets.Text(placeholder="tcp://host:8786", tooltip="address of a running `dask scheduler`")
        self.errors = {key: ipywidgets.HTML(style={"text_color": "#b00020"}) for key in self.fields}
        self.message = ipywidgets.HTML(style={"text_color": "#b00020"})  # errors on fields not shown, launch failures
        self.launch_button = ipywidgets.Button(description="Launch", button_style="primary", icon="play")
        self.launch_button.on_click(self._launch)
        for widget in self.fields.values():
            widget.observe(self._validate, names="value")
        self.widget = ipywidgets.VBox([self._row(key) for key in self.fields]
                                      + [ipywidgets.HBox([self.launch_button, self.message])])
        self._validate()

    def _default(self, key: str) -> Any:
        """The value `defaults` gives field `key` (an even layer split shows as blank: "as even as possible")."""
        d = self._defaults
        if key == "layer_split" and d.layer_split == even_split(d.model.n_layer, d.stages):
            return None
        section, _, name = key.rpartition(".")
        return getattr(getattr(d, section) if section else d, name)

    def _row(self, key: str) -> ipywidgets.Widget:
        label = ipywidgets.Label(key, tooltip=self.fields[key].tooltip, layout={"width": "11em"})
        return ipywidgets.HBox([label, self.fields[key], self.errors[key]])

    def _build(self) -> tuple[RunConfig | None, dict[str, ValueError]]:
        """The config the form describes, or the errors found (by field; "" for unshown ones)."""
        values: dict[str, Any] = {key: self.fields[key].value for key in CHOICES}
        errors: dict[str, ValueError] = {}
        for key, (parse, allowed) in KINDS.items():
            text = self.fields[key].value.strip()
            try:
                values[key] = parse(text)
            except ValueError:
                errors[key] = ConfigError(_owner(key), key.split(".")[-1], text, allowed)
        if self.fields["backend"].value == "scheduler" and not self.fields["scheduler"].value.strip():
            errors["scheduler"] = ConfigError("launch", "scheduler", "", "a Dask scheduler address, e.g. tcp://host:8786")
        if errors:
            return None, errors
        changes: dict[str, Any] = {key: value for key, value in values.items() if "." not in key}
        for path in SECTIONS:
            try:
                changes[path] = replace(getattr(self._defaults, path), **{key.split(".")[1]: value for key, value
                                                                          in values.items() if key.startswith(path + ".")})
            except ConfigError as exc:
                errors[_error_key(exc)] = exc
        if errors:
            return None, errors
        try:
            cfg = self._defaults.replace(**changes)
        except ConfigError as exc:
            return None, {_error_key(exc): exc}
        refusal = backend_refusal(cfg, self.launch_options()["backend"])  # launch's own words, before launching
        return (None, {"backend": ValueError(refusal)}) if refusal else (cfg, {})

    def _validate(self, _change: Any = None) -> None:
        """Re-validate every field; show each error beside its field; Launch only when none."""
        self.fields["scheduler"].disabled = self.fields["backend"].value != "scheduler"
        for executors, keys in ONLY.items():
            for key in keys:
                self.fields[key].disabled = self.fields["executor"].value not in executors
        _, errors = self._build()
        for key, shown in self.errors.items():
            shown.value = html.escape(str(errors[key]), quote=False) if key in errors else ""
        self.message.value = html.escape(str(errors[""]), quote=False) if "" in errors else ""
        self.launch_button.disabled = bool(errors)

    def config(self) -> RunConfig:
        """The config the form describes; raises the first ConfigError shown."""
        cfg, errors = self._build()
        if cfg is None:
            raise next(iter(errors.values()))
        return cfg

    def launch_options(self) -> dict[str, Any]:
        """Keyword arguments of `labkit.launch` for the chosen backend."""
        backend = self.fields["backend"].value
        if backend == "scheduler":
            return {"backend": "dask", "scheduler": self.fields["scheduler"].value.strip()}
        return {"backend": backend}

    def _launch(self, _button: ipywidgets.Button) -> None:
        try:
            self._on_launch(self.config(), self.launch_options())
        except Exception as exc:  # one line beside Launch, never a traceback in the notebook
            self.message.value = html.escape(f"launch: {(str(exc) or repr(exc)).splitlines()[0]}", quote=False)
