"""A Spark standalone cluster and a bkledger cluster on separate "hosts" (network namespaces), run as
`python -m tests.integration.netns_spark_cluster <dir>` inside `unshare -n -m --propagation private`
(tests/integration/test_spark_standalone_netns.py does that).

The namespaces are netns_world's (the hub routes between them; each namespace has one address and a
default route), plus `zk` (10.77.100.2), `sm` (the Spark master, 10.77.101.2) and `sw` (a Spark worker,
10.77.102.2). ZooKeeper is `bkledger zookeeper` listening on all interfaces of `zk`; the three bookies in
`b1..b3` run with no address set at all (listen on all interfaces, advertise the host's own address), so
each must register as 10.77.<i>.2:3181 by itself. The driver runs in `cl` in client mode, the executors on
the worker: batch append to a log and read it back. Everything started here is stopped in `finally`
(and the namespaces go with the unshared process); every wait is bounded.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from bkledger.client.meta.store import MetadataStore
from tests.integration.netns_world import BOOKIE_PORT, CLIENT_ADDRESS, World, bookie_address, wait_until

ZK_HOST, MASTER_HOST, WORKER_HOST = "10.77.100.2", "10.77.101.2", "10.77.102.2"
MASTER_URL = f"spark://{MASTER_HOST}:7077"
ROWS, LOG = 10_000, "standalone-log"
BOOKIES = 3
MODULE = "tests.integration.netns_spark_cluster"


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def first_line(proc: subprocess.Popen[str], timeout: float) -> str:
    """The first line `proc` prints on stdout, waited for at most `timeout` seconds."""
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    if not ready:
        raise AssertionError(f"no output from {proc.args!r} within {timeout:.0f}s")
    return proc.stdout.readline().strip()


def accepts(host: str, port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=1.0):
        return True
    return False


class SparkCluster:
    """The standalone master in `sm` and one worker in `sw`, started with the pyspark wheel's spark-class."""

    def __init__(self, base: Path):
        self.base = base
        self.procs: list[subprocess.Popen[bytes]] = []
        self.env = {**os.environ, "SPARK_HOME": str(spark_home()), "SPARK_DAEMON_MEMORY": "256m",
                    "SPARK_WORKER_DIR": str(base / "spark-work"), "SPARK_LOCAL_DIRS": str(base / "spark-tmp"),
                    "SPARK_LOG_DIR": str(base / "spark-logs"), "PYSPARK_PYTHON": sys.executable}

    def _start(self, namespace: str, name: str, *args: str) -> Path:
        log_path = self.base / f"spark-{name}.log"
        with open(log_path, "ab") as log:
            self.procs.append(subprocess.Popen(
                ["ip", "netns", "exec", namespace, str(spark_home() / "bin" / "spark-class"), *args],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=self.env, cwd=self.base))
        return log_path

    def start(self) -> None:
        self._start("sm", "master", "org.apache.spark.deploy.master.Master", "--host", MASTER_HOST,
                    "--port", "7077", "--webui-port", "8080")
        wait_until("the Spark master to listen", lambda: accepts(MASTER_HOST, 7077), 60)
        worker_log = self._start("sw", "worker", "org.apache.spark.deploy.worker.Worker", "--host", WORKER_HOST,
                                 "--cores", "2", "--memory", "1g", "--webui-port", "8081", MASTER_URL)
        wait_until("the Spark worker to register with the master",
                   lambda: b"Successfully registered with master" in worker_log.read_bytes(), 60)

    def stop(self) -> None:
        for proc in reversed(self.procs):       # the worker first: its executors stop with it
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


def start_zookeeper(base: Path) -> tuple[subprocess.Popen[str], str]:
    """`bkledger zookeeper` in its own namespace, on all its interfaces; the URI it says other hosts use."""
    proc = subprocess.Popen(["ip", "netns", "exec", "zk", sys.executable, "-m", "bkledger.bookie.cli", "zookeeper",
                             "--listen", "0.0.0.0", "--port", "2181", "--dir", str(base / "zookeeper"),
                             "--heap", "256m"],
                            stdout=subprocess.PIPE, stderr=open(base / "zookeeper-cmd.log", "ab"), text=True)  # noqa: SIM115
    return proc, first_line(proc, 90)


def writable(uri: str) -> set[str]:
    with MetadataStore(uri, session_timeout=5.0) as store:
        return set(store.writable_bookies())


def main(base: Path) -> None:
    world = World(base, bookies=BOOKIES)
    spark = SparkCluster(base)
    zookeeper: subprocess.Popen[str] | None = None
    try:
        world.build()
        for name, subnet in (("zk", 100), ("sm", 101), ("sw", 102)):
            world._attach(name, subnet)
        zookeeper, world.uri = start_zookeeper(base)
        assert world.uri == f"zk://{ZK_HOST}:2181/ledgers", f"ZooKeeper advertised {world.uri}"
        for i in range(1, BOOKIES + 1):       # no address set: all interfaces, the host's own address advertised
            world.start_bookie(i, {"listenAddress": "0.0.0.0", "advertisedAddress": ""})
        ids = {f"{bookie_address(i)}:{BOOKIE_PORT}" for i in range(1, BOOKIES + 1)}
        wait_until(f"bookies {sorted(ids)} to register", lambda: writable(world.uri) == ids, 60)
        spark.start()
        with open(base / "spark-driver.log", "w") as driver_log:     # its tail is shown if the test fails
            done = subprocess.run(["ip", "netns", "exec", "cl", sys.executable, "-m", MODULE, "driver", world.uri],
                                  stdout=subprocess.PIPE, stderr=driver_log, text=True, timeout=240, cwd=Path.cwd())
        assert done.returncode == 0, "the Spark driver failed (spark-driver.log)"
        print(next(line for line in done.stdout.splitlines() if line.startswith("RESULT")), flush=True)
    finally:
        spark.stop()
        world.stop()
        if zookeeper is not None:
            zookeeper.send_signal(signal.SIGTERM)      # it stops its server; kill it if it does not
            try:
                zookeeper.wait(20)
            except subprocess.TimeoutExpired:
                zookeeper.kill()


def driver(uri: str) -> None:
    """In `cl`: a client-mode application on the standalone cluster; executors run on the worker in `sw`."""
    os.environ["PYSPARK_PYTHON"] = sys.executable    # the driver's own Python workers (data source planning)
    from pyspark.sql import SparkSession

    session = (SparkSession.builder.master(MASTER_URL).appName("bkledger-standalone-netns")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.driver.host", CLIENT_ADDRESS).config("spark.driver.bindAddress", CLIENT_ADDRESS)
               .config("spark.driver.memory", "512m").config("spark.executor.memory", "512m")
               .config("spark.pyspark.python", sys.executable).config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    try:
        sc = session.sparkContext

        def own_address(_: object) -> str:
            import socket as s

            with s.socket(s.AF_INET, s.SOCK_DGRAM) as probe:
                probe.connect((CLIENT_ADDRESS, 9))
                return str(probe.getsockname()[0])

        where = set(sc.parallelize(range(2), 2).map(own_address).collect())
        assert where == {WORKER_HOST}, f"Python workers ran at {where}, not on the worker {WORKER_HOST}"
        start = time.monotonic()
        rows = session.range(0, ROWS, numPartitions=2).selectExpr("cast(concat('row-', id) as binary) as value")
        rows.write.format("bkledger").option("metadataServiceUri", uri).option("log", LOG) \
            .option("ensembleSize", "3").option("writeQuorum", "2").option("ackQuorum", "2").mode("append").save()
        wrote = time.monotonic() - start
        got = session.read.format("bkledger").option("metadataServiceUri", uri).option("log", LOG).load()
        values = sorted(r.value for r in got.select("value").collect())
        assert values == sorted(b"row-%d" % i for i in range(ROWS)), f"{len(values)} rows read back, not {ROWS}"
        print("RESULT", {"rows": ROWS, "executors_at": sorted(where), "write_s": round(wrote, 1),
                         "read_s": round(time.monotonic() - start - wrote, 1)}, flush=True)
    finally:
        session.stop()


if __name__ == "__main__":
    if sys.argv[1] == "driver":
        driver(sys.argv[2])
    else:
        main(Path(sys.argv[1]))
