"""bkledger installs as a library: the built wheel, in a fresh venv beside proto-plus, runs a Spark append and
read from a job folder that holds its own `client.py` and `proto/`, and the README's five-minute path
(issue 43, items 1 and 3).

Before the import root moved to `bkledger.*`, such a job failed in Spark's Python workers (their working
directory is the job's, so `import client` found the job's file: `ImportError: cannot import name
'BadPasswordError' from 'client'`), and proto-plus (which every google-cloud-* library installs) owns the
top-level name `proto`.

Affordable on purpose: the fresh venv gets the project venv's site-packages through one .pth line (pyspark,
pyarrow, grpcio, ... are not downloaded again) and only the wheel and proto-plus are installed into it, with
--no-deps. What it proves is the wheel's own content: its packages, its `pyspark_bkledger` module that Spark
finds by itself, its console command, and that nothing of it shadows or is shadowed. Skipped, saying why,
where it cannot run: no Java (Spark and ZooKeeper need it), no pyspark, or proto-plus not installable.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[2]
SOURCES = ("pyproject.toml", "setup.py", "README.md", "pyspark_bkledger.py")
PACKAGES = ("bkledger", "client", "bookie", "proto", "spark_connector", "wire")   # the folders the wheel maps

JOB_CLIENT = "WHO = 'the job'\n"          # a job's own module named like ours used to be
JOB_PROTO = "WHO = 'the job'\n"

JOB = textwrap.dedent('''
    """A user's Spark job: its folder holds its own client.py and proto/, bkledger comes from the wheel."""
    import os, subprocess, sys, tempfile
    import client, proto
    assert client.WHO == proto.WHO == "the job", (client.__file__, proto.__file__)

    bin_dir = os.path.dirname(sys.executable)
    cluster_dir = os.path.join(tempfile.mkdtemp(prefix="bkledger-install-"), "cluster")
    up = subprocess.run([os.path.join(bin_dir, "bkledger"), "local", "up", "--bookies", "3", "--dir", cluster_dir,
                         "--set", "autoRecoveryDaemonEnabled=false"], capture_output=True, text=True, timeout=300)
    assert up.returncode == 0, up.stderr[-3000:]
    uri = up.stdout.strip().splitlines()[-1]
    try:
        # Spark finds format("bkledger") with the Python of PYSPARK_PYTHON (default: python3 on the PATH)
        os.environ["PYSPARK_PYTHON"] = sys.executable
        from pyspark.sql import SparkSession
        spark = (SparkSession.builder.master("local[2]").appName("bkledger-install")
                 .config("spark.pyspark.python", sys.executable)
                 .config("spark.ui.enabled", "false")
                 .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
                 .config("spark.python.authenticate.socketTimeout", "120s")
                 .getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        values = [f"record {i}".encode() for i in range(200)]
        df = spark.createDataFrame([(v,) for v in values], "value binary").repartition(2)
        (df.write.format("bkledger").option("metadataServiceUri", uri).option("log", "installed")
           .mode("append").save())
        rows = (spark.read.format("bkledger").option("metadataServiceUri", uri).option("log", "installed")
                .load().collect())
        assert sorted(bytes(r.value) for r in rows) == sorted(values), len(rows)
        assert {r.log for r in rows} == {"installed"}
        spark.sql(f"CREATE TEMPORARY VIEW installed USING bkledger "
                  f"OPTIONS (metadataServiceUri '{uri}', log 'installed')")
        counted = spark.sql("SELECT count(*) AS n FROM installed WHERE entry_id >= 0").collect()[0].n
        assert counted == len(values), counted
        os.environ["BKLEDGER_URI"] = uri             # the README's five-minute path, as a user runs it
        exec(compile(open("five_minutes.py").read(), "README.md five-minute path", "exec"), {})
        copied = spark.read.format("bkledger").option("metadataServiceUri", uri).option("log", "orders_copy").load()
        assert copied.count() == 10_000, copied.count()
        spark.stop()
        print("JOB OK", len(rows))
    finally:
        subprocess.run([os.path.join(bin_dir, "bkledger"), "local", "down", "--dir", cluster_dir],
                       capture_output=True, timeout=120)
''')

CHECK = textwrap.dedent('''
    """Outside the job folder: where each name comes from in the fresh venv."""
    import importlib.util, pkgutil, sys
    import bkledger, bkledger.client, bkledger.proto.bookie_pb2, bkledger.spark_connector.datasource
    import proto
    from bkledger.client import BookKeeper, BadPasswordError
    prefix = sys.prefix
    assert bkledger.__file__.startswith(prefix), bkledger.__file__
    assert bkledger.__version__ != "0+unknown", bkledger.__version__
    assert hasattr(proto, "Message") and proto.__file__.startswith(prefix), proto.__file__   # proto-plus's
    assert importlib.util.find_spec("client") is None, "a top-level client leaked into the install"
    assert "pyspark_bkledger" in {m.name for m in pkgutil.iter_modules()}, "Spark would not find the source"
    print("CHECK OK")
''')


def five_minute_block() -> str:
    """The README's Python block marked `# five-minute path`."""
    text = (REPO / "README.md").read_text()
    start = text.index("```python\n# five-minute path\n") + len("```python\n")
    return text[start:text.index("```", start)]


def _skip_unless_runnable() -> None:
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("no Java on this machine: Spark and the local ZooKeeper need Java 17")
    try:
        import pyspark  # noqa: F401
    except ImportError:
        pytest.skip("pyspark is not installed in this venv (it lends the heavy dependencies to the fresh one)")
    if importlib.util.find_spec("setuptools") is None:
        pytest.skip("setuptools is not installed in this venv: the wheel is built without build isolation")


def _run(cmd: list[str], cwd: Path, timeout: float, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)
    assert done.returncode == 0, f"{cmd} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
    return done.stdout


def build_wheel(out: Path) -> Path:
    """The wheel as `pip wheel .` makes it, built from a copy of the sources (the worktree gets no build/)."""
    src = out / "src"
    src.mkdir(parents=True)
    for name in SOURCES:
        shutil.copy2(REPO / name, src / name)
    skip = shutil.ignore_patterns("__pycache__", "*.so", "*.pyc")
    for name in PACKAGES:
        shutil.copytree(REPO / name, src / name, symlinks=True, ignore=skip)
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(src)],
         cwd=out, timeout=600)
    wheels = list(out.glob("bkledger-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def fresh_venv(where: Path) -> Path:
    """A venv of this Python whose heavy dependencies come from the project venv through one .pth line."""
    _run([sys.executable, "-m", "venv", "--without-pip", str(where)], cwd=where.parent, timeout=120)
    python = where / "bin" / "python"
    purelib = _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                   cwd=where.parent, timeout=60).strip()
    lent = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    Path(purelib, "zz_project_venv.pth").write_text("".join(f"{p}\n" for p in sorted(lent)))
    return python


def pip_install(python: Path, *what: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q", *what],
                          capture_output=True, text=True, timeout=600)


def test_wheel_in_fresh_venv_beside_proto_plus_runs_a_spark_append_and_read(tmp_path: Path) -> None:
    _skip_unless_runnable()
    wheel = build_wheel(tmp_path / "dist")
    python = fresh_venv(tmp_path / "venv")
    plus = pip_install(python, "proto-plus")
    if plus.returncode != 0:
        pytest.skip(f"proto-plus could not be installed (no package index here?): {plus.stderr.strip()[-300:]}")
    done = pip_install(python, str(wheel))
    assert done.returncode == 0, done.stderr

    neutral = tmp_path / "elsewhere"
    neutral.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    assert "CHECK OK" in _run([str(python), "-c", CHECK], cwd=neutral, timeout=120, env=env)

    job = tmp_path / "job"
    (job / "proto").mkdir(parents=True)
    (job / "client.py").write_text(JOB_CLIENT)
    (job / "proto" / "__init__.py").write_text(JOB_PROTO)
    (job / "job.py").write_text(JOB)
    (job / "five_minutes.py").write_text(five_minute_block())
    out = _run([str(python), "job.py"], cwd=job, timeout=840, env=env)
    print(out)
    assert "JOB OK 200" in out
