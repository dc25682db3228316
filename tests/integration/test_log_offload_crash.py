"""The offload crash matrix on real processes: an offloader killed with SIGKILL right after a Parquet
write, after the Delta commit, or after the CAS, on a log's first run and on a later one; then a rerun.
Every record of the log exactly once, in order, at its position (open_log_reader), the table holds each
offloaded record once (deltalake), and no file is left in the table's folder that the table does not name."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from bkledger.client import BookKeeper
from bkledger.client.log.core import offload as ol
from bkledger.client.log.offload_store import committed_files, table_store
from tests.integration.conftest import start_cluster
from tests.integration.test_log_offload import read_all, table_rows, write

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
FILE_BYTES = 100                      # about two ledgers a file: a run writes several files


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, zookeeper) -> Iterator:
    made = start_cluster(tmp_path_factory.mktemp("offload-crash"), zookeeper, 3)
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


def crash_offload(cluster, name: str, store: str, step: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "tests.integration.offload_proc", cluster.metadata_service_uri,
                           name, store, str(FILE_BYTES), step], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == -9, proc.stderr[-2000:]


def folder_matches_table(bk: BookKeeper, name: str, store: str) -> None:
    from deltalake import DeltaTable

    table = table_store(store, name)
    on_disk = sorted(p.name for p in Path(table.root).glob("*.parquet"))
    assert on_disk == sorted(committed_files(DeltaTable(table.uri)))
    meta = bk.log_metadata(name)
    assert sorted(on_disk) == sorted(led.offloaded[0] for led in meta.ledgers if led.offloaded is not None)


@pytest.mark.parametrize("earlier_run", [False, True], ids=["first-run", "later-run"])
@pytest.mark.parametrize("step", ["parquet", "delta", "cas"])
def test_kill_9_at_each_step_then_rerun(bk, cluster, tmp_path, step, earlier_run):
    """Exactly once after kill -9 at each step and a rerun; the rerun after a kill past the Delta commit
    writes nothing (it swaps in the committed files), after the CAS it has nothing to do."""
    name = f"log-{uuid.uuid4().hex[:8]}"
    store = str(tmp_path / "store")
    write(bk, name, 30, 3, enveloped=True)
    if earlier_run:
        bk.offload_log(name, store, max_file_bytes=FILE_BYTES)
        write(bk, name, 30, 3, enveloped=True, first=30)
    before = read_all(bk, name)
    runs_before = ol.state(bk.log_metadata(name)).run
    crash_offload(cluster, name, store, step)
    meta = bk.log_metadata(name)
    assert ol.state(meta).run == runs_before + (1 if step == "cas" else 0)
    assert read_all(bk, name) == before                                   # a crash changes nothing a reader sees
    rerun = bk.offload_log(name, store, max_file_bytes=FILE_BYTES)
    assert rerun.resumed == (step == "delta")
    assert (rerun.files == []) == (step == "cas")
    meta = bk.log_metadata(name)
    assert ol.state(meta).run == runs_before + 1
    assert read_all(bk, name) == before
    offloaded = sum(led.entries or 0 for led in meta.ledgers if led.offloaded is not None)
    assert offloaded == len(before) - 6                                   # all but the last two ledgers
    assert table_rows(bk, name) == before[:offloaded]
    folder_matches_table(bk, name, store)


def test_two_offloaders_at_once_offload_each_record_once(bk, cluster, tmp_path):
    """Two offloaders race on one log (threads, each its own client): the table's conflict check on the
    run's application transaction and the log's CAS let one run land; the other fails cleanly or
    finishes the same run; a rerun after them has nothing left to do. Each record once, no stray file."""
    import concurrent.futures

    from bkledger.client.errors import BKError

    name = f"log-{uuid.uuid4().hex[:8]}"
    store = str(tmp_path / "store")
    write(bk, name, 30, 3, enveloped=False)
    before = read_all(bk, name)

    def offload_once() -> object:
        with BookKeeper(cluster.metadata_service_uri) as other:
            try:
                return other.offload_log(name, store, max_file_bytes=FILE_BYTES)
            except BKError as exc:
                return exc

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        outcomes = list(pool.map(lambda _: offload_once(), range(2)))
    assert any(not isinstance(o, BaseException) for o in outcomes), outcomes
    bk.offload_log(name, store, max_file_bytes=FILE_BYTES)
    meta = bk.log_metadata(name)
    assert ol.state(meta).run == 1
    assert read_all(bk, name) == before
    assert table_rows(bk, name) == before[:24]
    folder_matches_table(bk, name, store)
