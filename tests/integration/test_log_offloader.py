"""The offload policy applied by the offloader daemon on real bookies and a real ZooKeeper (issue 42 items 1
and 5): it offloads a log under its policy and deletes the bookie copies after the deletion lag (0: in
the same round; a few seconds: only once they passed; keep: never), a failing log does not stop the
others, a log another offloader holds is skipped; kill -9 of the daemon mid-run (after the Delta commit,
after the CAS, during the deletion) then a rerun: every record exactly once, the copies deleted."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from bkledger.bookie.offloader import Offloader
from bkledger.client import BookKeeper
from bkledger.client.errors import NoSuchLedgerError
from bkledger.client.log import offloader
from bkledger.client.log.core import offload as ol
from bkledger.client.log.core.meta import Position
from bkledger.client.log.offload_store import TableStore, committed_files, table_store
from bkledger.client.log.store import log_path
from tests.integration.conftest import start_cluster
from tests.integration.test_log_offload import read_all, table_rows, write
from tests.integration.test_log_offload_crash import folder_matches_table
from tests.integration.test_log_offload_s3 import BUCKET, s3_endpoint, s3_env  # noqa: F401 (fixtures)

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, zookeeper) -> Iterator:
    made = start_cluster(tmp_path_factory.mktemp("offloader"), zookeeper, 3)
    try:
        yield made
    finally:
        made.down()


@pytest.fixture
def bk(cluster) -> Iterator[BookKeeper]:
    client = BookKeeper(cluster.metadata_service_uri)
    try:
        yield client
    finally:
        client.close()


def new_log(bk: BookKeeper, entries: int = 30) -> tuple[str, list[int]]:
    """A log of `entries` records, 3 a ledger; the ids of the ledgers an offload may take."""
    name = f"log-{uuid.uuid4().hex[:8]}"
    write(bk, name, entries, 3, enveloped=True)
    return name, [led.ledger_id for led in ol.candidates(bk.log_metadata(name))]


def on_bookies(bk: BookKeeper, ids: list[int]) -> list[int]:
    out = []
    for ledger_id in ids:
        try:
            bk.ledger_metadata(ledger_id)
            out.append(ledger_id)
        except NoSuchLedgerError:
            pass
    return out


def copies_znodes(bk: BookKeeper, name: str) -> list[str]:
    return [c for c in bk.store.children(log_path(bk.store, name)) if c.startswith(ol.UNLISTED_PREFIX)]


def test_the_daemon_offloads_under_the_policy_and_deletes_at_once_with_lag_0(bk, cluster, tmp_path):
    """`bkledger offloader --once` (a real process): the policy's byte threshold offloads the oldest
    ledgers; with deletion lag 0 their bookie copies and the run's znode are gone after the same round;
    every record still reads once, in order, from the files; describe shows the policy and the tiers."""
    name, ids = new_log(bk)
    before = read_all(bk, name)
    store = str(tmp_path / "store")
    pol = bk.set_log_offload(name, after_bytes=0, deletion_lag_seconds=0)
    assert bk.log_offload_policy(name) == pol and pol.deletion_lag_s == 0
    proc = subprocess.run([sys.executable, "-m", "bkledger.bookie.cli", "offloader", "--uri",
                           cluster.metadata_service_uri, "--store", store, "--once", "--logs", name],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    meta = bk.log_metadata(name)
    assert [led.offloaded is not None for led in meta.ledgers] == [True] * (len(meta.ledgers) - 2) + [False] * 2
    assert on_bookies(bk, ids) == [] and copies_znodes(bk, name) == []
    assert read_all(bk, name) == before
    assert table_rows(bk, name) == before[:24]
    folder_matches_table(bk, name, store)
    shown = subprocess.run([sys.executable, "-m", "bkledger.bookie.cli", "log", "describe", name, "--uri",
                            cluster.metadata_service_uri], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert "offload policy      after_bytes=0 after_seconds=- deletion_lag=0s" in shown.stdout, shown.stderr
    assert "offloaded           " in shown.stdout and "bookie copies" not in shown.stdout


def test_copies_stay_until_the_lag_has_passed_and_keep_keeps_them(bk, tmp_path):
    """Lag 3 s: the round that offloads leaves the copies (the log says when they are due); a round after
    the lag deletes them. Lag keep: never, even far in the future. A log another offloader holds is
    skipped; a log whose store fails is logged and counted and the other logs go on."""
    name, ids = new_log(bk)
    kept, kept_ids = new_log(bk)
    broken, _ = new_log(bk, 12)
    before = read_all(bk, name)
    (tmp_path / "a-file").write_text("not a folder")
    bk.set_log_offload(name, after_bytes=0, deletion_lag_seconds=3)
    bk.set_log_offload(kept, after_seconds=0, deletion_lag_seconds="keep")
    bk.set_log_offload(broken, after_bytes=0, store_uri=str(tmp_path / "a-file"))
    daemon = Offloader(bk, store_uri=str(tmp_path / "store"), names=[name, kept, broken])
    with offloader.policy_lock(bk, kept) as held:
        assert held
        first = {run.name: run for run in daemon.run_once()}
    assert first[kept].busy and first[kept].offload is None
    assert first[name].offload is not None and first[name].deleted == ()
    assert daemon.snapshot()["failures"] == 1 and daemon.snapshot()["busy"] == 1
    assert on_bookies(bk, ids) == ids and len(copies_znodes(bk, name)) == 1
    waiting = offloader.describe_copies(offloader.pending_copies(bk, name), 3)
    assert waiting and f"{len(ids)} ledgers of 1 offload runs wait for deletion" in waiting[0]
    deadline = time.monotonic() + 30
    while on_bookies(bk, ids) and time.monotonic() < deadline:
        daemon.run_once()
        time.sleep(0.5)
    assert on_bookies(bk, ids) == [] and copies_znodes(bk, name) == []
    assert read_all(bk, name) == before
    assert ol.state(bk.log_metadata(kept)).run == 1
    assert offloader.delete_offloaded_copies(bk, kept, now=2**50) == ([], 0)
    assert on_bookies(bk, kept_ids) == kept_ids


@pytest.mark.parametrize("step", ["delta", "cas", "delete"])
def test_kill_9_of_the_daemon_mid_run_then_a_rerun_keeps_every_record_once(bk, cluster, tmp_path, step):
    """kill -9 after the Delta commit, after the CAS, or after deleting the first bookie copies (their
    znode not yet): every record reads exactly once meanwhile and after a rerun (once the dead daemon's
    lock is gone with its session), the copies are all deleted, the table names exactly the offloaded files."""
    name, ids = new_log(bk)
    store = str(tmp_path / "store")
    bk.set_log_offload(name, after_bytes=0, deletion_lag_seconds=0)
    before = read_all(bk, name)
    proc = subprocess.run([sys.executable, "-m", "tests.integration.offloader_proc", cluster.metadata_service_uri,
                           name, store, step], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == -9, proc.stderr[-2000:]
    assert read_all(bk, name) == before
    daemon = Offloader(bk, store_uri=store, names=[name])
    deadline = time.monotonic() + 30
    while (runs := daemon.run_once()) and runs[0].busy and time.monotonic() < deadline:
        time.sleep(0.5)
    assert runs and not runs[0].busy and daemon.snapshot()["failures"] == 0
    assert read_all(bk, name) == before
    assert table_rows(bk, name) == before[:24]
    assert on_bookies(bk, ids) == [] and copies_znodes(bk, name) == []
    folder_matches_table(bk, name, store)


@pytest.fixture(params=["local", "s3"])
def store_uri(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A table store: a local folder, or a fresh prefix of a bucket on moto_server (skipped without it)."""
    if request.param == "local":
        return str(tmp_path / "store")
    endpoint = request.getfixturevalue("s3_endpoint")
    request.getfixturevalue("s3_env")                      # credentials in the environment, the bucket made
    return f"s3://{BUCKET}/t-{uuid.uuid4().hex[:8]}?endpoint_override={endpoint}&scheme=http"


def log_table(bk: BookKeeper, name: str) -> TableStore:
    uri = ol.state(bk.log_metadata(name)).uri
    assert uri is not None
    return table_store(uri, name)


def table_files(bk: BookKeeper, name: str) -> tuple[list[str], list[str]]:
    """(files the log's Delta table names, Parquet files in its folder), on whichever store it is."""
    from deltalake import DeltaTable

    table = log_table(bk, name)
    found = table.fs.get_file_info(pafs.FileSelector(table.root, allow_not_found=True))
    return (sorted(committed_files(DeltaTable(table.uri, storage_options=dict(table.options)))),
            sorted(f.base_name for f in found if f.base_name.endswith(".parquet")))


def table_positions(bk: BookKeeper, name: str) -> list[Position]:
    """The positions of the rows a Delta reader sees in the log's table (the rows of its current version)."""
    from deltalake import DeltaTable

    table = log_table(bk, name)
    dt = DeltaTable(table.uri, storage_options=dict(table.options))
    rows = dt.to_pyarrow_dataset(filesystem=pafs.SubTreeFileSystem(table.root, table.fs)).to_table()
    return sorted(Position(lid, eid) for lid, eid in zip(rows.column("ledger_id").to_pylist(),
                                                         rows.column("entry_id").to_pylist(), strict=True))


def test_truncation_and_retention_take_files_off_the_table_and_vacuum_deletes_them_after_the_lag(bk, store_uri):
    """A truncation into offloaded history takes the dropped records' files off the table (a remove action:
    a Delta reader no longer sees their rows) and leaves them in the store (lag 4 h: a reader that planned
    them still reads them from where the log's records it loaded say); a cut whose prune
    never ran (a crash after its CAS) is pruned by the offloader's next run, once; with lag 0 that run
    also vacuums the files away. Retention does the same. delete_log deletes the table. The same on a
    local folder and on S3 (moto_server)."""
    from bkledger.client.log.core import meta as lm
    from bkledger.client.log.offload_store import read_log_file
    from bkledger.client.log.store import update_log

    name, _ = new_log(bk, 60)
    bk.offload_log(name, store_uri, max_file_bytes=1)                      # a file a ledger: 18 files
    before = read_all(bk, name)
    files = [f for f, *_ in ol.offloaded_files(bk.log_metadata(name))]    # in log order
    assert table_files(bk, name) == (sorted(files), sorted(files)) and len(files) == 18
    assert table_positions(bk, name) == [p for p, _ in before[:54]]
    planned = bk.log_metadata(name)                                        # what a reader planned before the cut
    assert bk.truncate_log(name, before[12][0])                            # drops 4 ledgers: 4 files
    assert table_files(bk, name) == (sorted(files[4:]), sorted(files))
    assert table_positions(bk, name) == [p for p, _ in before[12:54]]
    assert read_log_file(planned, files[0]).num_rows == 3                  # still readable where it was planned
    assert read_all(bk, name) == before[12:]
    update_log(bk.store, name, lambda m: lm.truncated_before(m, before[24][0])[0])    # a cut, no prune (crash)
    assert table_files(bk, name)[0] == sorted(files[4:])
    assert offloader.prune_table(bk, name) == (sorted(files[4:8]), [])     # found and taken off, once
    assert offloader.prune_table(bk, name) == ([], [])
    bk.set_log_offload(name, after_bytes=10**12, deletion_lag_seconds=0)
    run = offloader.run_policy(bk, name)
    assert len(run.vacuumed) == 8 and table_files(bk, name) == (sorted(files[8:]), sorted(files[8:]))
    assert table_positions(bk, name) == [p for p, _ in before[24:54]]
    bk.set_log_retention(name, max_bytes=1)
    bk.apply_log_retention(name)
    assert table_files(bk, name)[0] == [] and read_all(bk, name) == before[-3:]
    assert table_positions(bk, name) == []
    table = log_table(bk, name)
    assert table.fs.get_file_info(table.root).type == pafs.FileType.Directory
    bk.delete_log(name)
    assert table.fs.get_file_info(table.root).type == pafs.FileType.NotFound
    assert table.fs.get_file_info(pafs.FileSelector(table.root, recursive=True, allow_not_found=True)) == []


def test_cli_offload_policy_shows_sets_keeps_what_is_not_given_and_clears(bk, cluster, capsys):
    """`bkledger log offload-policy`: no options shows the policy; options set only what they name
    (durations and sizes with units, keep); a bad value is one line and exit 1 or 2; --clear removes it."""
    import json

    from bkledger.bookie.cli import main as cli_main

    name, _ = new_log(bk, 6)
    uri = ["--uri", cluster.metadata_service_uri]

    def policy_json(*args: str) -> object:
        capsys.readouterr()
        assert cli_main(["log", "offload-policy", name, "--json", *args, *uri]) == 0
        return json.loads(capsys.readouterr().out)["policy"]

    assert policy_json() is None
    assert policy_json("--after-bytes", "512m", "--deletion-lag", "30m") == {
        "after_bytes": 512 << 20, "after_seconds": None, "store_uri": None, "deletion_lag_seconds": 1800.0}
    assert policy_json("--after-age", "2h", "--deletion-lag", "keep", "--store", "/x") == {
        "after_bytes": 512 << 20, "after_seconds": 7200.0, "store_uri": "/x", "deletion_lag_seconds": "keep"}
    got = bk.log_offload_policy(name)
    assert got is not None and got.deletion_lag_s is None and got.after_seconds == 7200
    assert cli_main(["log", "offload-policy", name, "--deletion-lag", "soon", *uri]) == 2
    assert cli_main(["log", "offload-policy", name, "--after-bytes", "none", "--after-age", "none", *uri]) == 1
    assert "needs after_bytes or after_seconds" in capsys.readouterr().err
    assert policy_json("--clear") is None


def test_the_daemon_runs_rounds_exports_its_counters_and_stops_on_sigterm(bk, cluster, tmp_path):
    """`bkledger offloader` as a long-running process: it offloads a log whose policy is set after it
    started (a later round), serves its counters on --metrics-port (127.0.0.1), and SIGTERM stops it
    cleanly (exit 0)."""
    import signal
    import urllib.request

    from tests.integration.test_log_offload_s3 import free_port

    name, ids = new_log(bk)
    port = free_port()
    daemon = subprocess.Popen([sys.executable, "-m", "bkledger.bookie.cli", "offloader", "--uri",
                               cluster.metadata_service_uri, "--store", str(tmp_path / "store"), "--interval", "0.5",
                               "--logs", name, "--metrics-port", str(port)], cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    try:
        bk.set_log_offload(name, after_bytes=0, deletion_lag_seconds=0)
        deadline = time.monotonic() + 60
        while on_bookies(bk, ids) and time.monotonic() < deadline and daemon.poll() is None:
            time.sleep(0.3)
        assert on_bookies(bk, ids) == [] and ol.state(bk.log_metadata(name)).run == 1
        deleted = f"bkledger_offloader_deleted_ledgers_total {float(len(ids))}"
        while True:     # the round counts its deletions when it ends, after the bookies' copies are gone
            text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
            if deleted in text or time.monotonic() >= deadline or daemon.poll() is not None:
                break
            time.sleep(0.1)
        assert "bkledger_offloader_rounds_total" in text
        assert deleted in text, text
        assert "bkledger_offloader_failures_total 0.0" in text
    finally:
        daemon.send_signal(signal.SIGTERM)
        out, _ = daemon.communicate(timeout=60)
    assert daemon.returncode == 0, out[-2000:]
    assert "offloader stopping (SIGTERM" in out


def test_a_reader_on_the_bookie_copies_goes_on_from_the_files_when_they_are_deleted_at_once(bk, tmp_path):
    """Deletion lag 0: a reader that was reading the ledgers from the bookies when the offloader offloaded
    them and deleted their copies goes on from the table's files: every record once, in order."""
    name, ids = new_log(bk)
    before = read_all(bk, name)
    bk.set_log_offload(name, after_bytes=0, deletion_lag_seconds=0)
    with bk.open_log_reader(name, "earliest") as reader:
        first = [(reader.read_next(timeout=5.0)) for _ in range(4)]
        run = offloader.run_policy(bk, name, default_store_uri=str(tmp_path / "store"))
        assert sorted(run.deleted) == ids and on_bookies(bk, ids) == []
        rest = list(reader.read(timeout=0.5))
    got = [(r.position, r.payload) for r in first if r is not None] + [(r.position, r.payload) for r in rest]
    assert got == before
