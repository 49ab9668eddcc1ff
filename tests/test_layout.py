"""The folder tree is the map: every package's docstring names each of its modules and
sub-packages in one line, no folder holds more than 15 modules (benchmarks/perf/, the
measurement scripts, excepted), and CONTRIBUTING.md's layout is built from those lines.
A package whose docstring has a `*` entry (algorithms/exchange/: strategy modules register
themselves, so a new strategy is one new file) lets a module it does not name describe
itself in its own docstring's first line; the layout shows the `*` entry, not those.

    python tests/test_layout.py     # rewrites CONTRIBUTING.md's layout block from the tree
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("graft_env", "algorithms", "benchmarks")
MAX_MODULES = 15
UNBOUNDED = {"benchmarks/perf"}  # one script per measurement, indexed in its docstring
ENTRY = re.compile(r"^([A-Za-z_]\w*/?|\*) {2,}(\S.*)$")  # "name   what it holds" at column 0
SELF = "*"  # the entry of modules that describe themselves
BEGIN, END = "<!-- layout: built by `python tests/test_layout.py` -->", "<!-- /layout -->"


def packages(root: Path) -> Iterator[Path]:
    """Every package folder (one with an __init__.py) of the three top-level packages."""
    for top in PACKAGES:
        yield from sorted(p.parent for p in (root / top).rglob("__init__.py"))


def members(package: Path) -> set[str]:
    """The modules (`name`) and sub-packages (`name/`) a package folder holds."""
    found = {p.stem for p in package.glob("*.py") if p.name != "__init__.py"}
    return found | {f"{p.name}/" for p in package.iterdir() if (p / "__init__.py").is_file()}


def entries(package: Path) -> dict[str, str]:
    """The entries of a package's docstring: name (or `*`) -> what it holds, an entry's
    indented continuation lines joined to it by newlines."""
    found: dict[str, str] = {}
    name = None
    for line in _doc(package / "__init__.py").splitlines():
        if m := ENTRY.match(line):
            name, found[m[1]] = m[1], m[2]
        elif name is not None and line.startswith("  ") and line.strip():
            found[name] += "\n" + line.strip()
        else:
            name = None
    return found


def index(package: Path) -> dict[str, str]:
    """Each module and sub-package a package's docstring describes -> how; with a `*` entry,
    each module it does not name -> its own docstring's first line ('' if none)."""
    found = entries(package)
    if found.pop(SELF, None) is not None:
        for name in members(package) - set(found):
            if not name.endswith("/"):
                found[name] = _doc(package / f"{name}.py").partition("\n")[0]
    return found


def _doc(path: Path) -> str:
    return ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""


def problems(root: Path) -> list[str]:
    """What a package's docstring or size gets wrong, one line each."""
    found = []
    for package in packages(root):
        where = package.relative_to(root).as_posix()
        named, present = set(index(package)), members(package)
        found += [f"{where}: {m} is not named in its __init__ docstring" for m in present - named]
        found += [
            f"{where}: {m}.py has no docstring to describe it"
            for m, d in index(package).items()
            if not d
        ]
        found += [f"{where}: its docstring names {m}, which is not there" for m in named - present]
        modules = [m for m in present if not m.endswith("/")]
        if len(modules) > MAX_MODULES and where not in UNBOUNDED:
            found.append(f"{where}: {len(modules)} modules, more than {MAX_MODULES}")
    return sorted(found)


def layout(root: Path) -> str:
    """The layout tree: each package and its entries, indented by depth."""
    lines = []
    for package in packages(root):
        parts = package.relative_to(root).parts
        indent = "  " * (len(parts) - 1)
        described = entries(package)
        lines.append(f"{indent}{parts[-1]}/")
        for name in sorted(described, key=lambda n: (n.endswith("/"), n == SELF, n)):
            if not name.endswith("/"):
                file = f"{name}.py".ljust(25 - len(indent))
                first, *more = described[name].split("\n")
                lines.append(f"{indent}  {file} {first}")
                lines += [f"{indent}  {'':{len(file)}} {line}" for line in more]
    return "\n".join(lines)


def contributing_block(root: Path) -> str:
    text = (root / "CONTRIBUTING.md").read_text(encoding="utf-8")
    return text[text.index(BEGIN) + len(BEGIN) : text.index(END)].strip("\n")


def plant(root: Path, files: dict[str, str]) -> None:
    """Write each `path: text` under root."""
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def test_every_package_names_each_of_its_modules_and_no_folder_is_too_big():
    assert sum(1 for _ in packages(REPO)) > 15  # the packages were found
    assert problems(REPO) == []


MAX_LINES = 400  # DESIGN §5: no file over ~400 lines; one job per module


def test_no_package_module_is_over_the_line_bar():
    long = {
        path.relative_to(REPO).as_posix(): lines
        for top in PACKAGES
        for path in sorted((REPO / top).rglob("*.py"))
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert long == {}, f"split these along their jobs (<= {MAX_LINES} lines each): {long}"


def test_contributing_layout_is_built_from_the_package_docstrings():
    assert contributing_block(REPO) == f"```\n{layout(REPO)}\n```", (
        "CONTRIBUTING.md's layout is stale: run `python tests/test_layout.py`"
    )


def test_a_planted_unnamed_module_a_stale_name_and_a_crowded_folder_are_found(tmp_path):
    files = {
        "graft_env/__init__.py": '"""World.\n\nlazy    loading\nold     gone\n"""\n',
        "graft_env/lazy.py": "",
        "graft_env/new.py": "",  # not named
        "algorithms/__init__.py": '"""Rules.\n\nsub/    a sub-package\n"""\n',
        "algorithms/sub/__init__.py": '"""Sub."""\n',
        "benchmarks/__init__.py": '"""Harness."""\n',
        **{f"algorithms/sub/m{i}.py": "" for i in range(MAX_MODULES + 1)},
    }
    plant(tmp_path, files)
    found = problems(tmp_path)
    assert "graft_env: new is not named in its __init__ docstring" in found
    assert "graft_env: its docstring names old, which is not there" in found
    assert f"algorithms/sub: {MAX_MODULES + 1} modules, more than {MAX_MODULES}" in found
    assert "algorithms: sub/ is not named in its __init__ docstring" not in found


def test_an_entrys_continuation_lines_reach_the_layout_and_prose_does_not(tmp_path):
    doc = '"""World.\n\nlazy    loading, which goes on\n        on a second line\nProse.\n"""\n'
    plant(tmp_path, {"graft_env/__init__.py": doc, "graft_env/lazy.py": "",
                     "algorithms/__init__.py": '"""Rules."""\n',
                     "benchmarks/__init__.py": '"""Harness."""\n'})  # fmt: skip
    assert entries(tmp_path / "graft_env") == {"lazy": "loading, which goes on\non a second line"}
    lines = layout(tmp_path).splitlines()
    assert lines[1].endswith("lazy.py                   loading, which goes on")
    assert lines[2] == " " * 28 + "on a second line"


def test_a_self_describing_module_needs_a_star_entry_and_a_docstring(tmp_path):
    files = {
        "graft_env/__init__.py": '"""World."""\n',
        "algorithms/__init__.py": '"""Rules.\n\nold     named\n*       strategies\n"""\n',
        "algorithms/old.py": "",
        "algorithms/topk.py": '"""topk: the k best groups move."""\n',
        "algorithms/bare.py": "x = 1\n",
        "benchmarks/__init__.py": '"""Harness.\n\nother   named\n"""\n',
        "benchmarks/other.py": "",
        "benchmarks/loose.py": '"""Describes itself, but its package has no * entry."""\n',
    }
    plant(tmp_path, files)
    assert problems(tmp_path) == [
        "algorithms: bare.py has no docstring to describe it",
        "benchmarks: loose is not named in its __init__ docstring",
    ]
    assert index(tmp_path / "algorithms")["topk"] == "topk: the k best groups move."
    assert "topk" not in layout(tmp_path) and "*.py" in layout(tmp_path)


if __name__ == "__main__":
    path = REPO / "CONTRIBUTING.md"
    text = path.read_text(encoding="utf-8")
    head, rest = text.split(BEGIN)
    tail = rest.split(END)[1]
    path.write_text(f"{head}{BEGIN}\n```\n{layout(REPO)}\n```\n{END}{tail}", encoding="utf-8")
