"""Autorecovery, manual recovery / decommission, bookie GC and the admin shell with real processes
(R31-R33, R22, R24, seeds 003 and 004)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bkledger.bookie.local.cluster import LocalCluster
from bkledger.bookie.local.zookeeper import stop_pid
from bkledger.client.admin import Admin, fragment_end
from bkledger.client.bookie_client import BookieClient
from bkledger.client.meta.underreplication import UnderReplicationManager
from bkledger.client.protocol.write_set import entries_for_index
from bkledger.proto import bookie_pb2 as pb
from tests.integration.bookie_util import wait_for

pytestmark = pytest.mark.integration

AR_CONF = {
    "zkTimeout": "3000",                       # a killed bookie's registration goes after 3 s
    "lostBookieRecoveryDelay": "2",
    "openLedgerRereplicationGracePeriod": "3000",
    "rwRereplicateBackoffMs": "300",
}


def held_entries(bookie_id: str, ledger_id: int) -> set[int]:
    async def ask() -> set[int]:
        client = BookieClient(bookie_id, bookie_id)       # local bookie ids are host:port
        try:
            response = await client.list_entries(ledger_id, 5.0)
            return set(response.entry_ids) if response.status == pb.EOK else set()
        finally:
            await client.close()
    return asyncio.run(ask())


def assert_fully_replicated(bk, ledger_ids: list[int], gone: str) -> None:
    """Every entry of every fragment is on every bookie of its write set, and no fragment names `gone`."""
    for ledger_id in ledger_ids:
        md = bk.ledger_metadata(ledger_id)
        assert md.is_closed, ledger_id
        for index, fragment in enumerate(md.fragments):
            assert gone not in fragment.ensemble, (ledger_id, fragment)
            end = fragment_end(md, index)
            assert end is not None
            for slot, bookie_id in enumerate(fragment.ensemble):
                want = set(entries_for_index(slot, fragment.first_entry_id, end, md.ensemble_size,
                                             md.write_quorum))
                missing = want - held_entries(bookie_id, ledger_id)
                assert not missing, (ledger_id, bookie_id, sorted(missing)[:5])



def test_lost_bookie_is_rereplicated_and_auditor_fails_over(cluster_factory, bk_factory):
    """R31/R32/R33: kill the auditor's machine (bookie + its autorecovery daemon); another daemon becomes
    auditor, marks the lost bookie's ledgers, workers bring every ledger back to Qw copies, open ledgers are
    fenced after the grace period, and no metadata names the lost bookie."""
    cluster = cluster_factory(5, conf=AR_CONF, autorecovery=True)
    bk = bk_factory(cluster.metadata_service_uri)
    ur = UnderReplicationManager(bk.store)
    auditor = wait_for(ur.auditor, 15, "an auditor")
    victim = next(i for i, b in enumerate(cluster.bookies) if b.bookie_id == auditor)
    gone = cluster.bookies[victim].bookie_id

    payloads: dict[int, list[bytes]] = {}
    handles = []
    for n in range(9):                                  # closed, idle open, and actively written ledgers
        handle = bk.create_ledger(3, 3, 2, password=b"secret")
        payloads[handle.ledger_id] = [f"l{handle.ledger_id}-e{i}-".encode() * 40 for i in range(120)]
        for p in payloads[handle.ledger_id]:
            handle.add_entry_async(p)
        handle.add_entry(b"sync")
        payloads[handle.ledger_id].append(b"sync")
        handles.append(handle)
        if n < 5:
            handle.close()
    on_victim = Admin(bk).ledgers_on_bookies([gone])
    assert on_victim, "no ledger on the victim (placement is random; 9 ledgers E=3 of 5 should hit it)"

    start = time.monotonic()
    cluster.stop_autorecovery(victim, sig=signal.SIGKILL)   # the auditor dies mid-way, with its bookie
    cluster.kill_bookie(victim)
    active = handles[8]
    for i in range(50):                                 # the active writer changes its ensemble by itself
        payload = f"after-{i}".encode()
        active.add_entry(payload)
        payloads[active.ledger_id].append(payload)
    active.close()

    new_auditor = wait_for(lambda: (a := ur.auditor()) not in (None, gone) and a, 20, "auditor failover")
    assert new_auditor != gone
    wait_for(lambda: not Admin(bk).ledgers_on_bookies([gone]), 60, "re-replication of every ledger")
    wait_for(lambda: not ur.list_marked(), 10, "marks removed")
    print(f"re-replicated {len(on_victim)} ledgers in {time.monotonic() - start:.1f}s")

    for handle in handles[5:8]:                         # idle writers: fenced ones close at the recovered end
        handle.close()
    ledger_ids = sorted(payloads)
    assert_fully_replicated(bk, ledger_ids, gone)
    reader = bk_factory(cluster.metadata_service_uri)
    for ledger_id in ledger_ids:
        md = reader.ledger_metadata(ledger_id)
        handle = reader.open_ledger(ledger_id, b"secret", recovery=False)
        got = [e.payload for e in handle.read_entries(0, md.last_entry_id)]
        assert got == payloads[ledger_id], ledger_id


def test_bookie_back_within_delay_triggers_nothing(cluster_factory, bk_factory):
    """R31: a bookie that re-registers within lostBookieRecoveryDelay is not audited."""
    cluster = cluster_factory(4, conf={**AR_CONF, "lostBookieRecoveryDelay": "6"}, autorecovery=True)
    bk = bk_factory(cluster.metadata_service_uri)
    ur = UnderReplicationManager(bk.store)
    auditor = wait_for(ur.auditor, 15, "an auditor")
    ledgers = []
    for _ in range(4):
        handle = bk.create_ledger(3, 3, 2)
        for i in range(20):
            handle.add_entry(b"x%d" % i)
        handle.close()
        ledgers.append(handle.ledger_id)
    before = {lid: bk.ledger_metadata(lid) for lid in ledgers}
    victim = next(i for i, b in enumerate(cluster.bookies) if b.bookie_id != auditor)

    def logs() -> str:
        return "".join(Path(b.autorecovery_log).read_text() for b in cluster.bookies)

    cluster.stop_bookie(victim)                         # SIGTERM: unregisters at once
    noticed = time.monotonic()
    wait_for(lambda: f"bookie {cluster.bookies[victim].bookie_id} disappeared" in logs()
             or f"bookie {cluster.bookies[victim].bookie_id} has a cookie" in logs(), 15, "the auditor to see it gone")
    cluster.start_bookie(victim)
    cluster.wait_registered(20)
    wait_for(lambda: "came back within the delay" in logs(), 15, "the auditor to see it back")
    while time.monotonic() < noticed + 6 + 2:           # the delay passes: nothing is ever marked
        assert ur.list_marked() == []
        time.sleep(0.25)
    assert {lid: bk.ledger_metadata(lid) for lid in ledgers} == before


def du_kib(path: str) -> int:
    return int(subprocess.run(["du", "-sk", path], capture_output=True, text=True, check=True).stdout.split()[0])


def test_gc_frees_disk_of_deleted_ledgers(cluster_factory, bk_factory):
    """Seed 004: deleted ledgers are collected, logs with little live data compacted, disk space comes back;
    ledgers that still exist (or are created later) are untouched."""
    conf = {"gcWaitTime": "300", "logSizeLimit": str(1 << 20), "majorCompactionInterval": "1",
            "minorCompactionInterval": "1", "flushInterval": "1000"}
    cluster = cluster_factory(3, conf=conf)
    bk = bk_factory(cluster.metadata_service_uri)
    payload = os.urandom(8000)
    doomed, kept = [], []
    for n in range(6):
        handle = bk.create_ledger(3, 3, 2)
        (doomed if n % 3 else kept).append(handle)
    for _ in range(250):                                # interleave all six ledgers in the entry logs
        for handle in doomed + kept:
            handle.add_entry_async(payload)
    for handle in doomed + kept:
        handle.add_entry(b"end")
        handle.close()
    ledger_dirs = [b.ledger_dirs[0] for b in cluster.bookies]
    time.sleep(1.5)
    before = sum(du_kib(d) for d in ledger_dirs)
    for handle in doomed:
        bk.delete_ledger(handle.ledger_id)
    late = bk.create_ledger(3, 3, 2)
    late.add_entry(b"late")
    wait_for(lambda: sum(du_kib(d) for d in ledger_dirs) < before * 0.55, 30, "disk space to come back", 0.5)
    after = sum(du_kib(d) for d in ledger_dirs)
    print(f"ledger dirs: {before} KiB -> {after} KiB")
    for handle in kept:
        reader = bk.open_ledger(handle.ledger_id, recovery=False)
        got = [e.payload for e in reader.read_entries(0, 250)]
        assert got == [payload] * 250 + [b"end"]
        for b in handle.metadata.fragments[0].ensemble:
            assert len(held_entries(b, handle.ledger_id)) == 251
    for handle in doomed:
        for b in handle.metadata.fragments[0].ensemble:
            assert held_entries(b, handle.ledger_id) == set()
    assert late.add_entry(b"still here") == 1
    late.close()
    assert [e.payload for e in bk.open_ledger(late.ledger_id).read_entries(0, 1)] == [b"late", b"still here"]


def shell(uri: str, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "-m", "bkledger.bookie.cli", "shell", *argv, "--uri", uri],
                          capture_output=True, text=True, timeout=90, check=False)
    if check:
        assert done.returncode == 0, done.stdout + done.stderr
    return done


def test_shell_verbs_and_decommission(cluster_factory, bk_factory):
    """The admin shell: listbookies, simpletest, readledger, ledgermetadata, listledgers, bookiesanity,
    listunderreplicated; decommission refuses a running bookie, then moves a stopped one's data off and
    deletes its cookie (R24)."""
    cluster = cluster_factory(4)
    uri = cluster.metadata_service_uri
    bk = bk_factory(uri)

    listed = json.loads(shell(uri, "listbookies", "--json").stdout)
    assert sorted(b["bookie_id"] for b in listed) == sorted(b.bookie_id for b in cluster.bookies)
    assert {b["state"] for b in listed} == {"rw"}
    assert "state" in shell(uri, "listbookies").stdout

    out = shell(uri, "simpletest", "-e", "3", "-w", "2", "-a", "2", "-n", "200").stdout
    assert "read back 200" in out and "OK" in out

    handle = bk.create_ledger(3, 2, 2, password=b"pw")
    for i in range(30):
        handle.add_entry(f"hello {i}".encode())
    handle.close()
    text = shell(uri, "readledger", str(handle.ledger_id), "--first", "3", "--last", "5").stdout
    assert "hello 3" in text and "hello 5" in text and "hello 6" not in text
    rows = json.loads(shell(uri, "readledger", str(handle.ledger_id), "--hex", "--json").stdout)
    assert [bytes.fromhex(r["payload"]) for r in rows] == [f"hello {i}".encode() for i in range(30)]
    meta = json.loads(shell(uri, "ledgermetadata", str(handle.ledger_id), "--json").stdout)
    assert meta["state"] == "CLOSED" and meta["last_entry_id"] == 29
    assert str(handle.ledger_id) in shell(uri, "listledgers").stdout
    sanity = json.loads(shell(uri, "bookiesanity", "--json").stdout)
    assert len(sanity) == 4 and all(r["ok"] for r in sanity)
    assert json.loads(shell(uri, "listunderreplicated", "--json").stdout) == []

    victim = cluster.bookies[0].bookie_id
    ledgers = [handle.ledger_id]
    for n in range(3):
        h = bk.create_ledger(3, 2, 2)
        for _ in range(40):
            h.add_entry(b"y" * 500)
        if n < 2:
            h.close()
        ledgers.append(h.ledger_id)
    refused = shell(uri, "decommission", victim, check=False)
    assert refused.returncode != 0 and "still registered" in refused.stderr
    cluster.stop_bookie(0)
    done = shell(uri, "decommission", victim, "--json")
    stats = json.loads(done.stdout)
    assert stats["failed"] == {}
    assert not Admin(bk).ledgers_on_bookies([victim])
    assert bk.store.read_cookie(victim) is None
    h.close()                                           # fenced and closed by decommission if it was on the victim
    assert_fully_replicated(bk, ledgers, victim)


def test_shell_sweepjobs_lists_then_deletes_only_uncommitted_job_ledgers(cluster_factory, bk_factory):
    """A job (Spark write, sink run) whose driver died before its commit leaves tagged ledgers outside
    the log: `sweepjobs` lists them, `--delete` deletes them; listed, untagged and young ones stay."""
    from bkledger.client.log.logs import JOB_KEY, LOG_KEY

    cluster = cluster_factory(3)
    uri = cluster.metadata_service_uri
    bk = bk_factory(uri)

    def ledger(tags: dict[str, bytes]) -> int:
        handle = bk.create_ledger(3, 2, 2, custom_metadata=tags)
        handle.add_entry(b"row")
        handle.close()
        return handle.ledger_id

    tagged = {JOB_KEY: b"job-1", LOG_KEY: b"orders"}
    committed = ledger(tagged)
    bk.append_ledgers("orders", [committed])
    orphan, plain = ledger(tagged), ledger({})
    other_log = ledger({JOB_KEY: b"job-2", LOG_KEY: b"audit"})    # its log was never created

    listed = json.loads(shell(uri, "sweepjobs", "--older-than", "0", "--json").stdout)
    assert {(r["ledger_id"], r["log"], r["deleted"]) for r in listed} == {(orphan, "orders", False),
                                                                          (other_log, "audit", False)}
    assert json.loads(shell(uri, "sweepjobs", "--json").stdout) == []          # younger than a day
    assert "yes" in shell(uri, "sweepjobs", "--older-than", "0", "--log", "orders", "--delete").stdout
    remaining = set(bk.list_ledgers())
    assert orphan not in remaining and {committed, plain, other_log} <= remaining
    assert bk.log_metadata("orders").ledger_ids == [committed]


def test_gc_drops_ledgers_moved_off_a_live_bookie(cluster_factory, bk_factory):
    """Over-replicated ledgers (BookKeeper's gcOverreplicatedLedgerWaitTime): once a recovery moved a
    closed ledger's fragments off a bookie that is in fact alive, that bookie drops its copy; a ledger
    that still names it is kept, and the moved ledger stays complete on its new bookies."""
    conf = {"gcWaitTime": "200", "gcOverreplicatedLedgerWaitTime": "400"}
    cluster = cluster_factory(4, conf=conf)
    uri = cluster.metadata_service_uri
    bk = bk_factory(uri)
    moved = bk.create_ledger(3, 3, 2)
    for i in range(50):
        moved.add_entry(b"m%d" % i)
    moved.close()
    victim = moved.metadata.fragments[0].ensemble[0]
    assert held_entries(victim, moved.ledger_id) == set(range(50))
    shell(uri, "recover", victim, "--force")                # as if it had been presumed lost
    assert victim not in bk.ledger_metadata(moved.ledger_id).fragments[0].ensemble
    kept = bk.create_ledger(4, 2, 2)                       # E = 4 of 4: names the victim
    for i in range(20):
        kept.add_entry(b"k%d" % i)
    kept.close()
    on_victim = held_entries(victim, kept.ledger_id)
    assert on_victim
    wait_for(lambda: not held_entries(victim, moved.ledger_id), 30, "the bookie to drop the moved ledger")
    assert held_entries(victim, kept.ledger_id) == on_victim
    assert_fully_replicated(bk, [moved.ledger_id], victim)
    reader = bk_factory(uri)
    got = [e.payload for e in reader.open_ledger(moved.ledger_id, recovery=False).read_entries(0, 49)]
    assert got == [b"m%d" % i for i in range(50)]


def test_autorecovery_stops_on_sigterm_while_zookeeper_is_gone(tmp_path: Path) -> None:
    """What a user saw: with the cluster's ZooKeeper stopped, SIGTERM never ended an autorecovery daemon
    (its stop waited on a ZooKeeper request that kazoo kept queued for a session that could not
    reconnect). It exits by itself now: the stop interrupts the round's request and retries, so the round
    ends at once, not at the retry deadline (2 x zkTimeout)."""
    cluster = LocalCluster(tmp_path / "own-zk")
    try:
        cluster.up(1, {"zkTimeout": "2000"}, autorecovery=True)
        log = Path(cluster.bookies[0].autorecovery_log)        # running, not still starting: ZooKeeper gone
        wait_for(lambda: log.exists() and "started (lostBookieRecoveryDelay" in log.read_text(), 60,
                 "the autorecovery daemon to start")            # during its start is a failed start (exit 1)
        stop_pid(cluster.zk_pid)
        cluster.zk_pid = 0
        assert cluster.stop_autorecovery(0, timeout=30) == 0     # SIGKILLed after 30 s: -9
        text = Path(cluster.bookies[0].autorecovery_log).read_text().rsplit("stopping (SIGTERM", 1)[-1]
        assert "Exceeded retry deadline" not in text, text[-1000:]
    finally:
        cluster.down()
