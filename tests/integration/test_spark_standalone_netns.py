"""Several hosts as they are deployed (issue 45 item 2): a Spark standalone master and worker, ZooKeeper
(`bkledger zookeeper`) and three bookies, each in its own network namespace with its own address.

The bookies are started with no address in their configuration: they listen on all interfaces and must
register under their host's own address (a 127.0.0.1 or 0.0.0.0 id would be unreachable from the
executors). ZooKeeper listens on all interfaces of its namespace and prints the URI with that host's
address. The driver (client mode) and the executors on the worker append a log and read it back.
Runs `tests.integration.netns_spark_cluster` under `unshare -n -m`; skipped, saying why, where network
namespaces cannot be made. Whatever happens, the processes are killed and the namespaces go away.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.test_network_faults import _kill_zookeeper, namespaces_unavailable

pytestmark = [pytest.mark.integration, pytest.mark.spark]
ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 240.0      # about 60-90 s on an idle machine: four JVMs start (ZooKeeper, master, worker, driver)


@pytest.mark.timeout(TIMEOUT + 60)
def test_spark_standalone_cluster_and_bookies_on_separate_hosts(tmp_path: Path) -> None:
    """Batch append and read of a log by a Spark standalone cluster whose master, worker and driver are on
    hosts other than ZooKeeper's and the bookies'; the bookies advertise their host's address by default."""
    reason = namespaces_unavailable()
    if reason:
        pytest.skip(reason)
    proc = subprocess.Popen(["unshare", "-n", "-m", "--propagation", "private", sys.executable, "-m",
                             "tests.integration.netns_spark_cluster", str(tmp_path)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=30)
        pytest.fail(f"the standalone cluster scenario did not finish within {TIMEOUT:.0f}s:\n{err[-4000:]}"
                    f"{_logs(tmp_path)}")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)       # anything of the scenario's left behind (JVMs, bookies)
        _kill_zookeeper(tmp_path)                     # its JVM runs in its own session
    assert proc.returncode == 0, f"scenario failed:\n{err[-6000:]}{_logs(tmp_path)}"
    result = next(line for line in out.splitlines() if line.startswith("RESULT"))
    print(result)
    assert "'executors_at': ['10.77.102.2']" in result


def _logs(base: Path) -> str:
    tails = []
    for path in sorted([*base.glob("*.log"), *base.glob("bookie-*/bookie.log")]):
        lines = path.read_text(errors="replace").splitlines()[-(40 if path.name == "spark-driver.log" else 15):]
        tails.append(f"\n--- {path.relative_to(base)} ---\n" + "\n".join(lines))
    return "".join(tails)
