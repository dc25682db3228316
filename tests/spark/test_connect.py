"""Spark Connect: format("bkledger") through `SparkSession.builder.remote("local[2]")`, the Connect server
shipped in the pyspark wheel, with real bookies and ZooKeeper.

A Python process holds either classic sessions (the `spark` fixture of this suite) or a local Connect
server, so the Connect driver runs as its own process (tests/spark/connect_driver.py). SPARK_TESTING=1 makes
the server bind an ephemeral port (the client asks the JVM which), never the fixed 15002.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.spark
REPO = Path(__file__).resolve().parents[2]


def connect_client_missing() -> str | None:
    try:
        import google.rpc  # noqa: F401
        import grpc_status  # noqa: F401
        import zstandard  # noqa: F401
    except ImportError as exc:
        return f"the Spark Connect client needs {exc.name} (pinned in pyproject.toml; run make .venv/.installed)"
    return None


@pytest.mark.skipif(connect_client_missing() is not None, reason=str(connect_client_missing()))
def test_append_read_and_stream_through_spark_connect(cluster, bk, tmp_path: Path) -> None:
    """Batch appends from the main thread and another thread, a batch read, and a streaming copy (source and
    exactly-once sink) started from another thread, all through a Spark Connect session."""
    log = f"connect-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "SPARK_TESTING": "1", "PYSPARK_PYTHON": sys.executable,
           "PYTHONPATH": os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])}
    env.pop("SPARK_REMOTE", None)
    proc = subprocess.run([sys.executable, "-m", "tests.spark.connect_driver", cluster.metadata_service_uri, log,
                           str(tmp_path / "checkpoint")],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, (proc.stdout[-2000:], proc.stderr[-4000:])
    result = json.loads(lines[0][len("RESULT "):])
    assert result["session"] == "pyspark.sql.connect.session"        # really a Connect session
    assert result["thread_errors"] == []
    assert result["values"] == list(range(150))                      # main-thread and thread appends, once
    assert result["streamed"] == list(range(150))                    # the streaming copy, exactly once
    meta = bk.log_metadata(log)
    assert meta.entries == 150 and len(meta.ledgers) == 4             # 2 jobs x 2 partitions
