"""Offload to S3: an S3-compatible server (moto_server, in its own process on 127.0.0.1), pyarrow's
S3FileSystem and delta-rs's S3 store. The log's records are read back across the seam from the bucket
(the bookie copies deleted) and the table is read with deltalake; a rerun adds nothing."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator

import pyarrow.fs as pafs
import pytest

from bkledger.bookie.local.zookeeper import free_port  # claimed machine-wide: parallel workers
from bkledger.client import BookKeeper
from bkledger.client.log.core import offload as ol
from bkledger.client.log.offload import join_payloads
from bkledger.client.log.offload_store import table_store
from tests.integration.conftest import start_cluster
from tests.integration.test_log_offload import read_all, write

pytestmark = pytest.mark.integration
BUCKET = "bkledger-offload"
KEYS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1"}


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    """moto_server on 127.0.0.1 (its own process: in-process moto hangs deltalake's history())."""
    server = shutil.which("moto_server", path=os.path.dirname(sys.executable))
    if server is None:
        pytest.skip("moto_server is not installed: pip install 'bkledger[s3test]' (moto[server])")
    port = free_port()
    proc = subprocess.Popen([server, "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/moto-api/", timeout=2).close()
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, "moto_server did not start"
                time.sleep(0.1)
        yield f"127.0.0.1:{port}"
    finally:
        proc.kill()
        proc.wait(10)


@pytest.fixture
def s3_env(s3_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> pafs.S3FileSystem:
    for key, value in KEYS.items():
        monkeypatch.setenv(key, value)
    fs = pafs.S3FileSystem(endpoint_override=s3_endpoint, scheme="http", allow_bucket_creation=True)
    fs.create_dir(BUCKET)
    return fs


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, zookeeper) -> Iterator:
    made = start_cluster(tmp_path_factory.mktemp("offload-s3"), zookeeper, 3)
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


def test_offload_to_s3_reads_back_across_the_seam(bk, s3_env, s3_endpoint, tmp_path):
    """Offload to s3://bucket/prefix?endpoint_override=...&scheme=http; every record back byte for byte from
    open_log_reader with the bookie copies gone; deltalake reads exactly the offloaded records."""
    from deltalake import DeltaTable

    name = f"log-{uuid.uuid4().hex[:8]}"
    store = f"s3://{BUCKET}/tables?endpoint_override={s3_endpoint}&scheme=http"
    positions = write(bk, name, 40, 4, enveloped=True)
    before = read_all(bk, name)
    done = bk.offload_log(name, store)
    assert done.table_uri == f"s3://{BUCKET}/tables/{name}" and done.entries == 32 and done.version == 1
    assert bk.offload_log(name).files == []
    meta = bk.log_metadata(name)
    bk.delete_ledgers(sorted({p.ledger_id for p in positions})[:8])
    assert read_all(bk, name) == before
    assert read_all(bk, name, positions[13]) == before[13:]
    table = table_store(store, name)
    assert table.options["AWS_ENDPOINT_URL"] == f"http://{s3_endpoint}"
    dt = DeltaTable(table.uri, storage_options=dict(table.options))
    assert dt.transaction_version(ol.app_id(name)) == 1
    rows = dt.to_pyarrow_dataset(filesystem=pafs.SubTreeFileSystem(table.root, s3_env)).to_table()
    got = sorted(zip(rows.column("ledger_id").to_pylist(), rows.column("entry_id").to_pylist(),
                     join_payloads(rows, meta.ledgers[0].envelope or 0), strict=True))
    assert got == [(p.ledger_id, p.entry_id, data) for p, data in before[:32]]
