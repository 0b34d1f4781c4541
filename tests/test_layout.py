"""The house rules of the codebase, checked from its source with `ast` (nothing is imported or run):

- no import cycle, between modules or between packages (pyproject's package-dir counts: top-level `collectors/`
  is `fleettool.collectors`, `tui/` is `fleettool.tui`);
- SQL that changes data or schema (INSERT, UPDATE, DELETE, CREATE, ALTER, DROP, COPY) is written only in
  `fleettool/store/`;
- no module of the package is over 400 lines;
- the core imports no Textual (only `fleettool.tui` may).
"""

from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")

ROOT = Path(__file__).resolve().parent.parent
MAX_LINES = 400


@dataclass
class Module:
    name: str
    path: Path
    is_package: bool
    tree: ast.Module
    imports: set[str] = field(default_factory=set)


def package_dirs() -> dict[str, Path]:
    """Package name -> its directory, from pyproject's [tool.setuptools] package-dir (default: the name's path)."""
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapping: dict[str, str] = cfg.get("package-dir", {})

    def where(pkg: str) -> Path:
        # setuptools: the longest mapped prefix decides (fleettool.tui.screens -> tui/screens)
        parts = pkg.split(".")
        for i in range(len(parts), 0, -1):
            head = ".".join(parts[:i])
            if head in mapping:
                return ROOT / mapping[head] / "/".join(parts[i:])
        return ROOT / pkg.replace(".", "/")

    return {pkg: where(pkg) for pkg in cfg["packages"]}


def load_modules() -> dict[str, Module]:
    """Every module of every package pyproject lists (test_every_package_is_listed keeps that list whole)."""
    mods: dict[str, Module] = {}
    for pkg, d in package_dirs().items():
        for p in sorted(d.glob("*.py")):
            name = pkg if p.name == "__init__.py" else f"{pkg}.{p.stem}"
            mods[name] = Module(name, p, p.name == "__init__.py", ast.parse(p.read_text(), str(p)))
    for m in mods.values():
        m.imports = _imports(m, mods)
    return mods


def test_every_package_is_listed() -> None:
    """setuptools installs only the packages pyproject lists: a sub-package left out works from a checkout and
    is missing from the wheel."""
    listed = {d.resolve() for d in package_dirs().values()}
    missing = []
    for top in {d for d in package_dirs().values() if (d / "__init__.py").exists()}:
        for init in top.rglob("__init__.py"):
            if "__pycache__" not in init.parts and init.parent.resolve() not in listed:
                missing.append(str(init.parent.relative_to(ROOT)))
    assert not missing, "packages missing from pyproject [tool.setuptools] packages: " + ", ".join(
        sorted(missing)
    )


def _imports(m: Module, mods: dict[str, Module]) -> set[str]:
    """The package's own modules that `m` imports anywhere (module level or inside functions)."""
    found: set[str] = set()
    for node in ast.walk(m.tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = m.name.split(".") if m.is_package else m.name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            names = [mod] + [f"{mod}.{a.name}" for a in node.names]
        for n in names:
            while n and n not in mods:
                n = n.rpartition(".")[0]
            if n and n != m.name:
                found.add(n)
    return found


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def package_of(name: str, packages: set[str]) -> str:
    """The sub-package directly under `fleettool` holding `name` (`fleettool.engine.kinds.peer` ->
    `fleettool.engine`); a top-level module (`fleettool.units`) is its own node."""
    parts = name.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 else name


def _path_of(mods: dict[str, Module], name: str) -> str:
    return str(mods[name].path.relative_to(ROOT))


def test_the_graph_sees_the_package_dir_mapping() -> None:
    mods = load_modules()
    assert (
        "fleettool.collectors.kmsg" in mods
        and mods["fleettool.collectors.kmsg"].path.parent.name == "collectors"
    )
    assert "fleettool.tui" in mods and "fleettool.engine" in mods
    # an edge through the mapping is seen: something imports a collector
    assert any(
        "fleettool.collectors" in m.imports or any(i.startswith("fleettool.collectors.") for i in m.imports)
        for m in mods.values()
    )


def test_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_module_import_cycle() -> None:
    mods = load_modules()
    found = cycles({n: m.imports for n, m in mods.items()})
    assert not found, "module import cycles: " + "; ".join(
        " <-> ".join(_path_of(mods, n) for n in comp) for comp in found
    )


def test_no_package_import_cycle() -> None:
    mods = load_modules()
    pkgs = {package_of(n, set(mods)) for n in mods}
    edges: dict[str, set[str]] = {p: set() for p in pkgs}
    why: dict[tuple[str, str], str] = {}
    for n, m in mods.items():
        a = package_of(n, pkgs)
        for i in m.imports:
            b = package_of(i, pkgs)
            if a != b:
                edges[a].add(b)
                why.setdefault((a, b), f"{_path_of(mods, n)} imports {i}")
    found = cycles(edges)
    msgs = []
    for comp in found:
        links = [why[(a, b)] for a in comp for b in comp if (a, b) in why]
        msgs.append(" / ".join(comp) + ": " + "; ".join(links))
    assert not found, "package import cycles: " + " || ".join(msgs)


_SQL_WRITE = re.compile(
    r"\b(INSERT\s+(OR\s+\w+\s+)?INTO|UPDATE\s+\w+\s+SET|DELETE\s+FROM|"
    r"CREATE\s+(OR\s+REPLACE\s+)?(TEMP\s+|TEMPORARY\s+)?(TABLE|VIEW|INDEX|UNIQUE\s+INDEX|SEQUENCE|SCHEMA|MACRO|TYPE)|"
    r"ALTER\s+TABLE|DROP\s+(TABLE|VIEW|INDEX|SEQUENCE|SCHEMA|MACRO)|COPY\s+\w+\s+FROM)\b",
    re.I,
)


def _strings(tree: ast.Module) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            out.append((node.lineno, node.value))
        elif isinstance(node, ast.JoinedStr):
            text = "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
            out.append((node.lineno, text))
    return out


def test_sql_write_pattern_is_not_fooled() -> None:
    assert _SQL_WRITE.search("INSERT INTO alerts (a) VALUES (?)")
    assert _SQL_WRITE.search("insert or replace into meta values (?, ?)")
    assert _SQL_WRITE.search("CREATE OR REPLACE TEMP VIEW x AS SELECT 1")
    assert not _SQL_WRITE.search("Create the table when the user asks; update the view")
    assert not _SQL_WRITE.search("SELECT * FROM alerts ORDER BY last_seen")


def test_sql_that_changes_data_or_schema_lives_in_the_store() -> None:
    store_dir = ROOT / "fleettool" / "store"
    found: list[str] = []
    for m in load_modules().values():
        if m.path.is_relative_to(store_dir):
            continue
        for line, text in _strings(m.tree):
            hit = _SQL_WRITE.search(text)
            if hit:
                found.append(f"{m.path.relative_to(ROOT)}:{line}: {hit.group(0)!r}")
    assert not found, "SQL writes outside fleettool/store/:\n" + "\n".join(sorted(set(found)))


def test_no_module_over_400_lines() -> None:
    big = []
    for m in load_modules().values():
        n = len(m.path.read_text().splitlines())
        if n > MAX_LINES:
            big.append(f"{m.path.relative_to(ROOT)}: {n} lines")
    assert not big, f"modules over {MAX_LINES} lines: " + ", ".join(big)


def test_the_core_imports_no_textual() -> None:
    offenders = []
    for m in load_modules().values():
        if m.name == "fleettool.tui" or m.name.startswith("fleettool.tui."):
            continue
        for node in ast.walk(m.tree):
            mod = None
            if isinstance(node, ast.Import):
                mod = next((a.name for a in node.names if a.name.split(".")[0] == "textual"), None)
            elif (
                isinstance(node, ast.ImportFrom)
                and not node.level
                and (node.module or "").split(".")[0] == "textual"
            ):
                mod = node.module
            if mod:
                offenders.append(f"{m.path.relative_to(ROOT)}:{node.lineno}: {mod}")
    assert not offenders, "textual imported outside fleettool.tui: " + ", ".join(offenders)


# Bottom to top. A package may import its own layer and the layers below, never one above (CONTRIBUTING.md).
LAYERS: list[set[str]] = [
    {
        "fleettool",
        "fleettool.units",
        "fleettool.model",
        "fleettool.metrics",
        "fleettool.metrics_def",
        "fleettool.metrics_fabric",
        "fleettool.rules",
        "fleettool.runbooks",
    },
    {"fleettool.formats"},
    {"fleettool.sources", "fleettool.recording"},
    {"fleettool.collectors"},
    {"fleettool.store"},
    {
        "fleettool.ingest",
        "fleettool.xid_catalog",
        "fleettool.fleet",
        "fleettool.stats",
        "fleettool.remediation_stats",
        "fleettool.report",
        "fleettool.fabric_report",
        "fleettool.reliability",
        "fleettool.reliability_plots",
        "fleettool.analytics",
    },
    {"fleettool.incidents"},
    {"fleettool.engine"},
    {"fleettool.pipeline", "fleettool.burnin", "fleettool.lifecycle", "fleettool.export", "fleettool.views"},
    {"fleettool.remediate"},
    {"fleettool.agent"},
    {"fleettool.cli", "fleettool.tui", "fleettool.__main__"},
]


def test_imports_point_down_the_layers() -> None:
    mods = load_modules()
    rank = {p: i for i, layer in enumerate(LAYERS) for p in layer}
    pkgs = {package_of(n, set(mods)) for n in mods}
    unplaced = sorted(pkgs - set(rank))
    assert not unplaced, f"packages with no layer in tests/test_layout.py LAYERS: {unplaced}"
    up = []
    for n, m in mods.items():
        a = package_of(n, pkgs)
        for i in m.imports:
            b = package_of(i, pkgs)
            if rank[b] > rank[a]:
                up.append(f"{_path_of(mods, n)} imports {i} (layer {rank[b]} above {rank[a]})")
    assert not up, "imports that climb a layer: " + "; ".join(sorted(up))
