"""Gather the wheels a lent GPU machine needs for `gpu_check.sh`'s Dask part into `.gpu_wheels/`.

The lent machine has torch and its dependencies but no dask, distributed or hivemind, and reaches
no registry. This takes the installed closure of those three at this machine's versions, less
torch's own closure and numpy and scipy (which the machine has), downloads each as a cp312
manylinux wheel (`--no-deps`, so the set stays exactly this closure), and unpacks the few with no
wheel as source under `.gpu_wheels/src`. On the device: `pip install --no-index --no-deps
--target /tmp/site .gpu_wheels/*.whl` and `PYTHONPATH=/tmp/site:$PWD/.gpu_wheels/src`.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tarfile
import tempfile
from importlib import metadata
from pathlib import Path

ROOTS = ("dask", "distributed", "hivemind")
# What the lent machines' Python had beside torch (numpy, scipy); leaving them out keeps the folder
# under the device tool's 64 MiB carry limit.
ON_DEVICE = ("numpy", "scipy")
PLATFORM = ("--python-version", "3.12", "--platform", "manylinux2014_x86_64",
            "--platform", "manylinux_2_17_x86_64", "--platform", "manylinux_2_28_x86_64")


def _name(requirement: str) -> str:
    """The distribution name a requirement string names, normalised."""
    return re.split(r"[\s;\[<>=!~(]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def closure(roots: tuple[str, ...]) -> dict[str, str]:
    """Installed distributions reachable from `roots` through unconditional requirements."""
    seen: dict[str, str] = {}
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        seen[name] = dist.version
        for req in dist.requires or []:
            if "extra ==" not in req:
                todo.append(_name(req))
    return seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(".gpu_wheels"))
    args = parser.parse_args()
    wanted = closure(ROOTS)
    for name in (*closure(("torch",)), *ON_DEVICE):
        wanted.pop(name, None)
    args.out.mkdir(exist_ok=True)
    source = []
    for name, version in sorted(wanted.items()):
        pin = f"{name}=={version}"
        got = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                              "--only-binary=:all:", *PLATFORM, "-d", str(args.out), pin],
                             capture_output=True, text=True)
        if got.returncode != 0:
            source.append(pin)
    with tempfile.TemporaryDirectory() as tmp:
        for pin in source:
            subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                            "--no-binary=:all:", "-d", tmp, pin], check=True)
        (args.out / "src").mkdir(exist_ok=True)
        for sdist in Path(tmp).glob("*.tar.gz"):
            with tarfile.open(sdist) as tar:
                tar.extractall(Path(tmp) / "x", filter="data")
        for package in Path(tmp).glob("x/*/*"):
            module = package.suffix == ".py" and package.name != "setup.py"
            if module or (package / "__init__.py").exists():
                subprocess.run(["cp", "-r", str(package), str(args.out / "src")], check=True)
    print(f"gpu_wheels: {len(wanted) - len(source)} wheels, {len(source)} as source "
          f"({', '.join(source) or 'none'}) in {args.out}")


if __name__ == "__main__":
    main()
