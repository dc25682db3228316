"""spark_connector.worker_path: which pyspark.zip entries the .pth line drops from sys.path."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

from bkledger.spark_connector import worker_path


def run_drop(path: list[str], environ: dict[str, str] | None = None) -> list[str]:
    """The .pth code, run on a copy of `path` instead of the real sys.path."""
    fake_sys = SimpleNamespace(path=list(path))
    fake_os = SimpleNamespace(environ=environ or {}, path=os.path, sep=os.sep)
    exec(worker_path.DROP_CODE, {"sys": fake_sys, "os": fake_os})
    result: list[str] = fake_sys.path
    return result


def installed_pyspark(root: Path) -> tuple[str, str]:
    """(site dir, the zip inside its pyspark package), as a pip install lays them out."""
    (root / "pyspark" / "python" / "lib").mkdir(parents=True)
    (root / "pyspark" / "__init__.py").write_text("")
    return str(root), str(root / "pyspark" / "python" / "lib" / "pyspark.zip")


def test_the_zip_inside_an_installed_pyspark_on_the_path_is_dropped(tmp_path: Path) -> None:
    site, zipped = installed_pyspark(tmp_path / "site-packages")
    assert run_drop([zipped, "/x/py4j.zip", site]) == ["/x/py4j.zip", site]


def test_a_zip_whose_package_is_not_on_the_path_is_kept(tmp_path: Path) -> None:
    _, zipped = installed_pyspark(tmp_path / "site-packages")
    assert run_drop([zipped, "/elsewhere"]) == [zipped, "/elsewhere"]


def test_a_spark_distributions_zip_is_kept(tmp_path: Path) -> None:
    home = tmp_path / "spark-4.2.0"          # $SPARK_HOME/python/lib/pyspark.zip: no pyspark package there
    (home / "python" / "lib").mkdir(parents=True)
    zipped = str(home / "python" / "lib" / "pyspark.zip")
    assert run_drop([zipped, str(tmp_path)]) == [zipped, str(tmp_path)]


def test_the_opt_out_keeps_the_zip(tmp_path: Path) -> None:
    site, zipped = installed_pyspark(tmp_path / "site-packages")
    assert run_drop([zipped, site], {worker_path.OPT_OUT: "keep"}) == [zipped, site]


def test_the_pth_line_is_one_import_line() -> None:
    line = worker_path.pth_line()
    assert line.startswith("import ") and line.count("\n") == 1 and line.endswith("\n")


def test_spark_finds_the_data_source_without_importing_the_client() -> None:
    """Spark's lookup of data sources imports `pyspark_bkledger` in a Python process of its own at a
    session's first use and asks only for the name: the client (gRPC, kazoo) is not imported there."""
    import subprocess
    import sys

    code = ("import sys, pyspark_bkledger; assert pyspark_bkledger.DefaultSource.name() == 'bkledger'; "
            "print(sorted(m for m in ('client', 'grpc', 'kazoo', 'numpy') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
