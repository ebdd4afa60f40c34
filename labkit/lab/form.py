"""A notebook launch form over the typed run configs: every change re-validates by building them.

Values are typed into text widgets and parsed here, so nothing is clamped or coerced silently: a
value the configs refuse shows the config's own one-line error (`ConfigError`) beside its field, a
value that does not parse shows one of the same style, and Launch stays disabled until none shows.
Labels' tooltips are the `# ...` comments after each field of the configs. The fields come from
labkit/config.py and from every registered executor's spec (its own config's fields, named
"<executor>.<field>"); choosing an executor greys out the fields it does not read. Choosing a
preset world runs it (labkit/runtime/world.py): its stages, peers, trainers and batch replace those
typed above.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import ipywidgets

from labkit import config as config_module
from labkit.config import (BOUNDARIES, MODEL_SIZES, SYNC_MODES, WIRE_CODECS, CompressionConfig, ConfigError, ModelConfig,
                           RunConfig, SyncConfig, even_split)
from labkit.config_checks import field_comments
from labkit.executors.registry import NAMES, SPECS
from labkit.executors.spec import FormField
from labkit.runtime.launch import backend_refusal
from labkit.runtime.world import world_config
from labkit.sim.presets import WORLD_PRESETS

BACKENDS = (("in-process", "inprocess"), ("embedded Dask cluster", "dask"), ("scheduler address", "scheduler"))
RUN_SECTIONS = {"model": ModelConfig, "compression": CompressionConfig, "sync": SyncConfig}  # nested run configs by path
SECTIONS = {**RUN_SECTIONS, **{name: spec.config for name, spec in SPECS.items()}}  # and each executor's own config
# how each typed field parses: name -> (parser, what is allowed when it does not parse)
INT = (int, "an integer")
FLOAT = (float, "a number")
PARSERS: dict[str, tuple[Callable[[str], Any], str]] = {  # an executor's form field, by kind (see FormField)
    "int": INT, "float": FLOAT,
    "optional_float": (lambda s: float(s) if s else None, "blank (the least that works) or a number"),
    "ints": (lambda s: int(s) if "," not in s else tuple(int(p) for p in s.split(",")),
             "an integer, or a comma list of integers (one per stage)"),
}


def _executor_fields() -> dict[str, FormField]:
    """Every registered executor's form fields, by form key ("<executor>.<field>")."""
    return {f"{name}.{f.name}": f for name, spec in SPECS.items() for f in spec.form}


EXECUTOR_FIELDS = _executor_fields()
KINDS: dict[str, tuple[Callable[[str], Any], str]] = {
    "stages": INT, "trainers": INT, "global_batch": INT, "microbatch": INT, "steps": INT, "lr": FLOAT,
    "compression.factor": INT, "sync.inner_steps": INT, "sync.outer_lr": FLOAT, "sync.outer_momentum": FLOAT,
    "rebalance_period": FLOAT,
    "peers": PARSERS["ints"],
    "layer_split": (lambda s: tuple(int(p) for p in s.split(",")) if s else None,
                    "blank (as even as possible) or a comma list of integers (blocks per stage)"),
    **{key: PARSERS[f.kind] for key, f in EXECUTOR_FIELDS.items() if f.kind != "choice"},
}
WORLDS = (("none", None), *((f"{name} ({preset().initial_peers} virtual GPUs)", name) for name, preset in WORLD_PRESETS.items()))
CHOICES = {"world": WORLDS, "executor": NAMES, "model.size": tuple(MODEL_SIZES), "compression.codec": WIRE_CODECS,
           "compression.boundary": BOUNDARIES, "sync.mode": SYNC_MODES,
           **{key: f.choices for key, f in EXECUTOR_FIELDS.items() if f.kind == "choice"}}
ORDER = ("executor", "model.size", "stages", "peers", "layer_split", "trainers", "global_batch", "microbatch", "steps",
         "lr", "compression.codec", "compression.boundary", "compression.factor", "sync.mode", "sync.inner_steps",
         "sync.outer_lr", "sync.outer_momentum", "rebalance_period", "world", *EXECUTOR_FIELDS)  # as the form lists them
# the run fields some executor declares it reads (the others are read by every executor)
DECLARED = {key for spec in SPECS.values() for key in spec.run_fields}
# errors a config reports on a field the form does not show: the field they belong beside
ALIASES = {"compression": "compression.factor", "delayed_updates": "sync.mode"}


def enabled(key: str, executor: str) -> bool:
    """Whether a run of `executor` reads form field `key`: its own config's fields, the run fields its
    spec declares, and the run fields no executor declares."""
    section = key.split(".")[0]
    if section in SPECS:
        return section == executor
    return key not in DECLARED or key in SPECS[executor].run_fields


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
        if key == "executor":
            return d.executor.name
        section, _, name = key.rpartition(".")
        if section in SPECS:  # an executor's own field: the defaults' if it is that executor, else its config's default
            own = d.executor if d.executor.name == section else SPECS[section].config()
            return getattr(own, name)
        return getattr(getattr(d, section) if section else d, name)

    def _row(self, key: str) -> ipywidgets.Widget:
        label = ipywidgets.Label(key, tooltip=self.fields[key].tooltip, layout={"width": "11em"})
        return ipywidgets.HBox([label, self.fields[key], self.errors[key]])

    def _build(self) -> tuple[RunConfig | None, dict[str, ValueError]]:
        """The config the form describes, or the errors found (by field; "" for unshown ones)."""
        executor = self.fields["executor"].value
        values: dict[str, Any] = {key: self.fields[key].value for key in CHOICES if enabled(key, executor)}
        errors: dict[str, ValueError] = {}
        for key, (parse, allowed) in KINDS.items():
            if not enabled(key, executor) and key.split(".")[0] in SPECS:
                continue  # another executor's field: this run has no such config
            text = self.fields[key].value.strip()
            try:
                values[key] = parse(text)
            except ValueError:
                errors[key] = ConfigError(_owner(key), key.split(".")[-1], text, allowed)
        if self.fields["backend"].value == "scheduler" and not self.fields["scheduler"].value.strip():
            errors["scheduler"] = ConfigError("launch", "scheduler", "", "a Dask scheduler address, e.g. tcp://host:8786")
        if errors:
            return None, errors
        world = values.pop("world", None)  # a preset world sets the shape fields above when chosen
        changes: dict[str, Any] = {key: value for key, value in values.items() if "." not in key}
        own = self._defaults.executor if self._defaults.executor.name == executor else SPECS[executor].config()
        for path, base in [*((p, getattr(self._defaults, p)) for p in RUN_SECTIONS), (executor, own)]:
            try:
                built = replace(base, **{key.split(".")[1]: value for key, value in values.items()
                                         if key.startswith(path + ".")})
            except ConfigError as exc:
                errors[_error_key(exc)] = exc
                continue
            changes["executor" if path == executor else path] = built
        if errors:
            return None, errors
        try:
            cfg = self._defaults.replace(**changes)
            cfg = cfg if world is None else world_config(world, cfg)
        except ConfigError as exc:
            return None, {_error_key(exc): exc}
        refusal = backend_refusal(cfg, self.launch_options()["backend"])  # launch's own words, before launching
        return (None, {"backend": ValueError(refusal)}) if refusal else (cfg, {})

    def _validate(self, _change: Any = None) -> None:
        """Re-validate every field; show each error beside its field; Launch only when none."""
        self.fields["scheduler"].disabled = self.fields["backend"].value != "scheduler"
        for key in ORDER:
            self.fields[key].disabled = not enabled(key, self.fields["executor"].value)
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
