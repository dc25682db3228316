"""Layer rule of DESIGN.md: the protocol core is pure and nothing in client/ reaches into bookie/."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PURE_DIRS = [ROOT / "client" / "protocol", ROOT / "client" / "log" / "core", ROOT / "bookie" / "core"]
FORBIDDEN_IN_CORE = {"asyncio", "grpc", "kazoo", "os", "time", "random", "threading", "socket", "subprocess"}


def _imported_modules(path: Path) -> list[tuple[int, str]]:
    """Top-level names of every module imported anywhere in the file (also inside functions)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
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
