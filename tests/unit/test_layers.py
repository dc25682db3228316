"""Layer rules of DESIGN.md: the protocol core is pure, the module graph of our packages has no circle, and
no arrow points the wrong way (client -> bookie or spark_connector, the bookie's request path (its metrics
included) -> client, any bookie module -> client.metrics, wire -> anything of ours but proto, spark_connector
-> the client's inner modules). Pure AST: every import counts, also inside functions and under TYPE_CHECKING,
relative ones resolved."""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PURE_DIRS = [ROOT / "client" / "protocol", ROOT / "client" / "log" / "core", ROOT / "bookie" / "core"]
FORBIDDEN_IN_CORE = {"asyncio", "grpc", "kazoo", "os", "time", "random", "threading", "socket", "subprocess"}


OUR_PACKAGES = {"bookie", "client", "proto", "spark_connector", "wire"}


def _layer_name(module: str) -> str:
    """`bkledger.client.x` -> `client.x`: the layer rules speak of the repository's folders."""
    return module.removeprefix("bkledger.")


def _imported_modules(path: Path) -> list[tuple[int, str]]:
    """Every module imported anywhere in the file (also inside functions), as `client.x` for `bkledger.client.x`."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return [(line, _layer_name(module)) for line, module in _raw_imports(tree)]


def _raw_imports(tree: ast.AST) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.extend([(node.lineno, node.module)])
            found.extend((node.lineno, f"{node.module}.{alias.name}") for alias in node.names)
    return found


def _python_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*.py") if ".venv" not in p.parts)


def test_pure_core_imports_no_io_or_clock():
    """The core (client/protocol, bookie/core) takes time and randomness as arguments: no I/O modules."""
    offending = []
    for folder in PURE_DIRS:
        for path in _python_files(folder):
            for line, module in _imported_modules(path):
                if module.split(".")[0] in FORBIDDEN_IN_CORE:
                    offending.append(f"{path.relative_to(ROOT)}:{line} imports {module}")
    assert not offending, "pure core imports forbidden modules:\n" + "\n".join(offending)


def test_client_never_imports_bookie():
    """An arrow may only point down: nothing under client/ imports the bookie package."""
    offending = []
    for path in _python_files(ROOT / "client"):
        for line, module in _imported_modules(path):
            if module.split(".")[0] == "bookie":
                offending.append(f"{path.relative_to(ROOT)}:{line} imports {module}")
    assert not offending, "client imports bookie:\n" + "\n".join(offending)


def test_errors_module_is_pure():
    """client/errors.py is used by the core, so it must not import transport or metadata libraries."""
    modules = {m.split(".")[0] for _, m in _imported_modules(ROOT / "client" / "errors.py")}
    assert not modules & (FORBIDDEN_IN_CORE | {"kazoo", "grpc"})


def test_checker_catches_a_forbidden_import(tmp_path):
    """The walker itself works: it sees plain, from- and nested imports."""
    sample = tmp_path / "m.py"
    sample.write_text("import os.path\nfrom time import monotonic\ndef f():\n    import random\n")
    names = {m.split(".")[0] for _, m in _imported_modules(sample)}
    assert {"os", "time", "random"} <= names


def test_everything_imports_our_packages_under_the_one_root():
    """`import client` (a job's own client.py) or `import proto` (proto-plus) must never be ours: every import
    of our packages goes through `bkledger.`, in the shipped code, the tests, the examples and the bench."""
    offending = []
    for folder in [ROOT / name for name in (*sorted(OUR_PACKAGES), "tests", "examples", "bench")]:
        for path in _python_files(folder):
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for line, module in _raw_imports(tree):
                if module.split(".")[0] in OUR_PACKAGES:
                    offending.append(f"{path.relative_to(ROOT)}:{line} imports {module}")
    assert not offending, "imports outside the bkledger root:\n" + "\n".join(offending)


# ---- the module graph ---------------------------------------------------------------------------
# The bookie's request path: what serves an add, a read or a fence, from the gRPC handler to the disk.
# It takes the wire and the entry format from `wire`, never from the client.
REQUEST_PATH = {"bookie.core", "bookie.add_request", "bookie.add_trace", "bookie.bookie", "bookie.config",
                "bookie.config_keys", "bookie.direct_append", "bookie.entrylog", "bookie.files", "bookie.index",
                "bookie.journal", "bookie.memory", "bookie.metrics", "bookie.ranges_read", "bookie.records_io",
                "bookie.request_guard", "bookie.server", "bookie.storage", "bookie.thread_guard"}
# What of the client the Spark connector may import: the package itself (what bkledger.client exports), its
# errors and configuration, the pure log format (client.log.core) and the connector's surface (client.connector).
SPARK_MAY_IMPORT = {"client", "client.errors", "client.config", "client.connector"}
SPARK_MAY_IMPORT_UNDER = ("client.log.core.",)


def _module_files(root: Path) -> dict[str, Path]:
    """`client.log.logs` -> its file, for every module of our packages (a package is its __init__)."""
    found: dict[str, Path] = {}
    for package in sorted(OUR_PACKAGES):
        for path in _python_files(root / package):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _imported_names(module: str, path: Path) -> list[str]:
    """Every name the module imports (`x` of `import x`, `m.n` of `from m import n`), relative ones resolved."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                anchor = ".".join(parts[:len(parts) - node.level + 1])
                base = ".".join(part for part in (anchor, base) if part)   # above the top: bkledger's root
            names.extend(f"{base}.{alias.name}" for alias in node.names)
    return names


def _graph(root: Path) -> dict[str, set[str]]:
    """module -> the modules of ours it imports. `from p import m` is an arrow to the submodule p.m where there
    is one, else to p; an import of p.m is not counted as one of package p (p's __init__ runs, but the layer
    rules speak of what a module names)."""
    files = _module_files(root)

    def target(name: str) -> str | None:
        name = _layer_name(name)
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        targets = {target(name) for name in _imported_names(module, path)}
        graph[module] = {t for t in targets if t is not None and t != module}
    return graph


def _circles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for nxt in successors:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def _in(module: str, names: Iterable[str]) -> bool:
    return any(module == name or module.startswith(name + ".") for name in names)


def _forbidden(source: str, target: str) -> str | None:
    """Why the arrow source -> target is forbidden, or None."""
    src, dst = source.split(".")[0], target.split(".")[0]
    if src == "client" and dst in ("bookie", "spark_connector"):
        return f"the client imports {dst}"
    if src == "bookie" and _in(target, ["client.metrics"]):
        return "the bookie imports the client's metrics (what both share lives in wire.process_metrics)"
    if _in(source, REQUEST_PATH) and dst == "client":
        return "the bookie's request path imports the client (the wire and entry format live in wire/)"
    if src == "wire" and dst not in ("wire", "proto"):
        return "wire imports nothing of ours but proto"
    if src == "spark_connector" and dst == "client" and not (
            target in SPARK_MAY_IMPORT or target.startswith(SPARK_MAY_IMPORT_UNDER)):
        return "Spark imports only the client's public modules"
    return None


def _violations(graph: Mapping[str, Iterable[str]]) -> list[str]:
    return [f"{source} -> {target}: {why}" for source in sorted(graph) for target in sorted(graph[source])
            if (why := _forbidden(source, target))]


def test_our_modules_import_each_other_without_circles():
    """No circle of imports among the modules of bookie, client, proto, spark_connector and wire, counting
    every import (function-level and TYPE_CHECKING ones too): a circle is broken by moving the shared piece
    down, never by hiding an import in a function."""
    graph = _graph(ROOT)
    circles = _circles(graph)
    shown = [f"{len(c)} modules: " + ", ".join(f"{m} -> {sorted(graph[m] & set(c))}" for m in c) for c in circles]
    assert not circles, "import circles:\n" + "\n".join(shown)


def test_no_import_points_the_wrong_way():
    """client -> bookie or spark_connector, the bookie's request path -> client, bookie -> client.metrics, wire ->
    anything of ours but proto, and spark_connector -> the client's inner modules are all forbidden."""
    violations = _violations(_graph(ROOT))
    assert not violations, "forbidden imports:\n" + "\n".join(violations)


def test_the_request_path_and_public_lists_name_real_modules():
    """The lists above name modules that exist, so a rename cannot quietly empty a rule."""
    modules = set(_module_files(ROOT))
    assert all(any(_in(m, [name]) for m in modules) for name in REQUEST_PATH | SPARK_MAY_IMPORT)


def test_the_graph_walker_sees_every_kind_of_import(tmp_path):
    """Relative, function-level and TYPE_CHECKING imports are arrows; a circle through them is found, and the
    arrows the rules forbid are named."""
    for package in OUR_PACKAGES:
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "client" / "a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .b import B\n")
    (tmp_path / "client" / "b.py").write_text("def f():\n    from bkledger.client import a\n")
    (tmp_path / "wire" / "w.py").write_text("from ..client import b\n")
    (tmp_path / "spark_connector" / "s.py").write_text("from bkledger.client.b import f\n")
    (tmp_path / "client" / "metrics.py").write_text("")
    (tmp_path / "bookie" / "stats.py").write_text("from bkledger.client.metrics import add_default_collectors\n")
    graph = _graph(tmp_path)
    assert graph["client.a"] == {"client.b"} and graph["client.b"] == {"client.a"}
    assert _circles(graph) == [["client.a", "client.b"]]
    assert _violations(graph) == ["bookie.stats -> client.metrics: the bookie imports the client's metrics (what both "
                                  "share lives in wire.process_metrics)",
                                  "spark_connector.s -> client.b: Spark imports only the client's public modules",
                                  "wire.w -> client.b: wire imports nothing of ours but proto"]
