"""Spark's Python processes import the installed, compiled pyspark instead of compiling pyspark.zip.

Spark starts every Python process it needs (the task workers' daemon, and one daemon per data source
planning step: lookup, create, plan the read, write, commit) with `$SPARK_HOME/python/lib/pyspark.zip`
first on PYTHONPATH. For a pip-installed pyspark, SPARK_HOME is the installed package itself, and the zip
holds the same sources as the package beside it, but only as .py files: zipimport cannot cache bytecode,
so each of those processes compiles pyspark from source as it starts, 0.6-0.8 s of CPU each on this
machine (0.17 s importing the compiled package). A session's first bkledger write starts four such
processes and its first read two more.

`install()` writes a one-line .pth file into this interpreter's site-packages. At each interpreter start
it drops a PYTHONPATH entry `<dir>/pyspark/python/lib/pyspark.zip` when `<dir>/pyspark` is an installed
package whose `<dir>` is also on sys.path: then the zip is a copy of that very package, and the package
is what gets imported. Any other pyspark.zip (a Spark distribution's, under its own SPARK_HOME) is left
alone. Set BKLEDGER_PYSPARK_ZIP=keep to keep the zip anyway. `make` installs it into .venv; elsewhere:

    python -m bkledger.spark_connector.worker_path install      # or: uninstall, status
"""

from __future__ import annotations

import os
import sys
import sysconfig
from pathlib import Path

PTH_NAME = "bkledger-pyspark-compiled.pth"
OPT_OUT = "BKLEDGER_PYSPARK_ZIP"      # "keep": leave pyspark.zip on sys.path
ZIP_TAIL = os.path.join("pyspark", "python", "lib", "pyspark.zip")

# Runs at every interpreter start (site.py executes .pth lines that begin with "import"): only os and
# sys, both loaded by then, and nothing at all unless a pyspark.zip is on the path.
DROP_CODE = f"""
def _bkledger_drop_pyspark_zip(path, environ, isfile, sep):
    if environ.get({OPT_OUT!r}) == "keep":
        return path
    tail = {ZIP_TAIL!r}
    keep = []
    for entry in path:
        base = entry[: -len(tail)].rstrip(sep) if entry.endswith(tail) else None
        if base is not None and base in path and isfile(base + sep + "pyspark" + sep + "__init__.py"):
            continue
        keep.append(entry)
    return keep
sys.path[:] = _bkledger_drop_pyspark_zip(sys.path, os.environ, os.path.isfile, os.sep)
del _bkledger_drop_pyspark_zip
"""


def pth_line() -> str:
    return f"import os, sys; exec({DROP_CODE!r})\n"


def pth_path() -> Path:
    return Path(sysconfig.get_paths()["purelib"]) / PTH_NAME


def install() -> Path:
    path = pth_path()
    path.write_text(pth_line())
    return path


def uninstall() -> Path:
    path = pth_path()
    path.unlink(missing_ok=True)
    return path


def installed() -> bool:
    path = pth_path()
    return path.is_file() and path.read_text() == pth_line()


def main(argv: list[str]) -> int:
    verb = argv[0] if argv else "status"
    if verb == "install":
        print(f"installed {install()}")
    elif verb == "uninstall":
        print(f"removed {uninstall()}")
    elif verb == "status":
        print(f"{pth_path()}: {'installed' if installed() else 'not installed'}")
    else:
        print("usage: python -m bkledger.spark_connector.worker_path [install|uninstall|status]", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
