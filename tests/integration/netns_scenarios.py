"""Network-fault scenarios, run as `python -m tests.integration.netns_scenarios <name> <dir>` inside
`unshare -n -m --propagation private` (tests/integration/test_network_faults.py does that).

Each builds the namespaces of `netns_world`, starts ZooKeeper and four bookies, moves itself into
the client namespace, runs its client steps and checks; any failed check raises (exit code 1,
traceback on stderr). Every wait is bounded.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from bkledger.client import BookKeeper
from bkledger.client.config import ClientConfig
from bkledger.client.meta.store import MetadataStore
from bkledger.client.protocol.metadata import LedgerState
from bkledger.proto import bookie_pb2 as pb
from tests.integration import bookie_util
from tests.integration.netns_world import (
    CLIENT_ADDRESS,
    ZK_ADDRESS,
    World,
    bookie_address,
    hub_rule,
    wait_until,
)

CLIENT = {"addEntryTimeoutSec": 2.0, "readTimeout": 3.0, "fenceTimeout": 3.0, "speculativeReadTimeout": 200,
          "zkTimeout": 10.0}
PASSWORD = bookie_util.PASSWORD
READ_BOUND = 5.0      # seconds: about 25 speculative timeouts; without speculation a read waits 12 s or more


def payload(i: int) -> bytes:
    return b"netns-%06d-" % i + bytes([i % 251]) * (i % 150)


def client(world: World) -> BookKeeper:
    return BookKeeper(world.uri, config=ClientConfig.from_options(CLIENT))


def write(bk: BookKeeper, count: int, close: bool = True, first: int = 0, ack_quorum: int = 2):  # noqa: ANN201
    lh = bk.create_ledger(3, 3, ack_quorum, password=PASSWORD)
    for future in [lh.add_entry_async(payload(i)) for i in range(first, first + count)]:
        future.result(30)
    if close:
        lh.close()
    return lh


def write_on(bk: BookKeeper, bookie_id: str, count: int, close: bool = True, ack_quorum: int = 2):  # noqa: ANN201
    """A ledger like `write`'s whose ensemble includes `bookie_id` (placement is random: a few tries)."""
    for _ in range(20):
        lh = write(bk, count, close, ack_quorum=ack_quorum)
        if bookie_id in lh.metadata.last_fragment.ensemble:
            return lh
    raise AssertionError(f"no ensemble with {bookie_id} in 20 ledgers")


def read_all(bk: BookKeeper, ledger_id: int, recovery: bool = False) -> tuple[int, float]:
    start = time.monotonic()
    rh = bk.open_ledger(ledger_id, PASSWORD, recovery=recovery)
    last = rh.last_entry_id
    got = [en.payload for en in rh.read_entries(0, last)] if last >= 0 else []
    assert got == [payload(i) for i in range(last + 1)], f"ledger {ledger_id}: payloads differ"
    return last, time.monotonic() - start


def registered(world: World, index: int) -> bool:
    with MetadataStore(world.uri, session_timeout=5.0) as store:
        return world.bookie_id(index) in set(store.writable_bookies()) | set(store.readonly_bookies())


def scenario_client_cut_off(world: World) -> dict[str, object]:
    """The client cannot reach one bookie (both ways) while ZooKeeper and the other bookies still do:
    reads speculate past it, adds change the ensemble, recovery completes."""
    bk = client(world)
    closed = write(bk, 300)
    victim_id = closed.metadata.last_fragment.ensemble[0]    # the first bookie a reader asks
    victim = world.index_of(victim_id)
    # Qa < Qw: the adds complete on the other two, and the victim is still replaced once its oldest
    # unanswered add is older than addEntryTimeoutSec (BookKeeper's per-request add timeout)
    open_lh = write_on(bk, victim_id, 50, close=False, ack_quorum=2)
    abandoned = write_on(bk, victim_id, 200, close=False)    # its writer is never heard of again
    world.cut(CLIENT_ADDRESS, bookie_address(victim))
    last, elapsed = read_all(client(world), closed.ledger_id)
    assert last == 299 and elapsed < READ_BOUND, f"read took {elapsed:.1f}s"
    replaced_after = keep_adding_until_replaced(open_lh, world.bookie_id(victim), 50)
    assert read_all(client(world), open_lh.ledger_id)[0] == open_lh.last_add_confirmed
    recovered, took = read_all(client(world), abandoned.ledger_id, recovery=True)   # R14-R20
    assert recovered == 199, recovered
    md = bk.ledger_metadata(abandoned.ledger_id)
    assert md.state is LedgerState.CLOSED and md.last_entry_id == 199
    assert registered(world, victim), "the cut bookie should still be registered: ZooKeeper reaches it"
    bk.close()
    return {"victim": world.bookie_id(victim), "read_s": round(elapsed, 2), "recovery_read_s": round(took, 2),
            "replaced_after_s": replaced_after}


def keep_adding_until_replaced(lh, victim_id: str, next_id: int) -> float:  # noqa: ANN001 - a LedgerHandle
    """Add to the open ledger (each add must succeed) until victim_id left its ensemble (R9), then 20 more
    adds and close; the seconds it took."""
    start = time.monotonic()
    while victim_id in lh.metadata.last_fragment.ensemble:
        assert time.monotonic() - start < 30, f"{victim_id} was never replaced"
        assert lh.add_entry(payload(next_id), timeout=30) == next_id
        next_id += 1
        time.sleep(0.05)
    took = round(time.monotonic() - start, 2)
    for _ in range(20):
        assert lh.add_entry(payload(next_id), timeout=30) == next_id
        next_id += 1
    lh.close()
    return took


def scenario_asymmetric(world: World) -> dict[str, object]:
    """Requests reach one bookie but its answers to the client are dropped (one-way partition): reads
    speculate, recovery completes, the bookie did get the fencing request (it fenced the ledger), and an
    open ledger with Qa < Qw replaces it although its adds complete on the others (R9)."""
    bk = client(world)
    closed = write(bk, 300)
    victim_id = closed.metadata.last_fragment.ensemble[0]
    victim = world.index_of(victim_id)
    abandoned = write_on(bk, victim_id, 100, close=False)
    open_lh = write_on(bk, victim_id, 50, close=False, ack_quorum=2)
    reader = client(world)
    reader.open_ledger(abandoned.ledger_id, PASSWORD, recovery=False)   # LAC read: connected to all three
    world.drop(bookie_address(victim), CLIENT_ADDRESS)
    last, elapsed = read_all(reader, closed.ledger_id)
    assert last == 299 and elapsed < READ_BOUND, f"read took {elapsed:.1f}s"
    recovered, took = read_all(reader, abandoned.ledger_id, recovery=True)
    assert recovered == 99, recovered
    replaced_after = keep_adding_until_replaced(open_lh, victim_id, 50)
    assert read_all(reader, open_lh.ledger_id)[0] == open_lh.last_add_confirmed
    world.heal(bookie_address(victim), CLIENT_ADDRESS)
    address = f"{bookie_address(victim)}:3181"
    late = bookie_util.add(address, abandoned.ledger_id, [100], timeout=10)
    assert late.statuses == {100: pb.EFENCED}, f"the bookie did not fence: {late.statuses}"   # R15
    bk.close()
    reader.close()
    return {"victim": world.bookie_id(victim), "read_s": round(elapsed, 2), "recovery_read_s": round(took, 2),
            "replaced_after_s": replaced_after}


def scenario_bookie_cut_from_zookeeper(world: World) -> dict[str, object]:
    """One bookie loses ZooKeeper but not its clients: its registration expires, so new ensembles leave
    it out, yet it keeps serving reads and adds of its ledgers; once healed it registers again."""
    bk = client(world)
    closed = write(bk, 200)
    victim_id = closed.metadata.last_fragment.ensemble[0]
    victim = world.index_of(victim_id)
    open_lh = write_on(bk, victim_id, 20, close=False)
    world.cut(bookie_address(victim), ZK_ADDRESS)
    world.blackhole(f"b{victim}", ZK_ADDRESS)
    wait_until("the bookie's registration to expire", lambda: not registered(world, victim), 30)
    fresh = client(world)                              # resolves the bookie by its id, not the registry
    last, elapsed = read_all(fresh, closed.ledger_id)
    assert last == 199 and elapsed < READ_BOUND, f"read took {elapsed:.1f}s"
    direct = bookie_util.read(f"{bookie_address(victim)}:3181", closed.ledger_id, 0, timeout=10)
    assert direct.status == pb.EOK, "the bookie should still serve reads"
    for i in range(20, 60):
        open_lh.add_entry(payload(i), timeout=30)
    open_lh.close()
    assert read_all(fresh, open_lh.ledger_id)[0] == 59
    for _ in range(5):                                 # new ledgers use registered bookies only
        lh = fresh.create_ledger(3, 3, 2, password=PASSWORD)
        assert world.bookie_id(victim) not in lh.metadata.last_fragment.ensemble
        lh.close()
    still_in = world.bookie_id(victim) in open_lh.metadata.last_fragment.ensemble
    world.heal(bookie_address(victim), ZK_ADDRESS)
    world.heal(ZK_ADDRESS, bookie_address(victim))
    world.blackhole(f"b{victim}", ZK_ADDRESS, add=False)
    wait_until("the bookie to register again", lambda: registered(world, victim), 40)
    bk.close()
    fresh.close()
    return {"victim": world.bookie_id(victim), "read_s": round(elapsed, 2), "kept_in_ensemble": still_in}


def start_spark():  # noqa: ANN201 - a SparkSession
    """A local SparkSession in the client namespace (its driver on that namespace's own loopback)."""
    import os

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path.cwd()), os.environ.get("PYTHONPATH")]))
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName("bkledger-netns")
             .config("spark.pyspark.python", sys.executable).config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2").config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.bindAddress", "127.0.0.1").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def spark_child(uri: str, log: str, victim: str) -> None:
    """Run by `scenario_spark_client_cut_off` through `ip netns exec cl` (a JVM started from a process
    that only called setns does not start: `ip netns exec` also gives it the namespace's /sys). Reads
    the log healthy, then cuts this namespace off from `victim` and reads it again, then appends."""
    spark = start_spark()
    expected = [b"row-%06d" % i for i in range(3000)]
    try:
        reader = spark.read.format("bkledger").option("metadataServiceUri", uri).option("log", log)

        def timed_read() -> float:
            start = time.monotonic()
            rows = sorted(r.value for r in reader.load().select("value").collect())
            assert rows == expected, f"{len(rows)} rows differ"
            return time.monotonic() - start

        timed_read()                                          # warm-up: JVM, Python workers, connections
        healthy = timed_read()
        for source, destination in ((CLIENT_ADDRESS, victim), (victim, CLIENT_ADDRESS)):
            subprocess.run(hub_rule("add", source, destination), check=True, timeout=30)
        cut = timed_read()
        extra = spark.range(0, 500, numPartitions=2).selectExpr("cast(concat('more-', id) as binary) as value")
        extra.write.format("bkledger").option("metadataServiceUri", uri).option("log", log) \
            .option("ensembleSize", "3").option("writeQuorum", "3").option("ackQuorum", "2").mode("append").save()
        assert reader.load().count() == 3500
    finally:
        spark.stop()
    print("SPARK", round(healthy, 2), round(cut, 2), flush=True)


def scenario_spark_client_cut_off(world: World) -> dict[str, object]:
    """The Spark connector between separate addresses: a log is read (and appended to) by Spark while
    the client namespace is cut off from one bookie of its ensemble; every row comes back, and the read
    takes about as long as healthy (speculative reads; bound: healthy + READ_BOUND x 2)."""
    bk = client(world)
    log = "netns-log"
    writer = bk.open_log_writer(log, ensemble_size=3, write_quorum=3, ack_quorum=2)
    for future in [writer.append_async(b"row-%06d" % i) for i in range(3000)]:
        future.result(30)
    writer.close()
    victim_id = bk.ledger_metadata(bk.list_ledgers()[0]).last_fragment.ensemble[0]
    bk.close()
    victim = bookie_address(world.index_of(victim_id))
    done = subprocess.run(["ip", "netns", "exec", "cl", sys.executable, "-m", "tests.integration.netns_scenarios",
                           "spark_child", world.uri, log, victim], capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, f"Spark child failed:\n{done.stderr[-4000:]}"
    healthy, cut = map(float, next(line for line in done.stdout.splitlines() if line.startswith("SPARK")).split()[1:])
    assert cut < healthy + 2 * READ_BOUND, f"Spark read cut off from {victim} took {cut:.1f}s (healthy {healthy:.1f}s)"
    return {"victim": victim_id, "spark_read_healthy_s": healthy, "spark_read_cut_s": cut}


SCENARIOS = {
    "spark_client_cut_off": scenario_spark_client_cut_off,
    "client_cut_off": scenario_client_cut_off,
    "asymmetric": scenario_asymmetric,
    "bookie_cut_from_zookeeper": scenario_bookie_cut_from_zookeeper,
}


def main(name: str, base: Path) -> None:
    world = World(base, bookies=4)
    try:
        world.build()
        world.start()
        world.enter_client_namespace()
        wait_until("4 bookies to register", lambda: all(registered(world, i) for i in range(1, 5)), 60)
        result = SCENARIOS[name](world)
        print("RESULT", result, flush=True)
    finally:
        world.stop()


if __name__ == "__main__":
    if sys.argv[1] == "spark_child":
        spark_child(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        main(sys.argv[1], Path(sys.argv[2]))
