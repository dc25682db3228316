"""Real network faults (R9, R13, R15-R20): bookies, ZooKeeper and the client each in a network namespace
with its own address, bookies reached through `advertisedAddress`, faults made with blackhole routes.

Each test re-executes `tests.integration.netns_scenarios` under `unshare -n -m --propagation private`
(root is needed); the namespaces and everything in them go away with that process. Where namespaces
cannot be made the tests skip and say why. Nothing here uses 127.0.0.1: the run shows that the client,
the bookie and ZooKeeper work between separate addresses.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
SCENARIO_TIMEOUT = 240.0
SPARK_SCENARIO_TIMEOUT = 480.0       # a JVM and Python workers start inside the client namespace


@functools.cache
def namespaces_unavailable() -> str | None:
    """None if this machine lets us make network namespaces, else the reason."""
    if os.geteuid() != 0:
        return "network namespaces need root (unshare -n, ip netns); run as root or in CI"
    for tool in ("unshare", "ip"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed (util-linux / iproute2), so no network namespaces can be made"
    probe = subprocess.run(
        ["unshare", "-n", "-m", "--propagation", "private", "sh", "-c",
         "mount -t tmpfs tmpfs /run && ip netns add probe && ip link add p0 type veth peer name p1 netns probe"],
        capture_output=True, text=True, timeout=30)
    if probe.returncode != 0:
        return f"cannot make network namespaces / veth pairs here: {probe.stderr.strip() or probe.returncode}"
    return None


def run_scenario(name: str, base: Path, timeout: float = SCENARIO_TIMEOUT) -> str:
    reason = namespaces_unavailable()
    if reason:
        pytest.skip(reason)
    proc = subprocess.Popen(
        ["unshare", "-n", "-m", "--propagation", "private", sys.executable, "-m",
         "tests.integration.netns_scenarios", name, str(base)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)      # the scenario and the bookies it started
        out, err = proc.communicate(timeout=30)
        _kill_zookeeper(base)
        pytest.fail(f"scenario {name} did not finish within {timeout:.0f}s:\n{err[-4000:]}")
    assert proc.returncode == 0, f"scenario {name} failed:\n{err[-6000:]}"
    return next(line for line in out.splitlines() if line.startswith("RESULT"))


def _kill_zookeeper(base: Path) -> None:
    pid_file = base / "zookeeper" / "zookeeper.pid"
    if pid_file.exists():
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)


def test_r13_r9_client_cut_off_from_one_bookie(tmp_path):
    """The client cannot reach one bookie, ZooKeeper and the other bookies can: reads speculate past
    it (R13), adds replace it (R9), recovery of an abandoned ledger completes (R16-R20)."""
    print(run_scenario("client_cut_off", tmp_path))


def test_r15_asymmetric_partition_answers_dropped(tmp_path):
    """Requests reach a bookie, its answers are dropped: reads and recovery complete without it, the
    bookie did fence the ledger (a later plain add gets EFENCED), and an open ledger with Qa < Qw
    replaces it after addEntryTimeoutSec although its adds complete on the others (R9)."""
    print(run_scenario("asymmetric", tmp_path))


def test_bookie_partitioned_from_zookeeper_but_not_from_clients(tmp_path):
    """A bookie cut from ZooKeeper only: its registration expires (new ensembles leave it out), it keeps
    serving its ledgers' reads and adds, and registers again once ZooKeeper is back."""
    print(run_scenario("bookie_cut_from_zookeeper", tmp_path))


@pytest.mark.spark
def test_r13_spark_connector_with_the_client_cut_off_from_a_bookie(tmp_path):
    """The Spark connector (driver and Python workers in the client namespace) reads a log while cut
    off from one bookie of its ensemble, and appends to it: nothing assumes 127.0.0.1 for bookies or
    ZooKeeper."""
    print(run_scenario("spark_client_cut_off", tmp_path, SPARK_SCENARIO_TIMEOUT))
