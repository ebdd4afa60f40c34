"""pyproject.toml, environment.yml and binder/environment.yml agree on every dependency, so a
conda user and a binder session get what `pip install -e .` gets (binder: the package itself is
installed by binder/postBuild with --no-deps, so a dependency missing there breaks the lab)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).parents[2]
CONDA_NAMES = {"torch": ["pytorch-cpu"], "dask[distributed]": ["dask", "distributed"]}  # pip name -> conda's
NOT_PACKAGES = {"python", "pip", "-e ."}
BINDER_EXTRAS = {"dask-labextension", "jupyter-server-proxy"}  # the Dask dashboard inside JupyterLab


def requirement(spec: str) -> tuple[str, str]:
    """(name, pin) of a requirement like 'hivemind==1.1.12' (pin '' unless exact)."""
    name = re.split(r"[<>=!~ ]", spec.strip(), maxsplit=1)[0]
    pin = spec.split("==", 1)[1].strip() if "==" in spec else ""
    return name, pin


def package(extra: str | None = None) -> dict[str, str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    specs = project["dependencies"] if extra is None else project["optional-dependencies"][extra]
    out: dict[str, str] = {}
    for spec in specs:
        name, pin = requirement(spec)
        for conda_name in CONDA_NAMES.get(name, [name]):
            out[conda_name] = pin
    return out


def environment(path: Path) -> dict[str, str]:
    deps: dict[str, str] = {}
    for item in yaml.safe_load(path.read_text())["dependencies"]:
        for spec in item["pip"] if isinstance(item, dict) else [item]:
            if spec in NOT_PACKAGES or spec.startswith("python="):
                continue
            name, pin = requirement(spec)
            deps[name] = pin
    return deps


@pytest.mark.parametrize(("path", "extras"), [
    ("environment.yml", set(package("test"))),
    ("binder/environment.yml", BINDER_EXTRAS),
])
def test_every_dependency_of_the_package_is_in_the_environment_with_the_same_pin(path: str, extras: set[str]) -> None:
    env, wanted = environment(ROOT / path), package()
    missing = sorted(set(wanted) - set(env))
    assert not missing, f"{path} lacks {missing}, which pyproject.toml's dependencies list"
    pins = {name: (wanted[name], env[name]) for name in wanted if wanted[name] != env[name]}
    assert not pins, f"{path} pins differently from pyproject.toml (package, environment): {pins}"
    unknown = sorted(set(env) - set(wanted) - extras)
    assert not unknown, f"{path} lists {unknown}, which pyproject.toml does not depend on"
