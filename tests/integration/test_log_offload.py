"""Offload of a log's sealed ledgers to a Delta table on real bookies and a real ZooKeeper: the same
records at the same positions before and after, read by `open_log_reader` across the seam and by
`deltalake` from the table; positions held before still resolve; reruns add nothing twice; compaction
and offload compose; the CLI verb does the same."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from bkledger.bookie.cli import main as cli_main
from bkledger.client import BookKeeper
from bkledger.client.errors import InvalidOptionError, NoSuchLedgerError, OffloadError
from bkledger.client.log.core import compaction as cp
from bkledger.client.log.core import offload as ol
from bkledger.client.log.core.meta import Position
from bkledger.client.log.offload import join_payloads
from bkledger.client.log.store import log_path
from bkledger.spark_connector import envelope as env

pytestmark = pytest.mark.integration


@pytest.fixture
def name() -> str:
    return f"log-{uuid.uuid4().hex[:8]}"


def read_all(bk: BookKeeper, name: str, start: object = "earliest") -> list[tuple[Position, bytes]]:
    with bk.open_log_reader(name, start) as reader:  # type: ignore[arg-type]
        return [(r.position, r.payload) for r in reader.read(timeout=0.5)]


def write(bk: BookKeeper, name: str, count: int, per_ledger: int, *, enveloped: bool, first: int = 0
          ) -> list[Position]:
    def record(i: int) -> bytes:
        if not enveloped:
            return b"rec-%05d" % i
        key = None if i % 3 == 0 else b"k%d" % (i % 7)
        stamp = None if i % 5 == 0 else 1_700_000_000_000_000 + i
        return env.encode(key, stamp, b"value-%05d" % i)

    with bk.open_log_writer(name, roll_entries=per_ledger, envelope=1 if enveloped else 0) as w:
        return [w.append(record(i)) for i in range(first, first + count)]


def table_rows(bk: BookKeeper, name: str) -> list[tuple[Position, bytes]]:
    """Every row of the log's Delta table as (position, payload), read with deltalake (a SubTreeFileSystem:
    the abort-at-exit pitfall), in the table's file order sorted by position."""
    from deltalake import DeltaTable

    meta = bk.log_metadata(name)
    uri = ol.state(meta).uri
    assert uri is not None
    root = f"{uri}/{ol.table_dir(name)}"
    dt = DeltaTable(root)
    rows = dt.to_pyarrow_dataset(filesystem=pafs.SubTreeFileSystem(root, pafs.LocalFileSystem())).to_table()
    envelopes = {led.offloaded[0]: led.envelope for led in meta.ledgers if led.offloaded is not None}
    kinds = set(envelopes.values())
    assert len(kinds) <= 1
    payloads = join_payloads(rows, kinds.pop() or 0 if kinds else 0)
    got = [(Position(lid, eid), p) for lid, eid, p in zip(rows.column("ledger_id").to_pylist(),
                                                          rows.column("entry_id").to_pylist(), payloads, strict=True)]
    return sorted(got)


@pytest.mark.parametrize("enveloped", [False, True])
def test_offload_then_read_back_byte_for_byte(bk, name, tmp_path, enveloped):
    """Sealed ledgers go to the table, all but the last two; open_log_reader returns every record, in order,
    same bytes at the same positions, across the seam (from the start and from positions held before);
    deltalake reads exactly the offloaded records from the table; the log's offsets still hold."""
    positions = write(bk, name, 60, 5, enveloped=enveloped)
    before = read_all(bk, name)
    assert [p for p, _ in before] == positions
    done = bk.offload_log(name, str(tmp_path / "store"))
    meta = bk.log_metadata(name)
    ledgers = sorted({p.ledger_id for p in positions})
    assert done.run == 1 and done.version == 1 and done.entries == 50
    assert [ids for _, ids in done.files] == [ledgers[:10]]
    assert meta.logical_ids == ledgers
    assert [led.offloaded is not None for led in meta.ledgers] == [True, False, False]
    assert read_all(bk, name) == before
    for at in (0, 3, 25, 49, 50, 51, 59):
        assert read_all(bk, name, positions[at]) == before[at:]
    assert table_rows(bk, name) == before[:50]
    bk.delete_ledgers(ledgers[:10])                 # the bookie copies gone: the history is the table's alone
    assert read_all(bk, name) == before
    assert read_all(bk, name, positions[12]) == before[12:]
    rec = meta.ledgers[0]
    assert rec.first_position == 0 and rec.entries == 50 and meta.ledgers[1].first_position == 50


def test_reruns_add_nothing_twice_and_later_runs_extend_the_table(bk, name, tmp_path):
    """A second run right after the first has nothing to do; after more writes a second run offloads the
    next sealed ledgers (run 2, table version 1); the table holds each record once; another store is
    refused (the log records its own)."""
    store = str(tmp_path / "store")
    positions = write(bk, name, 20, 4, enveloped=False)
    first = bk.offload_log(name, store)
    again = bk.offload_log(name)
    assert first.run == 1 and again.run == 1 and again.files == []
    positions += write(bk, name, 20, 4, enveloped=False, first=20)
    before = read_all(bk, name)
    assert [p for p, _ in before] == positions
    second = bk.offload_log(name)
    assert second.run == 2 and second.version == 2
    meta = bk.log_metadata(name)
    assert [led.offloaded is not None for led in meta.ledgers] == [True, True, False, False]
    assert read_all(bk, name) == before
    assert table_rows(bk, name) == before[:meta.ledgers[2].first_position]
    with pytest.raises(InvalidOptionError, match="offloads to"):
        bk.offload_log(name, str(tmp_path / "elsewhere"))


def test_compaction_and_offload_compose(bk, name, tmp_path):
    """Compacted ledgers are offloaded by their logical ledgers (positions kept); compaction leaves
    offloaded records alone; the compacted bookie ledger the log no longer lists is named in the log's
    `offloaded-<run>` znode, and delete_log deletes it with the rest."""
    positions = write(bk, name, 36, 3, enveloped=False)
    before = read_all(bk, name)
    bk.compact_log(name, target_bytes=1 << 20, min_ledgers=2, grace_s=0)
    compacted = bk.log_metadata(name).ledgers[0].ledger_id
    assert len(bk.log_metadata(name).ledgers) == 3
    done = bk.offload_log(name, str(tmp_path / "store"))
    got = bk.store.get(f"{log_path(bk.store, name)}/{ol.unlisted_znode(1)}")
    assert got is not None and compacted in cp.decode_pending(got[0])
    assert done.entries == 30
    assert read_all(bk, name) == before
    assert read_all(bk, name, positions[7]) == before[7:]
    assert table_rows(bk, name) == before[:30]
    assert bk.compact_log(name, target_bytes=1 << 20, min_ledgers=2, grace_s=0).compacted == []
    bk.delete_log(name)
    with pytest.raises(NoSuchLedgerError):
        bk.ledger_metadata(compacted)


def test_cli_offload_and_describe_show_tiers(bk, name, cluster, tmp_path, capsys):
    """`bkledger log offload NAME --store URI` offloads; `bkledger log describe` shows the tiers."""
    write(bk, name, 12, 3, enveloped=False)
    before = read_all(bk, name)
    uri = ["--uri", cluster.metadata_service_uri]
    assert cli_main(["log", "offload", name, "--store", str(tmp_path / "store"), "--json", *uri]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["run"] == 1 and out["entries"] == 6
    assert read_all(bk, name) == before
    assert cli_main(["log", "tail", name, "--json", "--timeout", "0.5", *uri]) == 0
    tailed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(t["ledger_id"], t["entry_id"]) for t in tailed] == [(p.ledger_id, p.entry_id) for p, _ in before]
    assert cli_main(["log", "describe", name, *uri]) == 0
    text = capsys.readouterr().out
    assert "offloaded" in text and "on bookies" in text and str(Path(tmp_path / "store")) in text


def test_spark_planning_reads_offloaded_ledgers_from_the_table(bk, name, tmp_path):
    """Issue 42 item 3: after an offload, format("bkledger") plans the same ledgers at the same positions,
    the offloaded ones from the table's files (no read of bookie copies that may be gone), the last two
    from the bookies."""
    from bkledger.spark_connector.batch_reader import discover
    from bkledger.spark_connector.read_options import parse_read_options

    write(bk, name, 12, 3, enveloped=False)
    opts = parse_read_options({"log": name, "metadataserviceuri": "zk://unused/ledgers"})
    before = discover(bk, opts)
    assert before and all(v.offloaded is None for v in before)              # planned from bookies before
    bk.offload_log(name, str(tmp_path / "store"))
    after = discover(bk, opts)
    assert [(v.ledger_id, v.last_entry_id) for v in after] == [(v.ledger_id, v.last_entry_id) for v in before]
    assert [v.offloaded is not None for v in after] == [True] * (len(after) - 2) + [False, False]


def test_a_log_changed_between_commit_and_swap_keeps_table_and_log_equal(bk, name, tmp_path, monkeypatch):
    """A truncation that lands after the Delta commit and before the swap: the files of the truncated
    ledgers are not swapped in and are removed from the table; the rest are; readers of the log and of
    the table see the same offloaded records, once."""
    from bkledger.client.log import offload_store

    positions = write(bk, name, 24, 3, enveloped=False)
    ledgers = sorted({p.ledger_id for p in positions})
    real_commit = offload_store.commit

    def commit_then_truncate(*args: object, **kwargs: object) -> int:
        version = real_commit(*args, **kwargs)
        bk.truncate_log(name, before=Position(ledgers[2], 0))
        return version

    monkeypatch.setattr(offload_store, "commit", commit_then_truncate)
    done = bk.offload_log(name, str(tmp_path / "store"), max_file_bytes=60)      # two ledgers a file
    monkeypatch.undo()
    assert len(done.removed) == 1 and done.removed[0].startswith(f"run-00000001-{ledgers[0]}-{ledgers[1]}-")
    assert [ids for _, ids in done.files] == [ledgers[2:4], ledgers[4:6]]
    after = read_all(bk, name)
    assert after == read_all(bk, name, positions[6]) and [p for p, _ in after] == positions[6:]
    assert table_rows(bk, name) == after[:12]


def test_a_reader_in_the_middle_of_the_log_goes_on_across_an_offload(bk, name, tmp_path):
    """A reader that read part of the history from bookies when the offload lands (and the bookie copies
    go) returns the rest exactly once, in order; a tailing reader then sees new records after the seam."""
    positions = write(bk, name, 30, 3, enveloped=False)
    before = read_all(bk, name)
    with bk.open_log_reader(name) as reader:
        got = [(r.position, r.payload) for r in reader.read(max_records=10, timeout=5)]
        bk.offload_log(name, str(tmp_path / "store"))
        bk.delete_ledgers(sorted({p.ledger_id for p in positions})[:8])
        got += [(r.position, r.payload) for r in reader.read(timeout=0.5)]
        assert got == before
        more = write(bk, name, 3, 3, enveloped=False, first=30)
        tail = [(r.position, r.payload) for r in reader.read(max_records=3, timeout=10)]
        assert [p for p, _ in tail] == more


def test_an_unusable_store_is_a_clear_error_and_the_log_stays_as_it_was(bk, name, tmp_path, capsys, cluster):
    """A store the table cannot be made in (below a plain file) raises OffloadError; nothing of the log
    changes; the CLI prints one line and exits 1."""
    write(bk, name, 12, 3, enveloped=False)
    before, meta = read_all(bk, name), bk.log_metadata(name)
    (tmp_path / "plain").write_text("not a folder")
    with pytest.raises(OffloadError, match="cannot be created"):
        bk.offload_log(name, str(tmp_path / "plain" / "store"))
    assert bk.log_metadata(name) == meta and read_all(bk, name) == before
    assert cli_main(["log", "offload", name, "--store", str(tmp_path / "plain" / "store"),
                     "--uri", cluster.metadata_service_uri]) == 1
    err = capsys.readouterr().err
    assert err.startswith("bkledger log offload: ") and "Traceback" not in err


def test_a_committed_file_offload_did_not_write_is_refused(bk, name, tmp_path):
    """The table names run 1 committed, but its file has no offload footer (written by someone else): the
    rerun that would swap it in raises OffloadError and the log is unchanged."""
    import pyarrow.parquet as pq

    from bkledger.client.log import offload_store

    write(bk, name, 12, 3, enveloped=False)
    before, meta = read_all(bk, name), bk.log_metadata(name)
    store = str(tmp_path / "store")
    table = offload_store.table_store(store, name)
    _, dt = offload_store.committed_run(table, ol.app_id(name))
    foreign = "run-00000001-0-0-zz.parquet"
    pq.write_table(offload_store.SCHEMA.empty_table(), table.path(foreign))
    offload_store.commit(table, dt, [(foreign, (tmp_path / "store" / name / foreign).stat().st_size,
                                      '{"numRecords":0}')], ol.app_id(name), 1)
    with pytest.raises(OffloadError, match="footer"):
        bk.offload_log(name, store)
    assert bk.log_metadata(name) == meta and read_all(bk, name) == before
