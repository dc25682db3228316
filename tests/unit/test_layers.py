"""Layer rule of DESIGN.md: the protocol core is pure and nothing in client/ reaches into bookie/."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PURE_DIRS = [ROOT / "client" / "protocol", ROOT / "client" / "log" / "core", ROOT / "bookie" / "core"]
FORBIDDEN_IN_CORE = {"asyncio", "grpc", "kazoo", "os", "time", "random", "threading", "socket", "subprocess"}


OUR_PACKAGES = {"bookie", "client", "proto", "spark_connector"}


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
