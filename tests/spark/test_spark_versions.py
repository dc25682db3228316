"""The connector on the older pyspark release lines (issue 43 item 1: Spark 4.0, 4.1 and 4.2): in each venv
named by BKLEDGER_SPARK_VENVS (paths separated by spaces; `make test-spark-versions` builds one per release
of SPARK_VERSIONS and sets it), tests/spark/spark_versions_driver.py runs with that venv's Python: a local
cluster from its `bkledger local up`, a batch append and read (filters pushed down from 4.1 on), a
streaming query log -> log with Trigger.AvailableNow run twice from one checkpoint (each record copied
once), and a read limit per trigger, refused before pyspark 4.2 with a BkLedgerOptionError that names the
release needed.

Skipped without BKLEDGER_SPARK_VENVS, so `make test` stays on the pyspark of constraints.txt. Before
spark_connector/spark_compat.py, the read failed on 4.1.4 (ModuleNotFoundError:
pyspark.sql.streaming.datasource) and on 4.0.5 (ImportError: cannot import name 'Filter').
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.timeout(1500)]

REPO = Path(__file__).resolve().parents[2]
VENVS = os.environ.get("BKLEDGER_SPARK_VENVS", "").split()


def _version_of(python: Path) -> str:
    done = subprocess.run([str(python), "-c", "import pyspark; print(pyspark.__version__)"], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, f"{python} has no pyspark: {done.stderr[-2000:]}"
    return done.stdout.strip()


@pytest.mark.skipif(not VENVS, reason="BKLEDGER_SPARK_VENVS names no venv (make test-spark-versions sets it)")
@pytest.mark.parametrize("venv", VENVS or ["none"])
def test_append_read_and_available_now_stream_on_this_pyspark(venv: str, tmp_path: Path) -> None:
    python = Path(venv) / "bin" / "python"
    assert python.exists(), f"BKLEDGER_SPARK_VENVS names {venv}, which has no bin/python"
    version = _version_of(python)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON",
                                                             "VIRTUAL_ENV", "SPARK_HOME")}
    done = subprocess.run([str(python), str(REPO / "tests" / "spark" / "spark_versions_driver.py"), version,
                           str(tmp_path)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1400)
    assert done.returncode == 0, f"pyspark {version}:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    line = next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))
    result = json.loads(line[len("RESULT "):])
    print(f"pyspark {version}: {result}")
    assert result["pyspark"] == version
    assert result["batch"]["read"] == result["batch"]["appended"] == 200
    assert result["batch"]["where_entry_id_lt_10"] == 20          # two ledgers (two tasks), entries 0-9 of each
    assert result["stream"]["copied"] == 250
    line_of = tuple(int(p) for p in version.split(".")[:2])
    left = result["batch"]["spark_filter"]            # 4.1+: the reader took both comparisons (pushFilters)
    assert ("< 10" not in left and ">= 0" not in left) if line_of >= (4, 1) else ("< 10" in left), left
    older = line_of < (4, 2)
    assert result["read_limit"].startswith("refused" if older else "honoured"), result["read_limit"]
