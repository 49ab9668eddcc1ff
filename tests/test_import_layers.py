"""Imports run one way, graft_env <- algorithms <- benchmarks, inside algorithms the learning
rule <- storage <- library <- training, and no modules import each other in a circle. Every
import statement counts: at module level, inside functions (lazy), under TYPE_CHECKING, and
`import_module` of a literal name, as each is a dependency a reader must follow."""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LAYERS = ("graft_env", "algorithms", "benchmarks")  # each may import only itself and those before
# inside algorithms: the learning rule (top-level modules, core/, exchange/) first
SUB_LAYERS = ("algorithms.storage", "algorithms.library", "algorithms.training")


def modules(root: Path) -> dict[str, Path]:
    """Dotted name -> file of every module of the layered packages under `root`."""
    found = {}
    for package in LAYERS:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imported(name: str, path: Path) -> Iterator[str]:
    """Every project module name `path` (module `name`) imports, by any import statement."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)
        elif _imports_by_name(node):  # importlib.import_module("pkg.module")
            yield node.args[0].value


def _imports_by_name(node: ast.AST) -> bool:
    """A call `import_module("...")` (or `importlib.import_module`) with a literal name."""
    if not isinstance(node, ast.Call) or not node.args:
        return False
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    first = node.args[0]
    return (
        name == "import_module" and isinstance(first, ast.Constant) and isinstance(first.value, str)
    )


def edges(found: Mapping[str, Path]) -> dict[str, set[str]]:
    """Module -> the project modules it imports (a name resolves to its longest module)."""
    graph: dict[str, set[str]] = {}
    for name, path in found.items():
        targets = set()
        for target in imported(name, path):
            while target and target not in found:
                target = target.rpartition(".")[0]
            if target and target != name:
                targets.add(target)
        graph[name] = targets
    return graph


def upward(graph: Mapping[str, set[str]]) -> list[str]:
    """`a -> b` for every import of a later layer's module."""
    rank = {package: index for index, package in enumerate(LAYERS)}
    return sorted(
        f"{a} -> {b}"
        for a, targets in graph.items()
        for b in targets
        if rank[b.split(".")[0]] > rank[a.split(".")[0]]
    )


def sub_layer(module: str) -> int:
    """0 for the learning rule, then 1, 2, 3 for storage, library, training."""
    for rank, prefix in enumerate(SUB_LAYERS, start=1):
        if module == prefix or module.startswith(prefix + "."):
            return rank
    return 0


def upward_in_algorithms(graph: Mapping[str, set[str]]) -> list[str]:
    """`a -> b` for every import of a later sub-layer's module inside algorithms (the
    package's own lazy __init__ belongs to the rule and imports by computed name only)."""
    inside = {a: {b for b in bs if b.startswith("algorithms")} for a, bs in graph.items()}
    return sorted(
        f"{a} -> {b}"
        for a, targets in inside.items()
        if a.startswith("algorithms")
        for b in targets
        if sub_layer(b) > sub_layer(a)
    )


def circles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """Groups of modules that import each other (strongly connected, more than one module),
    leaving out a module's imports of its own enclosing packages (`from algorithms.exchange
    import X` inside algorithms/exchange/graft.py: the package's __init__ runs first anyway);
    a package's imports of its submodules stay, so a circle through an __init__ is found."""

    def enclosing(a: str, b: str) -> bool:
        return a.startswith(b + ".")

    reach = {a: {b for b in targets if not enclosing(a, b)} for a, targets in graph.items()}
    for _ in range(len(reach)):  # transitive closure: few hundred modules, cheap enough
        grown = {a: set().union(bs, *(reach[b] for b in bs)) for a, bs in reach.items()}
        if grown == reach:
            break
        reach = grown
    groups = {frozenset({a} | {b for b in reach[a] if a in reach[b]}) for a in reach}
    return sorted(sorted(group) for group in groups if len(group) > 1)


def test_no_module_imports_a_later_layer_or_takes_part_in_a_circle():
    graph = edges(modules(REPO))
    assert len(graph) > 100  # the packages were found
    assert upward(graph) == []
    assert upward_in_algorithms(graph) == []
    assert circles(graph) == []


def test_the_checks_find_an_upward_import_and_a_circle(tmp_path):
    files = {
        "graft_env/__init__.py": "",
        "graft_env/low.py": "def f():\n    from benchmarks import top\n",
        "graft_env/lazy_up.py": "import importlib\nimportlib.import_module('algorithms.a')\n",
        "algorithms/__init__.py": "",
        "algorithms/a.py": "from algorithms.b import x\n",
        "algorithms/b.py": "import typing\nif typing.TYPE_CHECKING:\n    from . import a\n",
        "benchmarks/__init__.py": "",
        "benchmarks/top.py": "import graft_env.low\n",
        # a circle through a package's __init__: x -> pkg -> pkg.sub -> x
        "graft_env/x.py": "import graft_env.pkg\n",
        "graft_env/pkg/__init__.py": "from graft_env.pkg import sub\n",
        "graft_env/pkg/sub.py": "from graft_env import x\n",
        # a submodule importing its own package is no circle
        "graft_env/pkg/other.py": "from graft_env.pkg import sub\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    graph = edges(modules(tmp_path))
    # `from benchmarks import top` imports the package and its module: both point up
    assert upward(graph) == [
        "graft_env.lazy_up -> algorithms.a",
        "graft_env.low -> benchmarks",
        "graft_env.low -> benchmarks.top",
    ]
    assert circles(graph) == [
        ["algorithms.a", "algorithms.b"],
        ["benchmarks.top", "graft_env.low"],
        ["graft_env.pkg", "graft_env.pkg.sub", "graft_env.x"],
    ]


def test_the_sub_layer_check_finds_a_rule_importing_the_loop_and_storage_importing_a_library(
    tmp_path,
):
    files = {
        "graft_env/__init__.py": "",
        "benchmarks/__init__.py": "",
        "algorithms/__init__.py": "",
        "algorithms/config.py": "from algorithms.training.loop import Trainer\n",
        "algorithms/storage/__init__.py": "",
        "algorithms/storage/store.py": "def f():\n    import algorithms.library.format\n",
        "algorithms/library/__init__.py": "",
        "algorithms/library/format.py": "from algorithms.storage import store\n",  # allowed
        "algorithms/training/__init__.py": "",
        "algorithms/training/loop.py": "from algorithms import config\n",  # allowed
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert upward_in_algorithms(edges(modules(tmp_path))) == [
        "algorithms.config -> algorithms.training.loop",
        "algorithms.storage.store -> algorithms.library.format",
    ]
