"""`labkit train`'s --executor and each executor's own flags, made from the registered specs.

Every field of an executor's config that its spec lists for the form becomes a flag of the same
name (`budget_mb` -> `--budget-mb`; a field that is on by default -> `--no-<field>`), its help the
field's comment. A flag left out takes the chosen executor's default; a flag of another executor
is refused with one error naming the executor it belongs to.
"""

from __future__ import annotations

import argparse
from typing import Any

from labkit.config_checks import field_comments
from labkit.executors.registry import DEFAULT, NAMES, SPECS, spec_of
from labkit.executors.spec import FormField

PREFIX = "executor_"  # the argparse dest of an executor's field: executor_<field>


def _ints(text: str) -> int | tuple[int, ...]:
    """One integer, or a comma list of them (one per stage)."""
    try:
        parts = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer or a comma list of integers, e.g. 2 or 1,2") from None
    return parts[0] if len(parts) == 1 else parts


TYPES = {"int": int, "float": float, "optional_float": float, "ints": _ints}


def _switch(field: FormField, default: Any) -> bool:
    """Whether `field` is an on/off switch (a choice of True or False)."""
    return field.kind == "choice" and set(field.choices) == {True, False} and isinstance(default, bool)


def add_executor_flags(p: argparse.ArgumentParser) -> None:
    """--executor, then every registered executor's own flags (a name two executors share is one flag)."""
    p.add_argument("--executor", choices=NAMES, default=DEFAULT,
                   help="; ".join(f"{spec.name}: {spec.title}" for spec in SPECS.values()))
    owners: dict[str, list[str]] = {}
    for spec in SPECS.values():
        comments, defaults = field_comments(spec.config), spec.config()
        for field in spec.form:
            owners.setdefault(field.name, []).append(spec.name)
            if len(owners[field.name]) > 1:
                continue
            default, name = getattr(defaults, field.name), field.name.replace("_", "-")
            about = f"{spec.name}: {comments.get(field.name, field.name)}"
            shown = "" if default is None else f" (default: {default})"  # None: the comment says what it means
            if _switch(field, default):
                p.add_argument(f"--no-{name}" if default else f"--{name}", dest=PREFIX + field.name,
                               action="store_const", const=not default, default=None,
                               help=f"{about} ({'on' if default else 'off'} unless this flag is given)")
            elif field.kind == "choice":
                p.add_argument(f"--{name}", dest=PREFIX + field.name, choices=field.choices, default=None,
                               help=about + shown)
            else:
                p.add_argument(f"--{name}", dest=PREFIX + field.name, type=TYPES[field.kind], default=None,
                               metavar=field.name.upper(), help=about + shown)
    p.set_defaults(flag_owners=owners)


def executor_from_args(args: argparse.Namespace) -> Any:
    """The chosen executor's config, with the flags given; ValueError for a flag it has no field for."""
    spec = spec_of(args.executor)
    given = {key[len(PREFIX):]: value for key, value in vars(args).items()
             if key.startswith(PREFIX) and value is not None}
    own = {field.name for field in spec.form}
    for name in given.keys() - own:
        flag = "--" + name.replace("_", "-")
        raise ValueError(f"{flag} is not allowed with --executor {spec.name}: it sets "
                         f"{' or '.join(args.flag_owners[name])}'s {name}")
    return spec.config(**given)
