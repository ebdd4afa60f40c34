"""Architecture guardrails: no import cycles, torch-free pure layers, layer rules, small modules.

The import graph is read from source with `ast` (labkit is not imported for it): every `import`
and `from ... import` anywhere in a module counts, lazy ones inside functions and type-only ones
under `if TYPE_CHECKING:` included (a type-only import is a dependency all the same).
`from pkg import name` is an edge to the submodule `pkg.name`
when that file exists, else to `pkg` (its `__init__.py`); `import a.b.c` is an edge to `a.b.c`
only. Imports through `importlib.import_module(...)` are invisible to this graph.
"""

from __future__ import annotations

import ast
import functools
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = "labkit"
MAX_LINES = 300
PURE_PACKAGES = ("labkit.swarm", "labkit.taskpool", "labkit.pipeline", "labkit.kernels", "labkit.plan", "labkit.sim")
HEAVY_PACKAGES = ("labkit.runtime", "labkit.backends")
FRONTEND_PACKAGES = ("labkit.lab", "labkit.cli")

# Import cycles tolerated for now: the set of modules of one cycle -> why it is acceptable.
ALLOWED_CYCLES: dict[frozenset[str], str] = {}

MAX_TRACKED_BYTES = 1_000_000  # no tracked file larger: wheels, datasets and checkpoints stay out of git
EXECUTORS_PACKAGE = "labkit.executors"
# The simulator models the papers' systems under their papers' names (its schedules and methods:
# "atom", "gpipe", "taskpool", "swarm"); it never reads a run's executor (checked below).
SIMULATOR = "labkit.sim"


@dataclass(frozen=True)
class Edge:
    """One import statement of `source` that makes it depend on `target`."""

    source: str
    target: str
    path: str
    line: int

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.source} -> {self.target}"


def discover_modules(root: Path, package: str) -> dict[str, Path]:
    """Map every module of `package` (a folder under `root`) to its file; `__init__.py` is `pkg`."""
    modules: dict[str, Path] = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


class _ImportCollector(ast.NodeVisitor):
    """Collects (base module, imported name or None, line) of each import, wherever it is."""

    def __init__(self, module: str, is_package: bool) -> None:
        self.module = module
        self.is_package = is_package
        self.imports: list[tuple[str, str | None, int]] = []

    def visit_Import(self, node: ast.Import) -> None:
        self.imports.extend((alias.name, None, node.lineno) for alias in node.names)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = self._resolve(node.level, node.module)
        self.imports.extend((base, alias.name, node.lineno) for alias in node.names)

    def _resolve(self, level: int, name: str | None) -> str:
        """The absolute module a (possibly relative) `from` import reads from."""
        if level == 0:
            return name or ""
        parts = self.module.split(".")
        if not self.is_package:
            parts = parts[:-1]
        parts = parts[: len(parts) - (level - 1)]
        return ".".join([*parts, name] if name else parts)


def import_graph(root: Path, package: str) -> dict[str, list[Edge]]:
    """Every module of `package` under `root` with its import edges to other modules of it."""
    modules = discover_modules(root, package)
    graph: dict[str, list[Edge]] = {}
    for module, path in modules.items():
        collector = _ImportCollector(module, path.name == "__init__.py")
        collector.visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
        edges: dict[tuple[str, int], Edge] = {}
        for base, name, line in collector.imports:
            if name is None:
                target = base if base in modules else None
            elif name != "*" and f"{base}.{name}" in modules:
                target = f"{base}.{name}"
            else:
                target = base if base in modules else None
            if target is not None:
                edges[target, line] = Edge(module, target, path.relative_to(root).as_posix(), line)
        graph[module] = list(edges.values())
    return graph


def strongly_connected(successors: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components, iteratively; each component sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for start in sorted(successors):
        if start in index:
            continue
        work: list[tuple[str, list[str]]] = [(start, sorted(successors[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, pending = work[-1]
            if pending:
                child = pending.pop()
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, sorted(successors.get(child, ()))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(sorted(component))
    return components


def find_cycles(root: Path, package: str) -> list[tuple[frozenset[str], list[Edge]]]:
    """Each import cycle of `package`: its modules and the import statements inside it."""
    return _cycles(import_graph(root, package))


def _cycles(graph: dict[str, list[Edge]]) -> list[tuple[frozenset[str], list[Edge]]]:
    successors = {module: {edge.target for edge in edges} for module, edges in graph.items()}
    cycles: list[tuple[frozenset[str], list[Edge]]] = []
    for component in strongly_connected(successors):
        members = frozenset(component)
        if len(members) == 1 and component[0] not in successors[component[0]]:
            continue
        inside = [edge for module in component for edge in graph[module] if edge.target in members]
        cycles.append((members, inside))
    return sorted(cycles, key=lambda cycle: sorted(cycle[0]))


def _format_cycle(members: frozenset[str], edges: list[Edge]) -> str:
    lines = [f"cycle of {len(members)} module(s): {', '.join(sorted(members))}"]
    lines.extend(f"    {edge}" for edge in edges)
    return "\n".join(lines)


def _within(module: str, packages: tuple[str, ...]) -> bool:
    """Whether `module` is one of `packages` or inside one of them."""
    return any(module == package or module.startswith(package + ".") for package in packages)


@functools.cache
def _labkit_graph() -> dict[str, list[Edge]]:
    return import_graph(REPO, PACKAGE)


def _write_package(root: Path, files: dict[str, str]) -> None:
    for relative, source in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source, encoding="utf-8")


def test_cycle_finder_reports_lazy_cycle_and_resolves_submodules(tmp_path: Path) -> None:
    """The finder reports exactly a->b->a, where b's import of a is lazy inside a function."""
    _write_package(tmp_path, {
        "fake/__init__.py": (
            "VERSION = 1\n\n"
            "def __getattr__(name):\n"
            "    from fake import a\n"
            "    return getattr(a, name)\n"
        ),
        "fake/a.py": "import os\n\nfrom fake import b, b as again\n",
        "fake/b.py": "def late():\n    from . import a\n    return a\n",
        "fake/c.py": "from fake import VERSION\n",
        "fake/sub/__init__.py": "",
        "fake/sub/leaf.py": "from ..c import VERSION\n",
    })
    cycles = find_cycles(tmp_path, "fake")
    assert [sorted(members) for members, _ in cycles] == [["fake.a", "fake.b"]]
    assert sorted(str(edge) for edge in cycles[0][1]) == [
        "fake/a.py:3: fake.a -> fake.b",
        "fake/b.py:2: fake.b -> fake.a",
    ]
    graph = import_graph(tmp_path, "fake")
    assert [edge.target for edge in graph["fake"]] == ["fake.a"]
    assert [edge.target for edge in graph["fake.sub.leaf"]] == ["fake.c"]
    assert [edge.target for edge in graph["fake.c"]] == ["fake"]


def test_cycle_finder_counts_type_checking_imports(tmp_path: Path) -> None:
    """An import under `if TYPE_CHECKING:` (either spelling) is an edge: a->b plus a hint back is
    a cycle (a type-only import still ties b to a)."""
    _write_package(tmp_path, {
        "fake/__init__.py": "",
        "fake/a.py": "from fake.b import helper\n",
        "fake/b.py": (
            "import typing\n"
            "from typing import TYPE_CHECKING\n\n"
            "if TYPE_CHECKING:\n"
            "    from fake.a import Thing\n"
            "if typing.TYPE_CHECKING:\n"
            "    import fake.a\n\n"
            "def helper():\n"
            "    return 1\n"
        ),
    })
    assert [sorted(members) for members, _ in find_cycles(tmp_path, "fake")] == [["fake.a", "fake.b"]]
    assert sorted(str(edge) for edge in import_graph(tmp_path, "fake")["fake.b"]) == [
        "fake/b.py:5: fake.b -> fake.a",
        "fake/b.py:7: fake.b -> fake.a",
    ]


def test_cycle_finder_reports_self_import(tmp_path: Path) -> None:
    """A module importing itself is a cycle of one module."""
    _write_package(tmp_path, {"fake/__init__.py": "", "fake/a.py": "def f():\n    import fake.a\n"})
    assert [sorted(members) for members, _ in find_cycles(tmp_path, "fake")] == [["fake.a"]]


def _fail_if(problems: list[str], header: str) -> None:
    """Fail with `header` and one problem a line, without pytest's repr of the list."""
    if problems:
        pytest.fail(header + "\n" + "\n".join(problems), pytrace=False)


def test_no_import_cycles() -> None:
    """No import cycle among labkit's modules, lazy imports included, beyond ALLOWED_CYCLES."""
    cycles = [cycle for cycle in _cycles(_labkit_graph()) if cycle[0] not in ALLOWED_CYCLES]
    _fail_if([_format_cycle(members, edges) for members, edges in cycles],
             f"{len(cycles)} import cycle(s) in {PACKAGE}/ (file:line: importer -> imported):")


def test_allowed_cycles_are_not_stale() -> None:
    """Every ALLOWED_CYCLES entry is still exactly one import cycle of labkit."""
    found = {members for members, _ in _cycles(_labkit_graph())}
    _fail_if([", ".join(sorted(members)) for members in ALLOWED_CYCLES if members not in found],
             "ALLOWED_CYCLES entries that are no longer a cycle, remove them:")


_TORCH_PROBE = r'''
import importlib
import json
import sys

root, package, names = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
sys.path.insert(0, root)


class TorchImported(BaseException):
    """Raised instead of loading torch: torch never loads, so every later importer trips too."""


def _chain():
    links = []
    frame = sys._getframe(2)
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if not frame.f_code.co_filename.startswith("<") and module != "__main__":
            if not links or links[-1][0] != module:
                links.append((module, frame.f_lineno))
        frame = frame.f_back
    ours = [(m, line) for m, line in links if m == package or m.startswith(package + ".")]
    if links and links[0] not in ours:
        ours.insert(0, links[0])
    return " <- ".join(f"{m}:{line}" for m, line in ours)


class TorchTripwire:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise TorchImported(f"{name} <- {_chain()}")
        return None


sys.meta_path.insert(0, TorchTripwire())
report = {"torch": {}, "errors": {}}
for name in names:
    try:
        importlib.import_module(name)
    except TorchImported as exc:
        report["torch"][name] = str(exc)
    except Exception as exc:
        report["errors"][name] = f"{type(exc).__name__}: {exc}"
report["loaded"] = sorted(m for m in sys.modules if m == "torch" or m.startswith("torch."))
print(json.dumps(report))
'''


def torch_importers(root: Path, package: str, names: list[str]) -> list[str]:
    """Import `names` in a fresh interpreter where torch trips a wire; one line per culprit."""
    command = [sys.executable, "-c", _TORCH_PROBE, str(root), package, json.dumps(names)]
    probe = subprocess.run(command, cwd=root, capture_output=True, text=True, timeout=120,
                           check=False)
    assert probe.returncode == 0, f"torch probe crashed:\n{probe.stderr}"
    report = json.loads(probe.stdout.strip().splitlines()[-1])
    problems = [f"{name} pulls in torch: {chain}" for name, chain in report["torch"].items()]
    problems += [f"{name} failed to import: {error}" for name, error in report["errors"].items()]
    if report["loaded"]:
        problems.append(f"torch modules loaded anyway: {report['loaded'][:5]}")
    return problems


def test_torch_probe_names_direct_and_indirect_importers(tmp_path: Path) -> None:
    """The probe names a module importing torch and one reaching it through another, no others."""
    _write_package(tmp_path, {
        "fakepure/__init__.py": "",
        "fakepure/clean.py": "import json\n\ndef later():\n    import torch\n",
        "fakepure/heavy.py": "import os\nimport torch.nn\n",
        "fakepure/user.py": "from fakepure import clean\nfrom fakepure.heavy import os\n",
    })
    names = ["fakepure.clean", "fakepure.heavy", "fakepure.user"]
    assert torch_importers(tmp_path, "fakepure", names) == [
        "fakepure.heavy pulls in torch: torch <- fakepure.heavy:2",
        "fakepure.user pulls in torch: torch <- fakepure.heavy:2 <- fakepure.user:2",
    ]


def test_pure_layers_import_no_torch() -> None:
    """Importing any module of the swarm, taskpool, pipeline, kernels, plan and sim packages loads no torch."""
    names = [name for name in discover_modules(REPO, PACKAGE) if _within(name, PURE_PACKAGES)]
    assert names, f"no modules found in {PURE_PACKAGES}"
    _fail_if(torch_importers(REPO, PACKAGE, names),
             f"{PURE_PACKAGES} must not import torch (import chain, innermost first):")


def test_pure_layers_do_not_import_runtime_or_backends() -> None:
    """No module of swarm, taskpool, pipeline, kernels, plan or sim imports labkit.runtime or labkit.backends."""
    graph = _labkit_graph()
    _fail_if([str(edge) for module, edges in graph.items() if _within(module, PURE_PACKAGES)
              for edge in edges if _within(edge.target, HEAVY_PACKAGES)],
             f"{PURE_PACKAGES} must not import {HEAVY_PACKAGES}:")


def test_only_frontends_import_lab_and_cli() -> None:
    """labkit.lab and labkit.cli are imported only by themselves (labkit.cli may use lab, and the
    package's lazy `labkit.lab` attribute imports it on first use)."""
    bad: list[str] = []
    for module, edges in _labkit_graph().items():
        for edge in edges:
            if not _within(edge.target, FRONTEND_PACKAGES):
                continue
            same = any(_within(module, (p,)) and _within(edge.target, (p,))
                       for p in FRONTEND_PACKAGES)
            cli_uses_lab = (_within(module, ("labkit.cli",))
                            and _within(edge.target, ("labkit.lab",)))
            # `import labkit; labkit.lab.Lab()` in a notebook: the package's lazy attribute
            lazy_accessor = module == "labkit" and edge.target == "labkit.lab"
            if not (same or cli_uses_lab or lazy_accessor):
                bad.append(str(edge))
    _fail_if(bad, f"only {FRONTEND_PACKAGES} may import {FRONTEND_PACKAGES}:")


def _line_counts() -> dict[str, int]:
    return {path.relative_to(REPO).as_posix(): len(path.read_text(encoding="utf-8").splitlines())
            for path in discover_modules(REPO, PACKAGE).values()}


def test_modules_stay_small() -> None:
    """No labkit module is longer than MAX_LINES lines: none is allowed to be."""
    _fail_if([f"{path}: {count} lines" for path, count in sorted(_line_counts().items()) if count > MAX_LINES],
             f"modules over {MAX_LINES} lines (split them):")


def test_no_tracked_file_is_over_a_megabyte() -> None:
    """Nothing large is committed: every file git tracks is at most MAX_TRACKED_BYTES."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    paths = [REPO / name for name in listed.decode().split("\0") if name]
    assert len(paths) > 100, "git ls-files listed almost nothing"
    _fail_if([f"{p.relative_to(REPO)}: {p.stat().st_size:,} bytes" for p in paths
              if p.is_file() and p.stat().st_size > MAX_TRACKED_BYTES],
             f"tracked files over {MAX_TRACKED_BYTES:,} bytes (keep them out of git):")


def executor_names_outside(root: Path, package: str, names: set[str], inside: tuple[str, ...]) -> list[str]:
    """Every string constant equal to one of `names` in a module of `package` outside `inside`."""
    found = []
    for module, path in discover_modules(root, package).items():
        if _within(module, inside):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and node.value in names and isinstance(node.value, str):
                found.append(f"{path.relative_to(root)}:{node.lineno}: {node.value!r}")
    return found


def test_the_executor_name_finder_sees_comparisons_and_keys(tmp_path: Path) -> None:
    _write_package(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/lab.py": "def f(cfg):\n    return cfg.executor == 'atom' or {'swarm': 1}\n",
        "pkg/executors/__init__.py": "NAME = 'atom'\n",
        "pkg/clean.py": "NAME = 'atoms'\n",
    })
    assert executor_names_outside(tmp_path, "pkg", {"atom", "swarm"}, ("pkg.executors",)) == [
        "pkg/lab.py:2: 'atom'", "pkg/lab.py:2: 'swarm'"]


def test_only_the_executors_name_executors() -> None:
    """No module outside labkit/executors/ names a registered executor: the lab, the CLI, the
    runtime and the backends ask the spec or the handle instead."""
    from labkit.executors.registry import NAMES

    _fail_if(executor_names_outside(REPO, PACKAGE, set(NAMES), (EXECUTORS_PACKAGE, SIMULATOR)),
             "executor names outside labkit/executors/ (ask the run's spec instead):")


def test_the_simulator_never_reads_a_runs_executor() -> None:
    """The simulator's own names for the papers' systems are not executors: it reads no `.executor`."""
    reads = [f"{path.relative_to(REPO)}:{node.lineno}" for module, path in discover_modules(REPO, PACKAGE).items()
             if _within(module, (SIMULATOR,)) for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
             if isinstance(node, ast.Attribute) and node.attr == "executor"]
    _fail_if(reads, "the simulator reads a run's executor:")


def test_papers_are_named_not_numbered() -> None:
    """No tracked file calls a paper by its internal seed number: docs/papers.md gives each its
    short name (SWARM, DiLoCo-SWARM, the task pool paper, DT-FM, ATOM). The pattern is built here
    so that this file does not match it."""
    label = "seed" + "s? 00"
    found = subprocess.run(["git", "grep", "-I", "-n", "-i", "-E", "-e", label], cwd=REPO,
                           capture_output=True, text=True, timeout=60, check=False)
    assert found.returncode in (0, 1), f"git grep failed: {found.stderr}"
    _fail_if(found.stdout.splitlines(),
             "a paper named by its internal seed number; use its short name from docs/papers.md:")
